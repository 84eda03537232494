"""protocol.session.tasks: one active task per agent; only the owner's done; the first terminal
event wins; deadlines; a turn that ends without done is told, and is not completion."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from protocol.calls import api
from protocol.core.errors import AgentBusy, ErrorInfo, InvalidArgument, InvalidHandle, LimitExceeded
from protocol.records.journal import PromptRecord
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session import inbound
from protocol.session.effects import (
    Deliver,
    FinaliseNote,
    Journal,
    OpenNote,
    SpawnTask,
    StartTimer,
)
from protocol.wire.envelopes import ControlEnvelope, TaskDoneEnvelope, TaskEnvelope

from .harness import (
    T0,
    Session,
    TaskDue,
    answer,
    delivered,
    journaled,
    notes,
    of,
    receipt,
    snapshot,
)


def one_agent(**settings: object) -> tuple[Session, str, str]:
    s = Session(Settings(**settings))  # type: ignore[arg-type]
    a = s.spawn("scout")
    return s, a, s.delegate("scout", "count the files")


# ------------------------------------------------------------------ delegate


def test_a_delegated_task_is_journaled_then_handed_to_its_agent_and_running() -> None:
    s = Session()
    a = s.spawn("scout")
    effects = s.call(api.DelegateArgs(target="scout", task="count the files"))
    assert isinstance(effects[0], Journal) and isinstance(effects[1], OpenNote)
    record = effects[0].record
    assert isinstance(record, TaskRecord) and record.state is TaskState.CREATED
    (env,) = delivered(effects, TaskEnvelope, a)
    assert env.task_id == record.task_id and env.message_id == record.message_id
    assert env.content == "count the files" and env.deadline_at is None
    assert of(effects, StartTimer) == []  # no deadline asked, none by default
    assert answer(effects) == api.DelegateResult(
        task_id=record.task_id, agent_id=a, accepted=True, agent_name="scout"
    )
    task = s.state.tasks[record.task_id]
    assert task.state is TaskState.RUNNING and task.started_at == T0
    assert s.state.agents[a].active_task == record.task_id


def test_one_active_task_per_agent_but_messages_are_still_accepted() -> None:
    s, _, task_id = one_agent()
    error = s.call_refused(api.DelegateArgs(target="scout", task="more"), AgentBusy)
    assert task_id in error.message and "messages are still accepted" in error.message
    assert answer(s.parent_says("scout", "also this")).accepted


def test_a_settled_task_frees_the_slot_for_the_next_one() -> None:
    s, a, first = one_agent()
    s.done(a, summary="42")
    second = s.delegate("scout", "again")
    assert second != first and s.state.agents[a].active_task == second


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (api.DelegateArgs(target="scout", task="  \n"), InvalidArgument),
        (api.DelegateArgs(target="scout", task="x", timeout_minutes=0), InvalidArgument),
        (api.DelegateArgs(target="scout", task="x", timeout_minutes=-1), InvalidArgument),
        (api.DelegateArgs(target="nobody", task="x"), InvalidHandle),
        (api.DelegateArgs(target="scout", task="x" * 2000), LimitExceeded),
    ],
)
def test_a_bad_delegation_is_refused_and_changes_nothing(
    args: api.DelegateArgs, error: type[Exception]
) -> None:
    s = Session(Settings(max_envelope_bytes=1024))
    s.spawn("scout")
    s.call_refused(args, error)  # type: ignore[arg-type]


def test_a_closed_agent_takes_no_task() -> None:
    s = Session()
    s.spawn("scout")
    s.call(api.CloseArgs(agent="scout"))
    error = s.call_refused(api.DelegateArgs(target="scout", task="x"), InvalidHandle)
    assert "closed" in error.message


def test_a_prompt_is_a_task_and_its_id_an_alias_journaled_before_the_answer() -> None:
    s = Session()
    s.spawn("scout")
    effects = s.call(api.PromptArgs(target="scout", prompt="count"))
    result = answer(effects)
    assert journaled(effects, PromptRecord) == [
        PromptRecord(prompt_id=result.prompt_id, task_id=result.task_id)
    ]
    assert s.state.prompts == {result.prompt_id: result.task_id}


# ------------------------------------------------------------------ only the owner's done


def test_the_owners_done_settles_its_task_durably_before_anyone_hears() -> None:
    s, a, task_id = one_agent()
    s.now = T0 + 30
    effects = s.done(a, summary="42 files")
    kinds = [type(e) for e in effects]
    assert kinds.index(Journal) < kinds.index(FinaliseNote) < kinds.index(Deliver)
    result = s.state.results[task_id]
    assert (result.status, result.ok, result.return_code) == ("completed", True, 0)
    assert result.text == "42 files" and result.completed_at == T0 + 30
    ack = receipt(effects)
    assert ack.accepted and ack.result is not None and ack.result.task_id == task_id
    assert s.state.agents[a].active_task is None
    assert delivered(effects, ControlEnvelope) == []  # its own done: nothing to stop


@pytest.mark.parametrize(("status", "code"), [("blocked", 2), ("failed", 1)])
def test_done_blocked_or_failed_settles_with_its_return_code(status: str, code: int) -> None:
    s, a, task_id = one_agent()
    s.done(a, status=status, error="no access")
    assert s.state.results[task_id].return_code == code
    assert s.state.results[task_id].error == "no access"


def test_another_agents_done_is_forbidden_and_changes_nothing() -> None:
    s, _, task_id = one_agent()
    other = s.spawn("other")
    env = s.envelope(TaskDoneEnvelope, other, status="completed", task_id=task_id)
    ack = s.send_refused(env, "forbidden_sender")
    assert ack.target_id == other


def test_a_done_with_no_task_to_finish_is_refused() -> None:
    s = Session()
    a = s.spawn("scout")
    s.send_refused(s.envelope(TaskDoneEnvelope, a, status="completed"), "invalid_handle")
    unknown = s.envelope(TaskDoneEnvelope, a, status="completed", task_id="shepherd-task-0badc0de")
    s.send_refused(unknown, "invalid_handle")


def test_done_completed_with_a_pending_question_is_refused_until_cancel_requests() -> None:
    s, a, task_id = one_agent()
    b = s.spawn("b")
    request_id = s.ask(a, b)
    s.send_refused(s.envelope(TaskDoneEnvelope, a, status="completed"), "unresolved_requests")
    s.done(a, cancel_requests=True)
    assert s.state.results[task_id].status == "completed"
    assert s.state.requests[request_id].state is RequestState.CANCELLED


def test_done_blocked_with_a_pending_question_cancels_it() -> None:
    s, a, task_id = one_agent()
    request_id = s.ask(a, s.spawn("b"))
    s.done(a, status="blocked")
    assert s.state.results[task_id].status == "blocked"
    assert s.state.requests[request_id].state is RequestState.CANCELLED


# ------------------------------------------------------------------ first terminal event wins

Settler = Callable[[Session, str, str], object]

SETTLERS: dict[str, tuple[Settler, str]] = {
    "done": (lambda s, a, t: s.done(a, task_id=t, summary="ok"), "completed"),
    "done_blocked": (lambda s, a, t: s.done(a, task_id=t, status="blocked"), "blocked"),
    "cancel": (lambda s, a, t: s.call(api.CancelArgs(task_id=t)), "cancelled"),
    "fail": (lambda s, a, t: s.call(api.FailArgs(task_id=t, error="no")), "failed"),
    "exit": (lambda s, a, t: s.exit(a, 1), "failed"),
    "close": (lambda s, a, t: s.call(api.CloseArgs(agent=a)), "cancelled"),
    "deadline": (lambda s, a, t: s.pass_deadline(t), "timed_out"),
    "not_delivered": (
        lambda s, a, t: s.run(
            inbound.delivery_failed(
                s.state,
                s.envelope(TaskEnvelope, "shepherd", a, task_id=t, content="x"),
                ErrorInfo(code="limit_exceeded", message="inbox full"),
                s.ctx(),
            )
        ),
        "failed",
    ),
}


@pytest.mark.parametrize("second", list(SETTLERS))
@pytest.mark.parametrize("first", list(SETTLERS))
def test_the_first_terminal_event_wins_whoever_sends_it(first: str, second: str) -> None:
    s, a, task_id = one_agent(default_task_timeout_s=600.0)  # a deadline, for "deadline"
    settle_first, status = SETTLERS[first]
    settle_first(s, a, task_id)
    settled = s.state.tasks[task_id]
    assert settled.state.value == status
    journal = len(s.journal)
    s.now += 5
    SETTLERS[second][0](s, a, task_id)
    assert s.state.tasks[task_id] == settled
    assert [r for r in s.journal[journal:] if isinstance(r, TaskRecord)] == []


def test_a_second_settlement_by_the_parent_is_answered_with_the_stored_result() -> None:
    s, a, task_id = one_agent()
    s.done(a, summary="42")
    before = snapshot(s.state)
    result = answer(s.call(api.CancelArgs(task_id=task_id, reason="too slow")))
    assert result.already_settled and result.status == "completed" and result.text == "42"
    assert snapshot(s.state) == before


def test_a_redelivered_done_is_answered_with_the_stored_result() -> None:
    s, a, task_id = one_agent()
    s.call(api.CancelArgs(task_id=task_id))
    effects = s.done(a, task_id=task_id, summary="late")
    ack = receipt(effects)
    assert ack.accepted and ack.result is not None and ack.result.status == "cancelled"


def test_the_parents_cancel_stops_the_agents_work_with_the_reason() -> None:
    s, a, task_id = one_agent()
    effects = s.call(api.CancelArgs(task_id=task_id))
    result = answer(effects)
    assert not result.already_settled and result.status == "cancelled"
    assert result.error == "cancelled by the parent"
    (control,) = delivered(effects, ControlEnvelope, a)
    assert control.action == "cancel_task" and control.task_id == task_id
    assert control.reason == f"task {task_id} cancelled: cancelled by the parent"
    assert notes(effects) == []  # the control carries the reason; no separate notice


@pytest.mark.parametrize("handle", ["shepherd-task-0badc0de", "shepherd-agent-00000001", "x"])
def test_settling_what_is_not_a_task_of_this_session_is_refused(handle: str) -> None:
    s, _, _ = one_agent()
    s.call_refused(api.CancelArgs(task_id=handle), InvalidHandle)
    s.call_refused(api.FailArgs(task_id=handle, error="no"), InvalidHandle)


def test_a_task_not_delivered_fails_and_the_parent_hears_of_it() -> None:
    s, a, task_id = one_agent()
    effects = SETTLERS["not_delivered"][0](s, a, task_id)
    assert isinstance(effects, list)
    (note,) = notes(effects, Notice)
    assert note.code == "not_delivered" and note.refs == (task_id,)
    # the notice names whom it was for and which task, not only its refs
    assert (note.agent_id, note.task_id) == (a, task_id)
    assert s.state.results[task_id].error == "task could not be delivered: inbox full"


# ------------------------------------------------------------------ deadlines


def test_a_task_deadline_is_armed_and_times_the_task_out_when_it_passes() -> None:
    s = Session()
    s.spawn("scout")
    effects = s.call(api.DelegateArgs(target="scout", task="x", timeout_minutes=2))
    task_id = answer(effects).task_id
    assert of(effects, SpawnTask)[0].record.deadline_at == T0 + 120  # its actor arms it
    assert s.deadline_armed(task_id) == T0 + 120
    assert s.state.tasks[task_id].deadline_at == T0 + 120
    s.now = T0 + 120
    s.fire_timer(("deadline", task_id))
    result = s.state.results[task_id]
    assert (result.status, result.return_code) == ("timed_out", 124)
    assert result.error == "task deadline passed before the agent called done"


def test_the_default_task_timeout_applies_when_delegate_gives_none() -> None:
    s, _, task_id = one_agent(default_task_timeout_s=30.0)
    assert s.deadline_armed(task_id) == T0 + 30
    assert s.state.tasks[task_id].deadline_at == T0 + 30


def test_settling_cancels_the_deadline_and_a_late_deadline_changes_nothing() -> None:
    s, a, task_id = one_agent(default_task_timeout_s=30.0)
    s.done(a)
    assert ("deadline", task_id) not in s.timers  # its actor cancelled it as it settled
    before = snapshot(s.state)
    assert s.fire(TaskDue(task_id=task_id, at=T0 + 30)) == []  # it may still arrive
    assert snapshot(s.state) == before


# ------------------------------------------------------------------ turns without done


def test_a_turn_that_ends_without_done_is_told_with_its_tail_and_is_not_completion() -> None:
    s, a, task_id = one_agent()
    s.runtime(a, "turn_start")
    s.runtime(a, "output", text="thinking\nstill thinking")
    s.now = T0 + 7
    effects = s.runtime(a, "turn_end", exit_code=2)
    (note,) = notes(effects, Notice)
    assert note.code == "turn_ended_without_done" and note.task_id == task_id
    assert "(exit status 2)" in note.text
    assert note.text.endswith("Its output ends:\n  thinking\n  still thinking")
    assert s.state.tasks[task_id].state is TaskState.RUNNING
    assert s.state.agents[a].active_task == task_id
    stats = s.state.turn_stats[task_id]
    assert (stats.count, stats.ended_at, stats.exit_code) == (1, T0 + 7, 2)
    s.runtime(a, "turn_start")
    (again,) = notes(s.runtime(a, "turn_end", is_error=True), Notice)
    assert "(with an error)" in again.text
    assert s.state.turn_stats[task_id].count == 2


def test_a_turn_that_began_before_the_task_was_delegated_is_not_its_turn() -> None:
    s = Session()
    a = s.spawn("scout")
    s.runtime(a, "turn_start", created_at=T0 - 1)
    task_id = s.delegate("scout")
    assert notes(s.runtime(a, "turn_end")) == []
    assert task_id not in s.state.turn_stats


def test_a_turn_that_ends_waiting_for_a_reply_is_what_the_agent_should_do() -> None:
    s, a, task_id = one_agent()
    s.ask(a, s.spawn("b"))
    s.runtime(a, "turn_start")
    assert notes(s.runtime(a, "turn_end")) == []
    assert task_id not in s.state.turn_stats


def test_a_turn_without_a_task_ends_quietly_and_settling_forgets_the_count() -> None:
    s = Session()
    a = s.spawn("scout")
    s.runtime(a, "turn_start")
    assert notes(s.runtime(a, "turn_end")) == []
    task_id = s.delegate("scout")
    s.runtime(a, "turn_start")
    s.runtime(a, "turn_end")
    s.done(a)
    assert task_id not in s.state.turn_stats
