"""The ``acp`` adapter under the parent's ``hold``: no prompt starts until ``resume``, and what
was delivered meanwhile then runs, in order (a scripted ACP agent, a real bridge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.wire.envelopes import ControlEnvelope
from tests.acp.test_acp_bridge import lines, start
from tests.child.conftest import FakeParent

pytestmark = [pytest.mark.timeout(90)]


def test_a_held_acp_agent_starts_no_prompt_until_resume(parent: FakeParent) -> None:
    script = start(parent, [[{"say": "first"}], [{"say": "second"}]])
    parent.send(ControlEnvelope(**parent.base(), action="hold", reason="openai cools down"))
    held_at, _ = parent.wait_event("output", text=lambda t: t and "held by the parent" in t)
    parent.delegate("Do the first thing.")
    parent.message("And the second.", task_id=parent.task_id)
    first, _ = parent.wait_event(
        "output", after=held_at, text=lambda t: t and "no new turn until resume" in t
    )
    parent.wait_event(
        "output", after=first + 1, text=lambda t: t and "no new turn until resume" in t
    )
    assert lines(Path(f"{script}.prompts")) == []
    parent.send(ControlEnvelope(**parent.base(), action="resume"))
    end_at, _ = parent.wait_event("turn_end", after=held_at)
    parent.wait_event("turn_end", after=end_at + 1)
    prompts = lines(Path(f"{script}.prompts"))
    assert len(prompts) == 2
    assert "Do the first thing." in prompts[0] and "And the second." in prompts[1]
