"""The task state machine.

Rules:

1. **Idle is not done.** Only a ``done`` from the owning agent (completed / blocked / failed)
   or a parent-side lifecycle event (fail / cancel / time_out) moves a task to a terminal
   state. Turn endings, idle processes and quiet agents are not events of this machine at all.
2. **First terminal event wins.** A terminal event on a terminal task changes nothing: the
   caller gets the stored result back (:func:`settle` returns ``changed=False``).
3. **Waiting means an open question.** ``open_request`` moves running → waiting; resolving
   the last pending request moves waiting → running.
4. ``done(completed)`` is refused with ``unresolved_requests`` while requests are pending,
   unless the agent asks to cancel them; every other terminal event cancels them.
5. **A checked claim is verified first.** A task with an acceptance check
   (:mod:`protocol.records.checks`) goes from ``running`` (or ``waiting``, its requests
   cancelled) to ``verifying`` on its agent's ``done(completed)`` (``verify``); the check's pass
   completes it, a failed attempt with attempts left sends it back to ``running`` (``reject``),
   and the parent's fail, cancel or deadline end it as from any open state. ``blocked`` and
   ``failed`` from the agent are never verified.
6. **A queued task waits for a slot** (``serve --max-running``: :mod:`protocol.session.admission`):
   ``queue`` moves a new task to ``queued`` instead of handing it over; ``start`` hands it over
   (``running``) when a slot frees; the parent's cancel and fail and the deadline end it there
   (its agent never had it, so its agent's ``done`` is refused).

Theory of operation: :data:`TRANSITIONS` is the whole machine as a table of
``(state, event) -> state``; the functions below only look moves up in it, check the one
guard (pending requests), and return a *new* frozen record. An illegal move raises
``invalid_transition`` and changes nothing. ``scripts/state_diagram.py`` draws the table.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

import msgspec

from protocol.core.errors import InvalidTransition, UnresolvedRequests
from protocol.records.checks import Check, Evidence
from protocol.records.usage import Budget, Usage
from protocol.records.worktrees import WorktreeChanges

__all__ = [
    "RETURN_CODES",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "DoneStatus",
    "TaskEvent",
    "TaskRecord",
    "TaskResult",
    "TaskState",
    "close_request",
    "open_request",
    "queue",
    "reject",
    "settle",
    "start",
    "verify",
]


class TaskState(enum.StrEnum):
    CREATED = "created"
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    VERIFYING = "verifying"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class TaskEvent(enum.StrEnum):
    QUEUE = "queue"  # admission had no slot: the task waits for one
    START = "start"  # the task envelope was accepted for the agent
    OPEN_REQUEST = "open_request"  # the agent asked something and expects a reply
    RESOLVE_REQUEST = "resolve_request"  # a pending request was answered/cancelled; others remain
    RESUME = "resume"  # the last pending request was resolved
    COMPLETE = "complete"  # done(completed) from the owning agent
    BLOCK = "block"  # done(blocked) from the owning agent
    FAIL = "fail"  # done(failed), or the parent failed it (process exit, publish failure)
    CANCEL = "cancel"  # the parent cancelled it (or closed the agent)
    TIME_OUT = "time_out"  # the task deadline passed
    VERIFY = "verify"  # done(completed) from the owning agent, on a task with a check
    REJECT = "reject"  # the check failed an attempt, and attempts are left


DoneStatus = Literal["completed", "blocked", "failed"]
TerminalStatus = Literal["completed", "blocked", "failed", "cancelled", "timed_out"]

TERMINAL_STATES: Final = frozenset(
    {
        TaskState.COMPLETED,
        TaskState.BLOCKED,
        TaskState.FAILED,
        TaskState.CANCELLED,
        TaskState.TIMED_OUT,
    }
)

#: Return codes of the terminal states, as a shell would see them.
RETURN_CODES: Final[dict[TaskState, int]] = {
    TaskState.COMPLETED: 0,
    TaskState.FAILED: 1,
    TaskState.BLOCKED: 2,
    TaskState.TIMED_OUT: 124,
    TaskState.CANCELLED: 130,
}

_TERMINAL_EVENTS: Final[dict[TaskEvent, TaskState]] = {
    TaskEvent.COMPLETE: TaskState.COMPLETED,
    TaskEvent.BLOCK: TaskState.BLOCKED,
    TaskEvent.FAIL: TaskState.FAILED,
    TaskEvent.CANCEL: TaskState.CANCELLED,
    TaskEvent.TIME_OUT: TaskState.TIMED_OUT,
}


def _build_table() -> dict[tuple[TaskState, TaskEvent], TaskState]:
    table = {
        (TaskState.CREATED, TaskEvent.START): TaskState.RUNNING,
        (TaskState.RUNNING, TaskEvent.OPEN_REQUEST): TaskState.WAITING,
        (TaskState.WAITING, TaskEvent.OPEN_REQUEST): TaskState.WAITING,
        (TaskState.WAITING, TaskEvent.RESOLVE_REQUEST): TaskState.WAITING,
        (TaskState.WAITING, TaskEvent.RESUME): TaskState.RUNNING,
    }
    for state in (TaskState.CREATED, TaskState.RUNNING, TaskState.WAITING):
        for event, target in _TERMINAL_EVENTS.items():
            table[(state, event)] = target
    # rule 6: a task that waits for a slot (never done by its agent: it does not have it)
    table[(TaskState.CREATED, TaskEvent.QUEUE)] = TaskState.QUEUED
    table[(TaskState.QUEUED, TaskEvent.START)] = TaskState.RUNNING
    for event in (TaskEvent.FAIL, TaskEvent.CANCEL, TaskEvent.TIME_OUT):
        table[(TaskState.QUEUED, event)] = _TERMINAL_EVENTS[event]
    # rule 5: a claim that is checked (the agent's own done never reaches a verifying task:
    # its rules refuse it, so complete and fail here are the check's and the parent's)
    table[(TaskState.RUNNING, TaskEvent.VERIFY)] = TaskState.VERIFYING
    table[(TaskState.WAITING, TaskEvent.VERIFY)] = TaskState.VERIFYING
    table[(TaskState.VERIFYING, TaskEvent.REJECT)] = TaskState.RUNNING
    for event in (TaskEvent.COMPLETE, TaskEvent.FAIL, TaskEvent.CANCEL, TaskEvent.TIME_OUT):
        table[(TaskState.VERIFYING, event)] = _TERMINAL_EVENTS[event]
    return table


#: The whole machine. Terminal states have no outgoing moves: terminal events on them are
#: answered with the stored result by :func:`settle`, everything else is invalid.
TRANSITIONS: Final[dict[tuple[TaskState, TaskEvent], TaskState]] = _build_table()


class TaskResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a watcher receives once a task is terminal."""

    task_id: str
    agent_id: str
    status: TerminalStatus
    ok: bool
    return_code: int
    completed_at: float
    text: str | None = None
    error: str | None = None
    agent_name: str | None = None
    description: str | None = None
    # --- budgets
    #: why the parent's side ended it, as a code (``budget_exceeded``), when it says one
    reason: str | None = None
    #: what the task spent (turns, tokens, cost), when anything was counted
    usage: Usage | None = None
    # --- worktrees
    #: an agent in a git worktree: the paths the task changed, and their overlap with
    #: other live agents' worktrees (:mod:`protocol.records.worktrees`)
    changes: WorktreeChanges | None = None
    # --- acceptance checks
    #: what the last run of the task's check showed (a verified or a failed claim)
    evidence: Evidence | None = None


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One delegated task. Immutable: every move returns a new record.

    Not tracked by the garbage collector (``gc=False``): a record is frozen and holds only
    values (strings, numbers, tuples of strings, its state's enum member, frozen Structs), so
    it can never be part of a reference cycle, and the collector has nothing to find in it.
    Tracked, its state's enum member made every record (two per open task: the session's
    and its actor's) one more object for each collection to walk: at 10,000 tasks created at
    once, enough to bring on a full collection."""

    task_id: str
    agent_id: str
    description: str
    state: TaskState = TaskState.CREATED
    created_at: float
    started_at: float | None = None
    waiting_since: float | None = None
    deadline_at: float | None = None
    pending_requests: tuple[str, ...] = ()
    result: TaskResult | None = None
    agent_name: str | None = None
    prompt_id: str | None = None
    #: the id of the task envelope handed to the agent: re-sent with the same id after a
    #: parent restart, so the agent's inbox drops it if it already had it
    message_id: str | None = None
    # --- budgets
    #: the task's limits, as granted (capped by what the session had left)
    budget: Budget | None = None
    # --- acceptance checks (rule 5)
    #: the check a ``completed`` done must pass (None: the claim is taken)
    check: Check | None = None
    #: the check's attempts begun (the one running, while ``verifying``)
    attempt: int = 0
    #: the summary of the ``done`` being checked: the result's text once it passes
    claim: str | None = None
    # --- admission (rule 6)
    #: higher first among queued tasks; then in the order they were queued (``queue_seq``)
    priority: int = 0
    queue_seq: int = 0
    #: a deadline that counts from the start (``--timeout-from start``): set when it starts
    start_timeout_s: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def _move(record: TaskRecord, event: TaskEvent) -> TaskState:
    target = TRANSITIONS.get((record.state, event))
    if target is None:
        raise InvalidTransition(
            f"task {record.task_id} is {record.state.value}; cannot apply {event.value}"
        )
    return target


def start(record: TaskRecord, now: float) -> TaskRecord:
    """created or queued → running; a deadline counted from the start is set now (rule 6)."""
    _move(record, TaskEvent.START)
    deadline_at = record.deadline_at
    if record.start_timeout_s is not None:
        deadline_at = now + record.start_timeout_s
    return msgspec.structs.replace(
        record, state=TaskState.RUNNING, started_at=now, deadline_at=deadline_at
    )


def queue(record: TaskRecord) -> TaskRecord:
    """created → queued (rule 6)."""
    _move(record, TaskEvent.QUEUE)
    return msgspec.structs.replace(record, state=TaskState.QUEUED)


def open_request(record: TaskRecord, request_id: str, now: float) -> TaskRecord:
    """running/waiting → waiting with one more pending request (a duplicate id is a no-op)."""
    if request_id in record.pending_requests and record.state is TaskState.WAITING:
        return record
    _move(record, TaskEvent.OPEN_REQUEST)
    since = record.waiting_since if record.state is TaskState.WAITING else now
    return msgspec.structs.replace(
        record,
        state=TaskState.WAITING,
        waiting_since=since,
        pending_requests=(*record.pending_requests, request_id),
    )


def close_request(record: TaskRecord, request_id: str) -> TaskRecord:
    """A pending request was replied/cancelled/timed out: waiting → waiting | running.

    Closing a request the task does not hold (already closed, or after settlement) changes
    nothing: late replies are content, not state.
    """
    if request_id not in record.pending_requests or record.terminal:
        return record
    remaining = tuple(r for r in record.pending_requests if r != request_id)
    if remaining:
        _move(record, TaskEvent.RESOLVE_REQUEST)
        return msgspec.structs.replace(record, pending_requests=remaining)
    _move(record, TaskEvent.RESUME)
    return msgspec.structs.replace(
        record, state=TaskState.RUNNING, waiting_since=None, pending_requests=()
    )


def settle(
    record: TaskRecord,
    event: TaskEvent,
    now: float,
    *,
    text: str | None = None,
    error: str | None = None,
    cancel_requests: bool = False,
    reason: str | None = None,
    usage: Usage | None = None,
    evidence: Evidence | None = None,
) -> tuple[TaskRecord, bool]:
    """Apply a terminal event. Returns ``(record, changed)``.

    On an already-terminal task nothing changes and ``changed`` is ``False`` (first terminal
    event wins). ``complete`` with pending requests raises ``unresolved_requests`` unless
    ``cancel_requests``. The requests a settlement drops are still in the *old* record's
    ``pending_requests``: the caller cancels them.
    """
    if event not in _TERMINAL_EVENTS:
        raise InvalidTransition(f"{event.value} is not a terminal event")
    if record.terminal:
        return record, False
    if event is TaskEvent.COMPLETE and record.pending_requests and not cancel_requests:
        raise UnresolvedRequests(
            f"task {record.task_id} still waits for {len(record.pending_requests)} "
            f"repl{'y' if len(record.pending_requests) == 1 else 'ies'} "
            f"({', '.join(record.pending_requests)}); reply first, or finish with "
            "cancel_requests, or report blocked"
        )
    state = _move(record, event)
    result = TaskResult(
        task_id=record.task_id,
        agent_id=record.agent_id,
        status=state.value,  # type: ignore[arg-type]  # terminal states are exactly TerminalStatus
        ok=state is TaskState.COMPLETED,
        return_code=RETURN_CODES[state],
        completed_at=now,
        text=text,
        error=error,
        agent_name=record.agent_name,
        description=record.description,
        reason=reason,
        usage=usage,
        evidence=evidence,
    )
    settled = msgspec.structs.replace(
        record, state=state, waiting_since=None, pending_requests=(), result=result
    )
    return settled, True


def verify(record: TaskRecord, text: str | None) -> TaskRecord:
    """running/waiting → verifying (rule 5): the claim ``text`` waits for the next attempt of
    the check. Its pending requests are dropped (the caller cancels them, as a settlement's)."""
    _move(record, TaskEvent.VERIFY)
    return msgspec.structs.replace(
        record,
        state=TaskState.VERIFYING,
        waiting_since=None,
        pending_requests=(),
        attempt=record.attempt + 1,
        claim=text,
    )


def reject(record: TaskRecord) -> TaskRecord:
    """verifying → running: the attempt failed and another is left (rule 5)."""
    _move(record, TaskEvent.REJECT)
    return msgspec.structs.replace(record, state=TaskState.RUNNING, claim=None)


def event_for_done(status: DoneStatus) -> TaskEvent:
    """The machine event for an agent's ``done`` status."""
    return {"completed": TaskEvent.COMPLETE, "blocked": TaskEvent.BLOCK, "failed": TaskEvent.FAIL}[
        status
    ]
