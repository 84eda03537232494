"""One task's rules: its own record and a message in, its new record and its report out.

A task is an actor (:class:`actors.session.task_actor.TaskActor`) from ``delegate`` until it
has settled and the session has taken its result. It owns the task's :class:`TaskRecord`: its
state, its pending requests, its result. The session routes to it what concerns it
(:func:`route` in the session's rules, a ``TellTask`` effect), in the order the session
decided it, and learns what the task decided from its reports, which the session's rules
then act on (the agent's slot, the request table, the journal, the watchers:
:mod:`protocol.session.tasks`). What each message does is decided here, as a function of
the record and the message, so every rule is testable without a runtime.

Rules:

1. **Waiting transitions are the task's.** ``Attach`` (a request of its agent opened) moves it
   to ``waiting`` (or adds the request to those it waits for); ``Detach`` (one closed) moves
   it back to ``running`` once none is pending. Either is reported (``Moved``) when the record
   changed. A request that reaches a task already settled is reported back (``Late``): the
   session cancels it, as it cancels the requests a settlement drops.
2. **The first ending wins.** ``End`` (the agent's ``done``, the parent's cancel or fail, the
   deadline, the agent's exit or close, a failed delivery, a budget) settles the task through
   its machine (:func:`protocol.records.tasks.settle`) and is reported (``Settled``, with the
   record before, whose pending requests the settlement dropped). An ``End`` that finds the
   task settled changes nothing and is reported ``Unchanged``, with the result that won. An
   ``End`` the machine refuses (``completed`` while requests are pending) changes nothing and
   is reported ``Refused``, with the error.
3. **A checked claim is verified first** (:mod:`protocol.records.checks`). The agent's
   ``completed`` on a task with a check moves it to ``verifying`` (``Verifying``) instead of
   settling it; ``Checked`` (the check's run ended) completes it on a pass, sends it back to
   ``running`` on a failed attempt with attempts left (``Rejected``), or fails it with
   ``verification_failed`` after the last. While it is verifying, the agent's own ``done`` is
   refused and a request it opens is ``Late``; the parent's endings end it as from any open
   state. A ``Checked`` of an attempt no longer running changes nothing.
4. **A queued task starts when told** (``Start``: its slot is free): ``queued`` → ``running``
   (``Moved``); a task that settled first stays so (``Noted``).
5. **The deadline and the budget are the task's own.** Its actor arms a timer for
   :func:`deadline`: the earlier of the record's ``deadline_at`` and the end of its
   ``max_minutes`` (counted from its start), while the task is open (a deadline counted from
   the start, and the minutes of a queued task, are set by ``Start``); it cancels it once the
   task has settled. When it goes off, the actor is told ``Due`` (the instant it was armed
   for, and what the task has spent): past the deadline the task times out; else, past its
   minutes, it fails ``budget_exceeded``. What it spent the session counts and tells it
   (``Spent``, the running total): over one of its budget's turns, tokens or cost, it fails
   ``budget_exceeded``. Each is reported ``Settled``, marked ``alone`` (no ending was
   routed for it). One settled first changes nothing and reports nothing (its timer was
   cancelled, and the mail crossed).
6. **What comes after is the session's.** A message carries ``then``: what the session does
   once it is decided (answer the parent's call, send the agent its receipt); the task hands
   it back in its report, untouched. A message with a ``then`` is always reported (``Noted``
   when nothing changed), so whoever waits for it is never left waiting.
7. **Its worktree changes are its result's.** A task settled in an agent's git worktree lives
   on until what it changed is listed (``Listed``): its result then carries the changes
   (``Moved``, the record settled before and after). Listed once: a second changes nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.core.errors import InvalidTransition, ShepherdError, UnresolvedRequests
from protocol.records.tasks import (
    TaskEvent,
    TaskRecord,
    TaskState,
    close_request,
    open_request,
    reject,
    start,
    verify,
)
from protocol.records.tasks import settle as settle_record
from protocol.records.usage import BUDGET_EXCEEDED, Usage, exceeded
from protocol.session.task_messages import (
    ENDINGS,
    MESSAGES,
    MOVES,
    Attach,
    Checked,
    Detach,
    Due,
    End,
    Late,
    Listed,
    Moved,
    Noted,
    Refused,
    Rejected,
    Report,
    Settled,
    Spent,
    Start,
    Sync,
    TaskMessage,
    Unchanged,
    Verifying,
)

__all__ = [
    "ENDINGS",
    "MOVES",
    "Attach",
    "Checked",
    "Detach",
    "Due",
    "End",
    "Late",
    "Listed",
    "Moved",
    "Noted",
    "Refused",
    "Rejected",
    "Report",
    "Settled",
    "Spent",
    "Start",
    "Sync",
    "TaskMessage",
    "Unchanged",
    "Verifying",
    "deadline",
    "decides_alone",
    "minutes_begun",
    "minutes_end",
    "overspent",
    "receive",
]

#: the error of a task whose deadline passed (rule 5)
DEADLINE_PASSED = "task deadline passed before the agent called done"


def minutes_begun(record: TaskRecord) -> float | None:
    """When the task's budget of minutes began to run (its start: a queued task's has not),
    or None if it has none."""
    budget = record.budget
    if budget is None or budget.max_minutes is None or record.state is TaskState.QUEUED:
        return None
    return record.started_at if record.started_at is not None else record.created_at


def minutes_end(record: TaskRecord) -> float | None:
    """When the task's budget of minutes runs out, or None."""
    begun = minutes_begun(record)
    if begun is None:
        return None
    assert record.budget is not None
    assert record.budget.max_minutes is not None
    return begun + record.budget.max_minutes * 60.0


