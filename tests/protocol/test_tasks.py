"""protocol.records.tasks: the task state machine, exhaustively over its table and by property.

The table is checked against an independent copy written out here, then every
``(state, event)`` pair is driven through the public functions: listed pairs land on the
table's target, unlisted pairs raise ``invalid_transition`` and change nothing.
"""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.core.errors import InvalidTransition, UnresolvedRequests
from protocol.records.tasks import (
    RETURN_CODES,
    TERMINAL_STATES,
    TRANSITIONS,
    TaskEvent,
    TaskRecord,
    TaskResult,
    TaskState,
    close_request,
    event_for_done,
    open_request,
    queue,
    reject,
    settle,
    start,
    verify,
)

S = TaskState
E = TaskEvent
TASK = "shepherd-task-0123abcd"
AGENT = "shepherd-agent-0123abcd"
R1 = "shepherd-message-00000001"
R2 = "shepherd-message-00000002"
R3 = "shepherd-message-00000003"
NOW = 50.0

TERMINAL_EVENTS = {
    E.COMPLETE: S.COMPLETED,
    E.BLOCK: S.BLOCKED,
    E.FAIL: S.FAILED,
    E.CANCEL: S.CANCELLED,
    E.TIME_OUT: S.TIMED_OUT,
}
NON_TERMINAL_EVENTS = [
    E.START,
    E.OPEN_REQUEST,
    E.RESOLVE_REQUEST,
    E.RESUME,
    E.VERIFY,
    E.REJECT,
    E.QUEUE,
]

#: The machine (created → running ⇄ waiting → one terminal state), written out independently of
#: protocol/records/tasks.py.
EXPECTED_TABLE: dict[tuple[TaskState, TaskEvent], TaskState] = {
    (S.CREATED, E.START): S.RUNNING,
    (S.RUNNING, E.OPEN_REQUEST): S.WAITING,
    (S.WAITING, E.OPEN_REQUEST): S.WAITING,
    (S.WAITING, E.RESOLVE_REQUEST): S.WAITING,
    (S.WAITING, E.RESUME): S.RUNNING,
    **{
        (state, event): target
        for state in (S.CREATED, S.RUNNING, S.WAITING)
        for event, target in TERMINAL_EVENTS.items()
    },
    # a checked claim (delegate --verify): verifying until the check passes, fails its last
    # attempt, or the parent ends it; a failed attempt with attempts left runs again
    (S.RUNNING, E.VERIFY): S.VERIFYING,
    (S.WAITING, E.VERIFY): S.VERIFYING,
    (S.VERIFYING, E.REJECT): S.RUNNING,
    (S.VERIFYING, E.COMPLETE): S.COMPLETED,
    (S.VERIFYING, E.FAIL): S.FAILED,
    (S.VERIFYING, E.CANCEL): S.CANCELLED,
    (S.VERIFYING, E.TIME_OUT): S.TIMED_OUT,
    # admission (serve --max-running): a task waits for a slot, then starts; its agent never
    # had it, so only the parent's endings and the deadline end it there
    (S.CREATED, E.QUEUE): S.QUEUED,
    (S.QUEUED, E.START): S.RUNNING,
    (S.QUEUED, E.FAIL): S.FAILED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.QUEUED, E.TIME_OUT): S.TIMED_OUT,
}


def record(
    state: TaskState = S.CREATED, pending: tuple[str, ...] = (), **fields: object
) -> TaskRecord:
    base = TaskRecord(
        task_id=TASK,
        agent_id=AGENT,
        description="find the bug",
        created_at=1.0,
        agent_name="scout",
    )
    extra: dict[str, object] = {"state": state, "pending_requests": pending}
    if state is not S.CREATED:
        extra["started_at"] = 2.0
    if state is S.WAITING:
        extra["waiting_since"] = 3.0
    if state in TERMINAL_STATES:
        extra["result"] = TaskResult(
            task_id=TASK,
            agent_id=AGENT,
            status=state.value,  # type: ignore[arg-type]
            ok=state is S.COMPLETED,
            return_code=RETURN_CODES[state],
            completed_at=4.0,
            text="stored",
        )
    extra.update(fields)
    return msgspec.structs.replace(base, **extra)


def running() -> TaskRecord:
    return start(record(), 2.0)


# ----------------------------------------------------------------------------- the table


def test_table_is_exactly_the_designed_machine() -> None:
    assert dict(TRANSITIONS) == EXPECTED_TABLE


def test_terminal_states_have_no_outgoing_moves() -> None:
    assert not [key for key in TRANSITIONS if key[0] in TERMINAL_STATES]


