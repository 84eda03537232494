"""Acceptance checks with a REAL Pi child (the scripted model server): Pi's ``shepherd_done``
claims completed, the parent's check fails, the notice reaches Pi as its next prompt (its
model sees the check's output), Pi fixes the work with its bash tool and claims again, and the
second attempt completes the task with its evidence. Nothing sleeps: the test waits on the
session's own ``wait``."""

from __future__ import annotations

import json

import pytest

from actors.child.scripted_model import Text, ToolCall
from protocol.records.notifications import Notice

# ``team``: the live scenarios' fixture (a real supervisor whose agents are real Pi processes)
from .test_pi_live import Team, team  # noqa: F401

pytestmark = [pytest.mark.pi, pytest.mark.timeout(120)]


def test_a_pi_claim_that_fails_its_check_is_fixed_and_then_completes(team: Team) -> None:  # noqa: F811
    model = team.spawn_pi(
        "worker",
        ToolCall("shepherd_done", {"status": "completed", "summary": "first claim"}),
        ToolCall("bash", {"command": "touch fixed"}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "fixed it"}),
        Text("done"),
    )
    s = team.session
    check = "test -f fixed || { echo 'fixed is missing'; exit 4; }"
    task = s.delegate("worker", "Make the file called fixed", verify=check)
    waited = s.wait([task.task_id], timeout_s=90)
    assert not waited.timed_out
    (result,) = waited.completed
    assert (result.status, result.text) == ("completed", "fixed it")
    assert result.evidence is not None and result.evidence.attempt == 2
    assert result.evidence.exit_status == 0 and (team.workdir / "fixed").exists()
    # the model was told why its first claim was not accepted, with the check's output
    second = model.requests[1]
    prompt = json.dumps(second["messages"])
    assert "was not accepted" in prompt and "fixed is missing" in prompt
    told = [n for n in team.sink.items if isinstance(n, Notice) and n.code == "verification_failed"]
    assert len(told) == 1 and told[0].task_id == task.task_id
