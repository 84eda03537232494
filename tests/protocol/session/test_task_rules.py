"""One task's own rules (:mod:`protocol.session.task`), without a runtime: what its actor
decides for each message, and what it reports."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.records.tasks import TaskEvent, TaskRecord, TaskState, start
from protocol.records.usage import BUDGET_EXCEEDED, Budget, Usage
from protocol.records.worktrees import WorktreeChanges
from protocol.session.task import (
    DEADLINE_PASSED,
    Attach,
    Detach,
    Due,
    End,
    Late,
    Listed,
    Moved,
    Noted,
    Refused,
    Settled,
    Spent,
    Sync,
    TaskMessage,
    Unchanged,
    deadline,
    decides_alone,
    minutes_end,
    receive,
)

T0 = 1000.0


def running() -> TaskRecord:
    record = TaskRecord(
        task_id="shepherd-task-1", agent_id="shepherd-agent-1", description="x", created_at=T0
    )
    return start(record, T0)


def test_a_request_opening_moves_the_task_to_waiting_and_is_reported() -> None:
    record, report = receive(running(), Attach(request_id="r1", at=T0 + 1))
    assert record.state is TaskState.WAITING and record.pending_requests == ("r1",)
    assert report == Moved(before=running(), after=record, opened="r1")
    # the same request again: nothing changes, nothing is said
    again, said = receive(record, Attach(request_id="r1", at=T0 + 2))
    assert again is record and said is None
    # another: still waiting, since the first
    record, report = receive(record, Attach(request_id="r2", at=T0 + 3))
    assert record.pending_requests == ("r1", "r2") and record.waiting_since == T0 + 1
    assert isinstance(report, Moved)


def test_it_runs_again_once_no_request_is_pending() -> None:
    record, _ = receive(running(), Attach(request_id="r1", at=T0))
    record, _ = receive(record, Attach(request_id="r2", at=T0))
    record, report = receive(record, Detach(request_id="r1"))
    assert record.state is TaskState.WAITING and isinstance(report, Moved)
    record, report = receive(record, Detach(request_id="r2"))
    assert record.state is TaskState.RUNNING and record.waiting_since is None
    assert isinstance(report, Moved)
    # a request it does not hold: nothing
    same, said = receive(record, Detach(request_id="r9"))
    assert same is record and said is None


def test_the_first_ending_wins_and_a_later_one_gets_its_result() -> None:
    record, report = receive(
        running(), End(event=TaskEvent.CANCEL, at=T0 + 5, error="why", then="a")
    )
    assert record.state is TaskState.CANCELLED and record.result is not None
    assert record.result.error == "why" and record.result.completed_at == T0 + 5
    assert report == Settled(before=running(), after=record, then="a")
    later, said = receive(record, End(event=TaskEvent.COMPLETE, at=T0 + 6, by_agent=True, then="b"))
    assert later is record and said == Unchanged(record=record, then="b")


def test_completed_with_a_pending_request_is_refused_and_nothing_moves() -> None:
    waiting, _ = receive(running(), Attach(request_id="r1", at=T0))
    record, report = receive(
        waiting, End(event=TaskEvent.COMPLETE, at=T0, cancel_requests=False, then="ack")
    )
    assert record is waiting
    assert isinstance(report, Refused) and report.then == "ack"
    assert report.error.code == "unresolved_requests" and "r1" in report.error.message
    # with cancel_requests it completes, and the dropped request is in the record before
    record, report = receive(waiting, End(event=TaskEvent.COMPLETE, at=T0, cancel_requests=True))
    assert isinstance(report, Settled) and report.before.pending_requests == ("r1",)
    assert record.state is TaskState.COMPLETED and record.pending_requests == ()


def test_a_request_reaching_a_settled_task_is_reported_late() -> None:
    settled, _ = receive(running(), End(event=TaskEvent.FAIL, at=T0))
    same, report = receive(settled, Attach(request_id="r1", at=T0 + 1))
    assert same is settled and report == Late(record=settled, request_id="r1")


def test_a_message_with_a_then_is_always_reported() -> None:
    record = running()
    for message in (Detach(request_id="r9", then=1), Sync(then=2)):
        same, report = receive(record, message)
        assert same is record and report == Noted(record=record, then=message.then)
    assert receive(record, Sync()) == (record, None)


def test_a_message_that_is_not_a_tasks_is_refused() -> None:
    with pytest.raises(TypeError):
        receive(running(), "cancel")  # type: ignore[arg-type]


def test_the_deadline_is_the_tasks_own_and_due_times_it_out_with_what_it_spent() -> None:
    record = msgspec.structs.replace(running(), deadline_at=T0 + 60)
    assert deadline(record) == T0 + 60  # its actor arms its timer for this
    spent = Usage(turns=2, tokens=700, cost=0.25)
    assert receive(record, Spent(usage=spent, at=T0)) == (record, None)  # kept by its actor
    settled, report = receive(record, Due(due=T0 + 60, at=T0 + 60, usage=spent))
    assert isinstance(report, Settled) and not report.by_agent and report.after == settled
    assert settled.state is TaskState.TIMED_OUT and deadline(settled) is None  # disarmed
    assert settled.result is not None and settled.result.usage == spent
    assert settled.result.error == DEADLINE_PASSED
    # a timer's mail that crossed the settlement, or a task without a deadline: nothing
    assert receive(settled, Due(due=T0 + 60, at=T0 + 61)) == (settled, None)
    assert deadline(running()) is None
    assert receive(running(), Due(due=T0 + 60, at=T0 + 61)) == (running(), None)


_messages = st.one_of(
    st.builds(Attach, request_id=st.sampled_from(["r1", "r2", "r3"]), at=st.just(T0)),
    st.builds(Detach, request_id=st.sampled_from(["r1", "r2", "r3"])),
    st.builds(
        End,
        event=st.sampled_from(
            [
                TaskEvent.COMPLETE,
                TaskEvent.BLOCK,
                TaskEvent.FAIL,
                TaskEvent.CANCEL,
                TaskEvent.TIME_OUT,
            ]
        ),
        at=st.just(T0),
        cancel_requests=st.booleans(),
    ),
    st.builds(Sync, then=st.none() | st.just("t")),
    st.builds(Due, due=st.just(T0), at=st.just(T0)),
    st.builds(Spent, usage=st.builds(Usage, tokens=st.sampled_from([50, 150])), at=st.just(T0)),
)


@given(st.lists(_messages, max_size=30))
def test_any_sequence_settles_at_most_once_and_waits_iff_a_request_is_pending(
    messages: list[TaskMessage],
) -> None:
    record = msgspec.structs.replace(running(), budget=Budget(max_tokens=100))  # Spent may end it
    settlements = 0
    for message in messages:
        before = record
        record, report = receive(record, message)
        if isinstance(report, Settled):
            settlements += 1
            assert report.before == before and report.after == record
        if report is None or isinstance(report, Noted | Late | Unchanged | Refused):
            assert record is before, "only a move or a settlement changes the record"
        if not record.terminal:
            assert (record.state is TaskState.WAITING) == bool(record.pending_requests)
        else:
            assert record.pending_requests == () and record.result is not None
    assert settlements <= 1
    assert settlements == int(record.terminal)


def test_what_it_spent_over_its_budget_fails_it_alone_and_below_changes_nothing() -> None:
    record = msgspec.structs.replace(running(), budget=Budget(max_tokens=100, max_cost=1.0))
    assert decides_alone(record)
    at_limit = Spent(usage=Usage(tokens=100, cost=1.0), at=T0 + 1)
    assert receive(record, at_limit) == (record, None)  # at a limit is not over it
    spent = Usage(turns=1, tokens=101, cost=0.5)
    settled, report = receive(record, Spent(usage=spent, at=T0 + 2))
    assert isinstance(report, Settled) and report.alone and not report.by_agent
    assert report.before == record and report.after == settled
    assert settled.state is TaskState.FAILED and settled.result is not None
    assert settled.result.reason == BUDGET_EXCEEDED and settled.result.usage == spent
    assert settled.result.error == (
        f"{BUDGET_EXCEEDED}: the task used 101 tokens, over its max_tokens of 100"
    )
    assert settled.result.completed_at == T0 + 2
    # money over, to the micro-dollar
    _, cost = receive(record, Spent(usage=Usage(cost=1.000001), at=T0 + 2))
    assert isinstance(cost, Settled) and cost.after.result is not None
    assert cost.after.result.error == (
        f"{BUDGET_EXCEEDED}: the task used 1.000001 US dollars, over its max_cost of 1"
    )
    # settled first, or no budget: nothing (a Spent with a then is still answered)
    assert receive(settled, Spent(usage=Usage(tokens=500), at=T0 + 3)) == (settled, None)
    plain = running()
    assert receive(plain, Spent(usage=Usage(tokens=10**9), at=T0)) == (plain, None)
    assert receive(plain, Spent(usage=Usage(), at=T0, then=7)) == (
        plain,
        Noted(record=plain, then=7),
    )
    # an ending the session routed is not the task's alone
    _, routed = receive(record, End(event=TaskEvent.FAIL, at=T0 + 2, error="x"))
    assert isinstance(routed, Settled) and not routed.alone


def test_its_budgets_minutes_end_on_the_same_timer_and_the_earlier_end_decides() -> None:
    minutes = msgspec.structs.replace(running(), budget=Budget(max_minutes=2))
    assert minutes_end(minutes) == T0 + 120 == deadline(minutes)
    both = msgspec.structs.replace(minutes, deadline_at=T0 + 300)
    assert deadline(both) == T0 + 120  # the earlier of the two
    failed, report = receive(both, Due(due=T0 + 120, at=T0 + 120))
    assert isinstance(report, Settled) and failed.state is TaskState.FAILED
    assert failed.result is not None and failed.result.reason == BUDGET_EXCEEDED
    assert failed.result.error == f"{BUDGET_EXCEEDED}: the task ran past its max_minutes of 2"
    # the deadline first: a time-out, whatever the minutes
    early = msgspec.structs.replace(minutes, deadline_at=T0 + 60)
    timed_out, _ = receive(early, Due(due=T0 + 60, at=T0 + 60))
    assert timed_out.state is TaskState.TIMED_OUT
    # an instant neither end has reached (an end since moved): nothing, the task runs on
    assert receive(both, Due(due=T0 + 100, at=T0 + 100)) == (both, None)
    # a queued task's minutes do not run: none until it starts
    queued = TaskRecord(
        task_id="shepherd-task-2",
        agent_id="shepherd-agent-1",
        description="x",
        created_at=T0,
        state=TaskState.QUEUED,
        budget=Budget(max_minutes=2),
    )
    assert deadline(queued) is None and minutes_end(queued) is None


def test_its_worktree_changes_are_added_to_its_settled_result_once() -> None:
    listed = WorktreeChanges(branch="b", path="/w", files=("a.txt",), count=1)
    # open: there is no result to add them to
    record, report = receive(running(), Listed(changes=listed))
    assert record == running() and report is None
    settled, _ = receive(running(), End(event=TaskEvent.COMPLETE, at=T0 + 1, by_agent=True))
    after, report = receive(settled, Listed(changes=listed, then="go on"))
    assert after.result is not None and after.result.changes == listed
    assert after.state is settled.state and after.result.completed_at == T0 + 1
    assert report == Moved(before=settled, after=after, then="go on")
    # listed once: a second list changes nothing (what the session asked after it still comes)
    again, said = receive(after, Listed(changes=WorktreeChanges(branch="b", path="/w")))
    assert again is after and said is None
    _, said = receive(after, Listed(changes=listed, then="x"))
    assert said == Noted(record=after, then="x")