def test_terminal_states_and_return_codes() -> None:
    assert frozenset(TERMINAL_EVENTS.values()) == TERMINAL_STATES
    assert RETURN_CODES == {
        S.COMPLETED: 0,
        S.FAILED: 1,
        S.BLOCKED: 2,
        S.TIMED_OUT: 124,
        S.CANCELLED: 130,
    }


def _prepared(state: TaskState, event: TaskEvent) -> TaskRecord:
    """A record in ``state`` shaped so that ``event`` is expressible through the public API."""
    if event is E.RESOLVE_REQUEST:
        return record(state, (R1, R2))
    if event is E.RESUME or state is S.WAITING:
        return record(state, (R1,))
    return record(state)


def _apply(rec: TaskRecord, event: TaskEvent) -> TaskRecord:
    if event is E.START:
        return start(rec, NOW)
    if event is E.OPEN_REQUEST:
        return open_request(rec, R3, NOW)
    if event in (E.RESOLVE_REQUEST, E.RESUME):
        return close_request(rec, R1)
    if event is E.VERIFY:
        return verify(rec, "claimed")
    if event is E.REJECT:
        return reject(rec)
    if event is E.QUEUE:
        return queue(rec)
    settled, _changed = settle(rec, event, NOW, cancel_requests=True)
    return settled


@pytest.mark.parametrize(("state", "event"), list(itertools.product(TaskState, TaskEvent)))
def test_every_state_event_pair(state: TaskState, event: TaskEvent) -> None:
    rec = _prepared(state, event)
    snapshot = msgspec.structs.replace(rec)
    if (state, event) in EXPECTED_TABLE:
        assert _apply(rec, event).state is EXPECTED_TABLE[(state, event)]
    elif state in TERMINAL_STATES and event in TERMINAL_EVENTS:
        # first terminal event wins: answered with the stored record, not an error
        assert settle(rec, event, NOW, cancel_requests=True) == (rec, False)
    elif state in TERMINAL_STATES and event in (E.RESOLVE_REQUEST, E.RESUME):
        # late replies are content, not state: closing a request on a settled task is a no-op
        assert close_request(rec, R1) is rec
    else:
        with pytest.raises(InvalidTransition) as info:
            _apply(rec, event)
        assert info.value.code == "invalid_transition"
        assert TASK in info.value.message
    assert rec == snapshot  # nothing was changed in place


@pytest.mark.parametrize("event", NON_TERMINAL_EVENTS)
@pytest.mark.parametrize("state", list(TaskState))
def test_settle_refuses_non_terminal_events(state: TaskState, event: TaskEvent) -> None:
    with pytest.raises(InvalidTransition, match=event.value):
        settle(record(state), event, NOW)


# ----------------------------------------------------------------------------- lifecycle


def test_start_moves_created_to_running() -> None:
    rec = start(record(), 7.0)
    assert rec.state is S.RUNNING
    assert rec.started_at == 7.0
    assert rec.result is None
    assert not rec.terminal


@pytest.mark.parametrize("state", [s for s in TaskState if s not in (S.CREATED, S.QUEUED)])
def test_start_twice_is_invalid(state: TaskState) -> None:
    with pytest.raises(InvalidTransition):
        start(record(state, (R1,) if state is S.WAITING else ()), NOW)


def test_open_request_moves_running_to_waiting() -> None:
    rec = open_request(running(), R1, 10.0)
    assert rec.state is S.WAITING
    assert rec.pending_requests == (R1,)
    assert rec.waiting_since == 10.0


def test_second_open_request_keeps_the_waiting_episode_start() -> None:
    rec = open_request(open_request(running(), R1, 10.0), R2, 20.0)
    assert rec.state is S.WAITING
    assert rec.pending_requests == (R1, R2)
    assert rec.waiting_since == 10.0


def test_duplicate_open_request_while_waiting_is_a_no_op() -> None:
    rec = open_request(running(), R1, 10.0)
    assert open_request(rec, R1, 20.0) is rec


def test_open_request_on_a_created_task_is_invalid() -> None:
    with pytest.raises(InvalidTransition):
        open_request(record(), R1, NOW)


def test_waiting_stays_waiting_while_other_requests_remain() -> None:
    rec = open_request(open_request(running(), R1, 10.0), R2, 20.0)
    rec = close_request(rec, R1)
    assert rec.state is S.WAITING
    assert rec.pending_requests == (R2,)
    assert rec.waiting_since == 10.0