def deadline(record: TaskRecord) -> float | None:
    """When the task's own timer goes off (rule 5): the earlier of its deadline and the end of
    its minutes while it is open, else never."""
    if record.terminal:
        return None
    ends = [t for t in (record.deadline_at, minutes_end(record)) if t is not None]
    return min(ends) if ends else None


def decides_alone(record: TaskRecord) -> bool:
    """Whether the task may end by a decision of its own (a deadline, now or from its start,
    or a budget): only then does its actor need to be told what it spent (``Spent``). Mail
    costs an actor that had none its own queue, so a task with neither is told nothing."""
    if record.terminal:
        return False
    if record.deadline_at is not None or record.start_timeout_s is not None:
        return True
    return record.budget is not None and not record.budget.empty


def overspent(record: TaskRecord, usage: Usage) -> str | None:
    """Why the open task ends, ``usage`` over a counted limit of its budget (rule 5), or None.
    The session asks it too, to give no soft warning and hand over nothing that ends."""
    if record.terminal or record.budget is None:
        return None
    return exceeded(usage, record.budget, "the task", its_limit=True)


def receive(record: TaskRecord, message: TaskMessage) -> tuple[TaskRecord, Report | None]:
    """The task's new record, and what it reports (None: nothing changed, nothing to say)."""
    if not isinstance(message, MESSAGES):
        raise TypeError(f"a task is not told {type(message).__name__}")
    then = message.then
    match message:
        case Attach(request_id=request_id, at=at):
            if record.terminal or record.state is TaskState.VERIFYING:
                return record, Late(record=record, request_id=request_id, then=then)
            after = open_request(record, request_id, at)
            if after is not record:
                return after, Moved(before=record, after=after, opened=request_id, then=then)
        case Detach(request_id=request_id):
            after = close_request(record, request_id)
            if after is not record:
                return after, Moved(before=record, after=after, then=then)
        case End():
            return _end(record, message)
        case Checked():
            return _checked(record, message)
        case Start(at=at) if record.state is TaskState.QUEUED:
            after = start(record, at)
            return after, Moved(before=record, after=after, then=then)
        case Due() if deadline(record) is not None:
            return _due(record, message)
        case Spent(usage=usage, at=at) if (why := overspent(record, usage)) is not None:
            return _over_budget(record, why, at, usage, then)
        case Listed(changes=changes) if record.result is not None and record.result.changes is None:
            after = msgspec.structs.replace(
                record, result=msgspec.structs.replace(record.result, changes=changes)
            )
            return after, Moved(before=record, after=after, then=then)
    return record, None if then is None else Noted(record=record, then=then)


