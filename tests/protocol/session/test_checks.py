"""Acceptance checks (``delegate --verify``), through the session's rules without a runtime:
a claimed completion is ``verifying`` until its check's run ends; a pass completes it with the
evidence, a failed attempt sends it back to its agent, the last one fails it; endings during a
check end the check; a restarted parent runs it again."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.calls import api, api_batch
from protocol.core.errors import InvalidArgument
from protocol.records.checks import Check, CheckDone, Evidence
from protocol.records.notifications import Notice, TaskCompletion
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session import checks
from protocol.session.effects import Effect, RunCheck, StopCheck
from protocol.wire.envelopes import ControlEnvelope, NoticeEnvelope, TaskDoneEnvelope

from .harness import Session, answer, delivered, journaled, notes, of, receipt
from .test_restore import restart

CMD = "pytest -q tests/test_feature.py"


def session_with_agent(**spawn: object) -> tuple[Session, str]:
    s = Session()
    result = answer(s.call(api.SpawnArgs(name="worker", cwd="/work/repo", **spawn)))  # type: ignore[arg-type]
    return s, str(result.agent_id)


def evidence(attempt: int, status: int | None = 0, **kw: object) -> Evidence:
    return Evidence(
        command=CMD,
        attempt=attempt,
        exit_status=status,
        duration_s=1.5,
        output_tail=kw.pop("tail", ("1 passed",)),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def check_done(s: Session, task_id: str, ev: Evidence) -> list[Effect]:
    return s.run(checks.checked(s.state, CheckDone(task_id=task_id, evidence=ev), s.ctx()))


def claimed(s: Session, agent: str, task_id: str, summary: str = "all green") -> list[Effect]:
    """The agent says completed: the task verifies, its check is asked to run."""
    effects = s.done(agent, summary=summary)
    record = s.state.tasks[task_id]
    assert record.state is TaskState.VERIFYING
    ack = receipt(effects)
    assert ack.accepted and ack.result is None and ack.note is not None
    assert CMD in ack.note and f"attempt {record.attempt} of" in ack.note
    return effects


def test_a_check_that_passes_completes_the_task_with_its_evidence() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD)
    effects = claimed(s, agent, task_id)
    [run] = of(effects, RunCheck)
    assert run == RunCheck(
        task_id=task_id,
        agent_id=agent,
        agent_name="worker",
        check=Check(command=CMD),
        attempt=1,
        cwd="/work/repo",
    )
    # the verifying state is journaled before the check is asked for (a restart runs it again)
    [verifying] = [r for r in journaled(effects, TaskRecord) if r.task_id == task_id]
    assert verifying.state is TaskState.VERIFYING and verifying.claim == "all green"
    assert effects.index(next(e for e in effects if isinstance(e, RunCheck))) > 0
    assert s.state.tasks[task_id].state is TaskState.VERIFYING
    effects = check_done(s, task_id, evidence(1))
    record = s.state.tasks[task_id]
    assert record.state is TaskState.COMPLETED
    result = record.result
    assert result is not None and result.ok and result.text == "all green"
    assert result.evidence == evidence(1)
    # the agent's own claim, accepted: its work is not stopped
    assert not delivered(effects, ControlEnvelope, agent)


def test_a_failed_attempt_sends_the_task_back_and_tells_both_sides_then_a_pass_completes() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD, verify_attempts=2)
    claimed(s, agent, task_id)
    failed = evidence(1, 1, tail=("FAILED test_feature.py::test_x", "1 failed"))
    effects = check_done(s, task_id, failed)
    record = s.state.tasks[task_id]
    assert record.state is TaskState.RUNNING and record.attempt == 1 and record.result is None
    assert [r.state for r in journaled(effects, TaskRecord)] == [TaskState.RUNNING]
    [told] = delivered(effects, NoticeEnvelope, agent)
    assert told.code == "verification_failed" and told.ref_id == task_id
    assert CMD in told.text and "exit status 1" in told.text and "1 failed" in told.text
    assert "attempt 1 of 2; 1 left" in told.text
    [heard] = [n for n in notes(effects, Notice) if n.code == "verification_failed"]
    assert heard.task_id == task_id and "1 left" in heard.text and "1 failed" in heard.text
    # the agent fixes it and claims again: the second attempt
    effects = claimed(s, agent, task_id, summary="fixed")
    [run] = of(effects, RunCheck)
    assert run.attempt == 2
    check_done(s, task_id, evidence(2))
    result = s.state.tasks[task_id].result
    assert result is not None and result.status == "completed" and result.text == "fixed"
    assert result.evidence is not None and result.evidence.attempt == 2


def test_the_last_failed_attempt_fails_the_task_with_verification_failed() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD)
    watcher_id = answer(s.call(api.WatchArgs(ids=(task_id,)))).watcher_id
    for attempt in (1, 2):
        claimed(s, agent, task_id)
        effects = check_done(s, task_id, evidence(attempt, 3, tail=("boom",)))
    record = s.state.tasks[task_id]
    result = record.result
    assert result is not None and result.status == "failed" and not result.ok
    assert result.reason == "verification_failed"
    assert result.error is not None and result.error.startswith("verification_failed: ")
    assert CMD in result.error and "exit status 3" in result.error and "2 of 2" in result.error
    assert result.evidence == evidence(2, 3, tail=("boom",))
    # the agent is told its task ended (the parent ended it), as for any parent's ending
    [control] = delivered(effects, ControlEnvelope, agent)
    assert control.action == "cancel_task" and "verification_failed" in (control.reason or "")
    # the watcher hears the failure with its evidence
    (note,) = notes(s.fire_timer(("flush", watcher_id)), TaskCompletion)
    assert note.results[0].evidence == result.evidence


@pytest.mark.parametrize(
    "ev",
    [
        evidence(1, None, timed_out=True, error="killed at its timeout of 5 s", tail=()),
        evidence(1, None, error="the check could not start: No such file or directory", tail=()),
        evidence(1, 127, tail=("sh: 1: nosuchprogram: not found",)),
    ],
    ids=["timed-out", "could-not-start", "missing-program"],
)
def test_a_run_without_exit_status_zero_is_a_failed_attempt(ev: Evidence) -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD, verify_attempts=1)
    claimed(s, agent, task_id)
    check_done(s, task_id, ev)
    result = s.state.tasks[task_id].result
    assert result is not None and result.reason == "verification_failed"
    assert ev.outcome() in (result.error or "")


@pytest.mark.parametrize("ending", ["cancel", "fail", "deadline", "exit", "budget"])
def test_an_ending_during_a_check_ends_the_check_and_its_late_answer_changes_nothing(
    ending: str,
) -> None:
    s, agent = session_with_agent()
    first = {"deadline": {"timeout_minutes": 1}, "budget": {"max_minutes": 1}}.get(ending, {})
    limits: dict[str, Any] = {"timeout_minutes": 5, "max_minutes": 2} | first
    task_id = s.delegate("worker", verify=CMD, **limits)
    claimed(s, agent, task_id)
    if ending == "cancel":
        effects = s.call(api.CancelArgs(task_id=task_id, reason="enough"))
    elif ending == "fail":
        effects = s.call(api.FailArgs(task_id=task_id, error="wrong approach"))
    elif ending in ("deadline", "budget"):  # the earlier of the two: the task's own timer
        effects = s.pass_deadline(task_id)
    else:
        effects = s.exit(agent, 1)
    assert of(effects, StopCheck) == [StopCheck(task_id=task_id)]
    record = s.state.tasks[task_id]
    want = {"cancel": "cancelled", "deadline": "timed_out"}.get(ending, "failed")
    assert record.terminal and record.state.value == want
    before = msgspec.structs.replace(record)
    assert check_done(s, task_id, evidence(1)) == []
    assert s.state.tasks[task_id] == before


@pytest.mark.parametrize("status", ["blocked", "failed"])
def test_blocked_and_failed_are_never_verified(status: str) -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD)
    effects = s.done(agent, status=status)
    assert not of(effects, RunCheck)
    assert s.state.tasks[task_id].state.value == status


def test_done_while_verifying_is_refused_and_changes_nothing() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD)
    claimed(s, agent, task_id)
    for status in ("completed", "failed", "blocked"):
        env = s.envelope(TaskDoneEnvelope, agent, status=status)
        ack = s.send_refused(env, "invalid_transition")
        assert ack.error is not None and "being verified" in ack.error.message
    assert s.state.tasks[task_id].state is TaskState.VERIFYING


def test_a_question_asked_while_verifying_is_cancelled() -> None:
    s, agent = session_with_agent()
    s.call(api.SpawnArgs(name="peer"))
    task_id = s.delegate("worker", verify=CMD)
    claimed(s, agent, task_id)
    request_id = s.ask(agent, s.state.names["peer"])
    assert s.state.requests[request_id].state.value == "cancelled"
    assert s.state.tasks[task_id].state is TaskState.VERIFYING


def test_pending_questions_block_the_claim_unless_cancelled_then_they_are_cancelled() -> None:
    s, agent = session_with_agent()
    s.call(api.SpawnArgs(name="peer"))
    task_id = s.delegate("worker", verify=CMD)
    request_id = s.ask(agent, s.state.names["peer"])
    env = s.envelope(TaskDoneEnvelope, agent, status="completed")
    s.send_refused(env, "unresolved_requests")
    effects = s.done(agent, cancel_requests=True)
    assert of(effects, RunCheck)
    assert s.state.requests[request_id].state.value == "cancelled"
    assert s.state.tasks[task_id].pending_requests == ()


def test_the_agents_default_check_applies_and_a_delegations_own_wins() -> None:
    s, _ = session_with_agent(verify="make test", verify_attempts=3, verify_timeout_s=30.0)
    task_id = s.delegate("worker")
    assert s.state.tasks[task_id].check == Check(command="make test", attempts=3, timeout_s=30.0)
    s.call(api.CancelArgs(task_id=task_id))
    task_id = s.delegate("worker", verify=CMD, verify_timeout_s=9.0)
    assert s.state.tasks[task_id].check == Check(command=CMD, attempts=3, timeout_s=9.0)
    s.call(api.CancelArgs(task_id=task_id))
    plain, _ = session_with_agent()
    task_id = plain.delegate("worker")
    assert plain.state.tasks[task_id].check is None
    plain.call(api.CancelArgs(task_id=task_id))
    task_id = plain.delegate("worker", verify=CMD)  # the defaults: 2 attempts, 600 s
    assert plain.state.tasks[task_id].check == Check(command=CMD, attempts=2, timeout_s=600.0)


def test_delegate_many_items_take_their_own_check_or_the_calls() -> None:
    s = Session()
    for name in ("a", "b"):
        s.call(api.SpawnArgs(name=name))
    args = api_batch.DelegateManyArgs(
        items=(
            api_batch.DelegateItem(target="a", task="one", verify="true"),
            api_batch.DelegateItem(target="b", task="two"),
        ),
        verify=CMD,
        verify_attempts=4,
    )
    result = answer(s.call(args))
    one, two = (s.state.tasks[t] for t in result.task_ids)
    assert one.check == Check(command="true", attempts=4)
    assert two.check == Check(command=CMD, attempts=4)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"verify": ""}, "verify"),
        ({"verify": "x" * 70_000}, "verify"),
        ({"verify": CMD, "verify_attempts": 0}, "verify_attempts"),
        ({"verify": CMD, "verify_attempts": 11}, "verify_attempts"),
        ({"verify": CMD, "verify_timeout_s": -1}, "verify_timeout_s"),
        ({"verify": CMD, "verify_timeout_s": float("nan")}, "verify_timeout_s"),
        ({"verify": CMD, "verify_timeout_s": 1e9}, "verify_timeout_s"),
    ],
)
def test_hostile_check_values_are_refused_by_their_bounds(
    fields: dict[str, object], words: str
) -> None:
    for args in (
        {"target": "worker", "task": "t", **fields},
        {"name": "worker", **fields},
    ):
        cls = api.DelegateArgs if "target" in args else api.SpawnArgs
        with pytest.raises(InvalidArgument, match=words):
            api.build_args(cls, **args)


@pytest.mark.parametrize("command", ["   ", "echo a\0b"])
def test_blank_or_nul_commands_are_refused_at_delegate_and_spawn(command: str) -> None:
    s, _agent = session_with_agent()
    error = s.call_refused(
        api.DelegateArgs(target="worker", task="t", verify=command), InvalidArgument
    )
    assert "verify" in error.message
    error = s.call_refused(api.SpawnArgs(name="other", verify=command), InvalidArgument)
    assert "spawn: verify" in error.message


def test_an_agent_on_another_node_cannot_have_a_check() -> None:
    s = Session()
    error = s.call_refused(api.SpawnArgs(name="far", node="n1", verify=CMD), InvalidArgument)
    assert "node" in error.message


def test_a_stale_attempts_answer_changes_nothing() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD, verify_attempts=3)
    claimed(s, agent, task_id)
    check_done(s, task_id, evidence(1, 1))
    claimed(s, agent, task_id)
    before = s.state.tasks[task_id]
    assert check_done(s, task_id, evidence(1, 0)) == []  # attempt 1's, late: attempt 2 runs
    assert s.state.tasks[task_id] == before


def test_a_restarted_parent_runs_the_check_of_a_verifying_task_again_once() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD, verify_attempts=3)
    claimed(s, agent, task_id)
    check_done(s, task_id, evidence(1, 1))
    claimed(s, agent, task_id)
    t, effects = restart(s)
    record = t.state.tasks[task_id]
    assert record.state is TaskState.VERIFYING and record.attempt == 2
    assert record.claim == "all green"
    [run] = of(effects, RunCheck)
    assert run.task_id == task_id and run.attempt == 2 and run.cwd == "/work/repo"
    check_done(t, task_id, evidence(2))
    result = t.state.tasks[task_id].result
    assert result is not None and result.status == "completed" and result.evidence is not None
    # and a settled task's evidence comes back from the journal as it was
    u, effects = restart(t)
    assert not of(effects, RunCheck)
    assert u.state.tasks[task_id].result == result


def test_a_task_back_to_running_after_a_failed_attempt_is_restored_running() -> None:
    s, agent = session_with_agent()
    task_id = s.delegate("worker", verify=CMD)
    claimed(s, agent, task_id)
    check_done(s, task_id, evidence(1, 1))
    t, effects = restart(s)
    record = t.state.tasks[task_id]
    assert record.state is TaskState.RUNNING and record.attempt == 1
    assert not of(effects, RunCheck)