def test_closing_the_last_request_returns_to_running() -> None:
    rec = open_request(open_request(running(), R1, 10.0), R2, 20.0)
    rec = close_request(close_request(rec, R2), R1)
    assert rec.state is S.RUNNING
    assert rec.pending_requests == ()
    assert rec.waiting_since is None


@pytest.mark.parametrize("state", [S.CREATED, S.RUNNING, S.WAITING])
def test_close_request_with_an_unknown_id_is_a_no_op(state: TaskState) -> None:
    rec = record(state, (R1,) if state is S.WAITING else ())
    assert close_request(rec, R3) is rec


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_close_request_on_a_terminal_task_is_a_no_op(state: TaskState) -> None:
    rec = record(state)
    assert close_request(rec, R1) is rec


def test_new_episode_after_resume_gets_a_new_waiting_since() -> None:
    rec = close_request(open_request(running(), R1, 10.0), R1)
    rec = open_request(rec, R2, 30.0)
    assert rec.waiting_since == 30.0


def test_running_to_completed() -> None:
    rec, changed = settle(running(), E.COMPLETE, 9.0, text="all done")
    assert changed
    assert rec.state is S.COMPLETED
    assert rec.terminal
    assert rec.result is not None
    assert rec.result.ok
    assert rec.result.text == "all done"


def test_waiting_to_completed_is_refused_while_requests_are_pending() -> None:
    rec = open_request(open_request(running(), R1, 10.0), R2, 11.0)
    snapshot = msgspec.structs.replace(rec)
    with pytest.raises(UnresolvedRequests) as info:
        settle(rec, E.COMPLETE, NOW)
    assert info.value.code == "unresolved_requests"
    assert TASK in info.value.message
    assert R1 in info.value.message
    assert R2 in info.value.message
    assert rec == snapshot


def test_unresolved_requests_message_uses_singular_for_one_request() -> None:
    with pytest.raises(UnresolvedRequests, match=r"1 reply \("):
        settle(open_request(running(), R1, 10.0), E.COMPLETE, NOW)


def test_waiting_to_completed_with_cancel_requests() -> None:
    waiting = open_request(running(), R1, 10.0)
    rec, changed = settle(waiting, E.COMPLETE, NOW, cancel_requests=True)
    assert changed
    assert rec.state is S.COMPLETED
    assert rec.pending_requests == ()
    assert rec.waiting_since is None
    assert rec.result is not None
    assert rec.result.ok
    # the dropped requests are still on the old record, for the caller to cancel
    assert waiting.pending_requests == (R1,)


@pytest.mark.parametrize("event", [E.BLOCK, E.FAIL, E.CANCEL, E.TIME_OUT])
def test_waiting_to_other_terminal_states_drops_pending_requests(event: TaskEvent) -> None:
    waiting = open_request(open_request(running(), R1, 10.0), R2, 11.0)
    rec, changed = settle(waiting, event, NOW)
    assert changed
    assert rec.state is TERMINAL_EVENTS[event]
    assert rec.pending_requests == ()
    assert rec.waiting_since is None
    assert waiting.pending_requests == (R1, R2)


@pytest.mark.parametrize("event", list(TERMINAL_EVENTS))
def test_created_task_can_be_settled_directly(event: TaskEvent) -> None:
    rec, changed = settle(record(), event, NOW)
    assert changed
    assert rec.state is TERMINAL_EVENTS[event]


@pytest.mark.parametrize(
    ("event", "status", "ok", "rc"),
    [
        (E.COMPLETE, "completed", True, 0),
        (E.FAIL, "failed", False, 1),
        (E.BLOCK, "blocked", False, 2),
        (E.TIME_OUT, "timed_out", False, 124),
        (E.CANCEL, "cancelled", False, 130),
    ],
)
def test_result_fields(event: TaskEvent, status: str, ok: bool, rc: int) -> None:
    rec, _ = settle(running(), event, 99.5, text="summary", error="why")
    assert rec.result == TaskResult(
        task_id=TASK,
        agent_id=AGENT,
        status=status,  # type: ignore[arg-type]
        ok=ok,
        return_code=rc,
        completed_at=99.5,
        text="summary",
        error="why",
        agent_name="scout",
        description="find the bug",
    )


def test_result_text_and_error_default_to_none() -> None:
    rec, _ = settle(running(), E.FAIL, NOW)
    assert rec.result is not None
    assert rec.result.text is None
    assert rec.result.error is None