def _due(record: TaskRecord, due: Due) -> tuple[TaskRecord, Report | None]:
    """The task's own timer went off (rule 5): which of its two ends had come, if either."""
    at, usage, then = due.at, due.usage, due.then
    if record.deadline_at is not None and due.due >= record.deadline_at:
        end = End(event=TaskEvent.TIME_OUT, at=at, error=DEADLINE_PASSED, usage=usage, then=then)
        return _end(record, end, True)
    ends = minutes_end(record)
    if ends is None or due.due < ends:  # armed for an end since moved: nothing came
        return record, None if then is None else Noted(record=record, then=then)
    minutes = record.budget.max_minutes if record.budget is not None else None
    why = f"{BUDGET_EXCEEDED}: the task ran past its max_minutes of {minutes:g}"
    return _over_budget(record, why, at, usage, then)


def _over_budget(
    record: TaskRecord, why: str, at: float, usage: Usage | None, then: Any
) -> tuple[TaskRecord, Report]:
    """The task ends by its own budget (rule 5): failed ``budget_exceeded``, decided alone."""
    end = End(
        event=TaskEvent.FAIL, at=at, error=why, reason=BUDGET_EXCEEDED, usage=usage, then=then
    )
    return _end(record, end, True)


def _end(record: TaskRecord, end: End, alone: bool = False) -> tuple[TaskRecord, Report]:
    if (
        end.by_agent
        and not record.terminal
        and (
            record.state is TaskState.VERIFYING
            or (end.event is TaskEvent.COMPLETE and record.check is not None)
        )
    ):
        return _claimed(record, end)
    try:
        settled, changed = settle_record(
            record,
            end.event,
            end.at,
            text=end.text,
            error=end.error,
            cancel_requests=end.cancel_requests,
            reason=end.reason,
            usage=end.usage,
        )
    except ShepherdError as exc:  # refused by the machine: nothing moved
        return record, Refused(record=record, error=exc.info(), then=end.then)
    if not changed:
        return record, Unchanged(record=record, then=end.then)
    return settled, Settled(
        before=record, after=settled, by_agent=end.by_agent, alone=alone, then=end.then
    )


def _claimed(record: TaskRecord, end: End) -> tuple[TaskRecord, Report]:
    """The agent's ``done`` on a task with a check (rule 3)."""
    check = record.check
    assert check is not None
    if record.state is TaskState.VERIFYING:
        why = (
            f"task {record.task_id} is being verified (attempt {record.attempt} of "
            f"{check.attempts} of `{check.command}`): wait to be told its outcome"
        )
        return record, Refused(record=record, error=InvalidTransition(why).info(), then=end.then)
    if record.pending_requests and not end.cancel_requests:
        try:  # the machine's own refusal, with its words
            settle_record(record, TaskEvent.COMPLETE, end.at)
        except UnresolvedRequests as exc:
            return record, Refused(record=record, error=exc.info(), then=end.then)
    after = verify(record, end.text)
    return after, Verifying(before=record, after=after, then=end.then)


def _checked(record: TaskRecord, checked: Checked) -> tuple[TaskRecord, Report]:
    """A run of the check ended (rule 3)."""
    evidence, check = checked.evidence, record.check
    if record.state is not TaskState.VERIFYING or evidence.attempt != record.attempt:
        # an attempt no longer running: the task moved on (still reported: the session counts
        # each ending it routed until it is decided)
        return record, Unchanged(record=record, then=checked.then)
    assert check is not None
    if not evidence.passed and record.attempt < check.attempts:
        after = reject(record)
        return after, Rejected(before=record, after=after, evidence=evidence, then=checked.then)
    if evidence.passed:
        event, text, error, reason = TaskEvent.COMPLETE, record.claim, None, None
    else:
        event, text, reason = TaskEvent.FAIL, record.claim, "verification_failed"
        error = (
            f"verification_failed: `{evidence.command}` {evidence.outcome()} "
            f"(attempt {record.attempt} of {check.attempts})"
        )
    settled, _ = settle_record(
        record,
        event,
        checked.at,
        text=text,
        error=error,
        reason=reason,
        usage=checked.usage,
        evidence=evidence,
    )
    by_agent = evidence.passed  # a failed claim is ended by the parent: the agent is told
    return settled, Settled(before=record, after=settled, by_agent=by_agent, then=checked.then)
