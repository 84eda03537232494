"""A real Pi, bridged, whose model provider refuses its turn (the scripted model answers 429
with a Retry-After, 529, or 500): the bridge reports ``rate_limited`` / ``provider_error``
with the provider, sends the model nothing more (Pi's own retries are off) until the parent's
``resume``, then the turn goes on and finishes. And the parent's ``hold``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.child.scripted_model import Fail, ScriptedModel, Text, ToolCall
from protocol.calls.render import render_delivery, render_task_context
from protocol.records.refusals import Refusal, render_resume_note
from protocol.wire.envelopes import AnyEnvelope, ControlEnvelope, RuntimeEnvelope, TaskDoneEnvelope
from tests.child.conftest import FakeParent
from tests.pi.test_pi_bridge import start_pi_bridge
from tests.pi.test_pi_live import user_texts

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]

#: longer than any retry Pi or its provider client would make on its own after a 2 s
#: Retry-After (Pi's auto-retry waits 2 s first; the OpenAI client waits the Retry-After)
NO_RETRY_WITHIN_S = 3.5
RATE_LIMIT = (
    "Rate limit reached for fake-model in organization org-test on requests per min (RPM): "
    "Limit 3, Used 3, Requested 1. Please try again in 2s."
)


def output_with(text: str) -> Callable[[AnyEnvelope], bool]:
    def match(env: AnyEnvelope) -> bool:
        return (
            isinstance(env, RuntimeEnvelope) and env.event == "output" and text in (env.text or "")
        )

    return match


def resume(parent: FakeParent) -> None:
    parent.send(ControlEnvelope(**parent.base(), action="resume"))


def test_a_429_is_reported_with_its_retry_after_and_nothing_runs_until_resume(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel
) -> None:
    model.add_steps(
        Fail(429, RATE_LIMIT, retry_after=2),
        ToolCall("shepherd_done", {"status": "completed", "summary": "went on"}),
        Text("the queued message, read"),
    )
    start_pi_bridge(parent, pi_bin, model)
    task = parent.delegate("Do the thing, then finish.")

    at, limited = parent.wait_event("rate_limited")
    assert (limited.provider, limited.retry_after_s) == ("fake", 2.0)
    assert limited.text is not None and limited.text.startswith("429 Rate limit reached")
    # Pi was told to retry nothing (read now: the bridge says ready before it starts Pi)
    settings = json.loads(
        (parent.session_dir / "agents" / parent.agent_id / "pi" / "settings.json").read_text()
    )
    assert settings["retry"] == {"enabled": False, "provider": {"maxRetries": 0}}
    end_at, ended = parent.wait_event("turn_end", after=at)
    assert ended.is_error
    events = [e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert not any(e.event == "error" for e in events)  # reported as what it is, once

    # waiting: a message is kept by the bridge, and the model is asked nothing more
    message = parent.message("Also this.", sender_id=parent.peer_id, sender_name="planner")
    parent.wait_for(output_with("queued: no new turn until resume"), after=end_at)
    with pytest.raises(TimeoutError):
        model.wait_for_requests(2, timeout=NO_RETRY_WITHIN_S)

    resume(parent)
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=end_at)
    assert isinstance(done, TaskDoneEnvelope) and done.summary == "went on"
    refused, again = model.wait_for_requests(2, timeout=60)[:2]
    note = render_resume_note(Refusal(kind="rate_limited", provider="fake"))
    assert user_texts(refused) == [render_task_context(task)]
    # the same conversation goes on: the task once, then the note (the errored answer is not
    # sent back to the model)
    assert user_texts(again) == [render_task_context(task), note]
    assert [m["role"] for m in again["messages"] if m["role"] != "system"] == ["user", "user"]
    # and the message that waited reaches Pi after it
    requests = model.wait_for_requests(3, timeout=60)
    assert render_delivery(message) in user_texts(requests[2])


@pytest.mark.parametrize(
    ("status", "words", "kind"),
    [(500, "Internal server error", "provider_error"), (529, "Overloaded", "rate_limited")],
)
def test_a_failed_model_call_is_reported_and_resumed(
    parent: FakeParent,
    pi_bin: Path,
    model: ScriptedModel,
    status: int,
    words: str,
    kind: str,
) -> None:
    model.add_steps(Fail(status, words), Text("recovered"))
    start_pi_bridge(parent, pi_bin, model)
    parent.delegate("Answer.")
    at, refused = parent.wait_event(kind)
    assert (refused.provider, refused.retry_after_s) == ("fake", None)
    assert refused.text == f"{status} {words}"
    end_at, _ = parent.wait_event("turn_end", after=at)
    assert len(model.requests) == 1
    resume(parent)
    start_at, _ = parent.wait_event("turn_start", after=end_at)
    _, ended = parent.wait_event("turn_end", after=start_at)
    assert not ended.is_error
    parent.wait_for(output_with("recovered"), after=start_at)
    assert len(model.requests) == 2


def test_a_held_pi_starts_no_turn_until_resume(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel
) -> None:
    model.add_steps(Text("after the hold"))
    start_pi_bridge(parent, pi_bin, model)
    parent.send(ControlEnvelope(**parent.base(), action="hold", reason="fake cools down"))
    held_at, _ = parent.wait_for(output_with("held by the parent: fake cools down"))
    task = parent.delegate("Answer after the hold.")
    parent.wait_for(output_with("queued: no new turn until resume"), after=held_at)
    assert model.requests == []
    resume(parent)
    start_at, _ = parent.wait_event("turn_start", after=held_at)
    parent.wait_event("turn_end", after=start_at)
    (request,) = model.requests
    assert user_texts(request) == [render_task_context(task)]


def test_a_cancelled_task_s_refused_turn_is_not_run_again(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel
) -> None:
    model.add_steps(Fail(500, "Internal server error"), Text("on to the next"))
    start_pi_bridge(parent, pi_bin, model)
    task = parent.delegate("Answer.")
    at, _ = parent.wait_event("provider_error")
    end_at, _ = parent.wait_event("turn_end", after=at)
    # a message waits for the resume...
    message = parent.message("Something else.", sender_id=parent.peer_id, sender_name="planner")
    queued_at, _ = parent.wait_for(output_with("queued: no new turn until resume"), after=end_at)
    # ...but the task is cancelled: its refused turn is dropped, the wait is over, and the
    # message goes at once, told that the task ended, without the refused turn's note
    parent.send(
        ControlEnvelope(
            **parent.base(), action="cancel_task", task_id=task.task_id, reason="failed"
        )
    )
    dropped_at, _ = parent.wait_for(output_with("the refused turn is dropped"), after=queued_at)
    start_at, _ = parent.wait_event("turn_start", after=dropped_at)
    parent.wait_event("turn_end", after=start_at)
    refused, then = model.requests
    texts = user_texts(then)
    assert texts[: len(user_texts(refused))] == user_texts(refused)
    assert texts[-1].endswith(render_delivery(message))
    assert f"Your task {task.task_id} was ended by the parent" in texts[-1]
    assert not any("continue where you stopped" in t for t in texts)
