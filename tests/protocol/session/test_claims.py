"""Claims without work (protocol.session.claims): a completed done from a task that made no
tool call (and, in a worktree, changed no file) is told once as ``unverified_claim`` and
taken; ``spawn --require-evidence`` refuses it instead; a check, a tool call or a changed
file is evidence; nothing is judged where work cannot be seen."""

from __future__ import annotations

import pytest

from protocol.calls import api
from protocol.core.errors import InvalidArgument
from protocol.records.checks import CheckDone, Evidence
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskState
from protocol.records.worktrees import Snapshot, WorktreeChanges
from protocol.session import checks, status
from protocol.wire.envelopes import TaskDoneEnvelope

from .harness import Session, answer, notes
from .test_restore import restart
from .test_worktrees import probed, spawn_in_worktree


def claims_told(effects: list) -> list[Notice]:  # type: ignore[type-arg]
    return [n for n in notes(effects, Notice) if n.code == "unverified_claim"]


def spawn(s: Session, name: str = "worker", **kw: object) -> str:
    return str(answer(s.call(api.SpawnArgs(name=name, **kw))).agent_id)  # type: ignore[arg-type]


def tool_call(s: Session, agent: str) -> None:
    s.runtime(agent, "tool_call", tool="bash", command="make")


def test_a_claim_without_a_tool_call_is_told_once_and_taken() -> None:
    s = Session()
    agent = spawn(s)
    task_id = s.delegate("worker")
    s.now += 1.8
    effects = s.done(agent, summary="success")
    (told,) = claims_told(effects)
    assert told.task_id == task_id and told.agent_id == agent
    assert "no tool call" in told.text and "1.8 s" in told.text
    assert s.state.tasks[task_id].state is TaskState.COMPLETED  # taken all the same
    # once: the settled task says nothing more
    assert claims_told(s.done(agent)) == []


def test_a_tool_call_is_evidence_and_status_counts_them() -> None:
    s = Session()
    agent = spawn(s)
    task_id = s.delegate("worker")
    tool_call(s, agent)
    tool_call(s, agent)
    (row,) = status.view(s.state, "worker", s.now).agents
    assert row.task is not None and row.task.tool_calls == 2
    assert claims_told(s.done(agent)) == []
    assert s.state.tasks[task_id].state is TaskState.COMPLETED
    # a tool call before the task is not the task's
    tool_call(s, agent)
    s.delegate("worker", task="next")
    assert len(claims_told(s.done(agent))) == 1


def test_blocked_failed_and_verified_claims_are_not_judged() -> None:
    s = Session()
    agent = spawn(s)
    for said in ("blocked", "failed"):
        s.delegate("worker", task=said)
        assert claims_told(s.done(agent, status=said)) == []
    task_id = s.delegate("worker", verify="true")
    s.done(agent)
    ev = Evidence(command="true", attempt=1, exit_status=0, duration_s=0.1)
    effects = s.run(checks.checked(s.state, CheckDone(task_id=task_id, evidence=ev), s.ctx()))
    assert s.state.tasks[task_id].state is TaskState.COMPLETED and claims_told(effects) == []


def test_a_command_agent_outside_a_worktree_is_not_judged() -> None:
    s = Session()
    agent = spawn(s, adapter="command", cmd="agent {message}")
    s.delegate("worker")
    assert claims_told(s.done(agent)) == []


def test_in_a_worktree_the_claim_is_judged_by_its_changes_once_listed() -> None:
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    for files, told in (((), 1), (("a.txt",), 0)):
        task_id = s.delegate("alpha")
        probed(s, kind="snapshot", task_id=task_id, agent_id=alpha, snapshot=Snapshot(head="h"))
        assert claims_told(s.done(alpha)) == []  # not yet: the changes are not listed
        listed = WorktreeChanges(branch="b/alpha", path="/w", files=files, count=len(files))
        effects = probed(s, kind="diff", task_id=task_id, agent_id=alpha, changes=listed)
        found = claims_told(effects)
        assert len(found) == told, (files, found)
        if found:
            assert "no file changed" in found[0].text and "no tool call" in found[0].text
    assert not s.state.unproven


def test_require_evidence_refuses_the_claim_and_the_task_stays_open() -> None:
    s = Session()
    agent = spawn(s, require_evidence=True)
    task_id = s.delegate("worker")
    ack = s.send_refused(s.envelope(TaskDoneEnvelope, agent, status="completed"), "no_evidence")
    assert ack.error is not None and "no tool call" in ack.error.message
    assert s.state.tasks[task_id].state is TaskState.RUNNING
    # blocked is not a claim of work: taken
    tool_call(s, agent)
    assert claims_told(s.done(agent)) == []
    assert s.state.tasks[task_id].state is TaskState.COMPLETED


def test_require_evidence_is_refused_where_tool_calls_are_not_reported() -> None:
    s = Session()
    error = s.call_refused(
        api.SpawnArgs(name="cmd", adapter="command", cmd="a {message}", require_evidence=True),
        InvalidArgument,
    )
    assert "require_evidence" in error.message and "--verify" in error.message


def test_after_a_restart_an_open_tasks_count_is_unknown_and_not_judged() -> None:
    s = Session()
    agent = spawn(s, require_evidence=True)
    task_id = s.delegate("worker")
    t, _ = restart(s)
    (row,) = status.view(t.state, "worker", t.now).agents
    assert row.task is not None and row.task.tool_calls is None
    effects = t.done(agent)  # not refused: its work before the restart is not known
    assert t.state.tasks[task_id].state is TaskState.COMPLETED and claims_told(effects) == []


@pytest.mark.parametrize("status", ["completed"])
def test_a_claim_told_names_its_turns_when_counted(status: str) -> None:
    s = Session()
    agent = spawn(s)
    s.delegate("worker")
    s.runtime(agent, "turn_start")
    (told,) = claims_told(s.done(agent, status=status))
    assert "1 turn " in told.text
