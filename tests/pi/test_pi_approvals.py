"""Approvals with a REAL Pi child against the scripted model: a tool call gated by
``spawn --approve 'bash:git push*'`` waits for the parent (the task is ``waiting``, the tool has
not run), then runs once approved, or returns the denial to the model; the
``shepherd_request_approval`` tool blocks until the parent answers."""

from __future__ import annotations

from typing import Any

import pytest

from actors.child.scripted_model import ScriptedModel, Step, Text, ToolCall
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskState
from tests.pi.test_pi_live import WAIT_S, Team, completions

pytestmark = [pytest.mark.pi, pytest.mark.timeout(300)]

#: a generous ceiling: Pi's start and the approval call's own Python start-up each take many
#: seconds on a loaded machine (measured: Pi ready in 11 s at a load average of 35)
SLOW_S = 3 * WAIT_S


PUSH = "git push --dry-run origin main 2>&1; echo PUSH-RAN"


def _spawn(team: Team, name: str, *steps: Step, approve: tuple[str, ...] = ()) -> ScriptedModel:
    return team.spawn_pi(name, *steps, approve=approve)


def _requested(team: Team) -> Notice:
    def found(items: list[Any]) -> list[Notice]:
        return [n for n in items if isinstance(n, Notice) and n.code == "approval_requested"]

    assert team.sink.wait_for(lambda items: bool(found(items)), SLOW_S), team.sink.items
    return found(team.sink.items)[0]


def _tool_results(request: dict[str, Any]) -> list[str]:
    """The text of every tool result a chat-completions request carries back to the model."""
    texts = []
    for message in request["messages"]:
        if message.get("role") != "tool":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        texts.append(str(content).strip())
    return texts


def _settled(team: Team, task_id: str) -> Any:
    assert team.sink.wait_for(
        lambda _: any(r.task_id == task_id for r in completions(team.sink)), SLOW_S
    )
    return next(r for r in completions(team.sink) if r.task_id == task_id)


def test_a_gated_git_push_waits_for_approval_then_runs_and_the_task_completes(
    team: Team,
) -> None:
    model = _spawn(
        team,
        "pusher",
        ToolCall("bash", {"command": "echo not-gated"}),
        ToolCall("bash", {"command": PUSH}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "pushed"}),
        approve=("bash:git push*",),
    )
    s = team.session
    task = s.delegate("pusher", "Publish the release.")
    s.watch(task.task_id)
    note = _requested(team)
    request_id = note.refs[0]
    assert note.task_id == task.task_id and PUSH in note.text and "bash:git push*" in note.text
    (row,) = s.status("pusher").agents
    assert row.task is not None and row.task.state is TaskState.WAITING
    # the ungated call ran; the gated one is held: the model has not had its result
    assert len(model.requests) == 2
    assert _tool_results(model.requests[1]) == ["not-gated"]
    s.approve(request_id, note="go")
    result = _settled(team, task.task_id)
    assert result.status == "completed" and result.text == "pushed"
    third = model.wait_for_requests(3, SLOW_S)[2]
    assert "PUSH-RAN" in _tool_results(third)[-1]


def test_a_denied_call_never_runs_and_the_model_gets_the_reason(team: Team) -> None:
    model = _spawn(
        team,
        "pusher",
        ToolCall("bash", {"command": PUSH}),
        ToolCall("shepherd_done", {"status": "blocked", "summary": "not allowed"}),
        approve=("bash:git push*", "write:/etc/*"),
    )
    s = team.session
    task = s.delegate("pusher", "Publish the release.")
    s.watch(task.task_id)
    request_id = _requested(team).refs[0]
    s.deny(request_id, "release freeze")
    result = _settled(team, task.task_id)
    assert result.status == "blocked"
    second = model.wait_for_requests(2, SLOW_S)[1]
    (told,) = _tool_results(second)
    assert "Denied by the parent: release freeze" in told and "PUSH-RAN" not in told


def test_the_request_approval_tool_blocks_until_the_parent_answers(team: Team) -> None:
    model = _spawn(
        team,
        "cleaner",
        ToolCall("shepherd_request_approval", {"message": "delete build/: it is stale"}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "cleaned"}),
        Text("ok"),
    )
    s = team.session
    task = s.delegate("cleaner", "Clean up.")
    s.watch(task.task_id)
    note = _requested(team)
    assert "delete build/: it is stale" in note.text
    assert s.status("cleaner").agents[0].task.state is TaskState.WAITING  # type: ignore[union-attr]
    s.approve(note.refs[0], note="only build/")
    assert _settled(team, task.task_id).status == "completed"
    second = model.wait_for_requests(2, SLOW_S)[1]
    assert _tool_results(second) == ["approved: only build/"]