@pytest.mark.parametrize(
    ("first", "second"), list(itertools.product(TERMINAL_EVENTS, TERMINAL_EVENTS))
)
def test_first_terminal_event_wins(first: TaskEvent, second: TaskEvent) -> None:
    settled, changed = settle(running(), first, 10.0, text="first")
    assert changed
    again, changed_again = settle(settled, second, 20.0, text="second", cancel_requests=True)
    assert again is settled
    assert not changed_again
    assert again.result is not None
    assert again.result.text == "first"
    assert again.result.completed_at == 10.0
    assert again.state is TERMINAL_EVENTS[first]


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_open_request_on_a_terminal_task_is_invalid(state: TaskState) -> None:
    with pytest.raises(InvalidTransition):
        open_request(record(state), R1, NOW)


def test_event_for_done() -> None:
    assert event_for_done("completed") is E.COMPLETE
    assert event_for_done("blocked") is E.BLOCK
    assert event_for_done("failed") is E.FAIL


def test_records_are_frozen() -> None:
    rec = running()
    with pytest.raises(AttributeError):
        rec.state = S.COMPLETED  # type: ignore[misc]


# ----------------------------------------------------------------------------- property

REQUEST_IDS = [R1, R2, R3]


class TaskMachine(RuleBasedStateMachine):
    """Random programs over one task; a small model predicts each move."""

    def __init__(self) -> None:
        super().__init__()
        self.rec = record()
        self.now = 1.0
        self.pending: list[str] = []  # the model's pending requests, in order
        self.final: TaskRecord | None = None  # the record as first settled

    @rule(dt=st.floats(min_value=0, max_value=100, allow_nan=False))
    def tick(self, dt: float) -> None:
        self.now += dt

    @rule()
    def do_start(self) -> None:
        before = self.rec
        if before.state is S.CREATED:
            self.rec = start(before, self.now)
            assert self.rec.state is S.RUNNING
        else:
            with pytest.raises(InvalidTransition):
                start(before, self.now)

    @rule(rid=st.sampled_from(REQUEST_IDS))
    def do_open(self, rid: str) -> None:
        before = self.rec
        if before.state in (S.RUNNING, S.WAITING):
            self.rec = open_request(before, rid, self.now)
            if rid not in self.pending:
                self.pending.append(rid)
            expected_since = before.waiting_since if before.state is S.WAITING else self.now
            assert self.rec.waiting_since == expected_since
        else:
            with pytest.raises(InvalidTransition):
                open_request(before, rid, self.now)

    @rule(rid=st.sampled_from(REQUEST_IDS))
    def do_close(self, rid: str) -> None:
        before = self.rec
        self.rec = close_request(before, rid)
        if rid in self.pending and not before.terminal:
            self.pending.remove(rid)
            assert self.rec.state is (S.WAITING if self.pending else S.RUNNING)
        else:
            assert self.rec is before

    @rule(
        event=st.sampled_from(list(TERMINAL_EVENTS)),
        cancel=st.booleans(),
        text=st.none() | st.text(max_size=5),
    )
    def do_settle(self, event: TaskEvent, cancel: bool, text: str | None) -> None:
        before = self.rec
        if before.terminal:
            assert settle(before, event, self.now, text=text) == (before, False)
            return
        if event is E.COMPLETE and self.pending and not cancel:
            with pytest.raises(UnresolvedRequests):
                settle(before, event, self.now, text=text)
            return
        self.rec, changed = settle(before, event, self.now, text=text, cancel_requests=cancel)
        assert changed
        assert self.rec.state is TERMINAL_EVENTS[event]
        self.pending.clear()
        self.final = self.rec

    @invariant()
    def pending_matches_the_model(self) -> None:
        assert list(self.rec.pending_requests) == self.pending

    @invariant()
    def waiting_iff_open_questions(self) -> None:
        if not self.rec.terminal:
            assert (self.rec.state is S.WAITING) == bool(self.rec.pending_requests)
            assert (self.rec.state is S.WAITING) == (self.rec.waiting_since is not None)
        else:
            assert self.rec.pending_requests == ()
            assert self.rec.waiting_since is None

    @invariant()
    def terminal_never_changes(self) -> None:
        if self.final is not None:
            assert self.rec is self.final

    @invariant()
    def result_present_iff_terminal(self) -> None:
        assert (self.rec.result is not None) == self.rec.terminal
        if self.rec.result is not None:
            assert self.rec.result.status == self.rec.state.value
            assert self.rec.result.return_code == RETURN_CODES[self.rec.state]
            assert self.rec.result.ok == (self.rec.state is S.COMPLETED)

    @invariant()
    def started_once_running(self) -> None:
        assert (self.rec.state is S.CREATED) == (self.rec.started_at is None) or (
            self.rec.terminal and self.rec.started_at is None
        )


TestTaskMachine = TaskMachine.TestCase
TestTaskMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
