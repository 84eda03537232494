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
3. **What comes after is the session's.** A message carries ``then``: what the session does
   once it is decided (answer the parent's call, send the agent its receipt); the task hands
   it back in its report, untouched. A message with a ``then`` is always reported (``Noted``
   when nothing changed), so whoever waits for it is never left waiting.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.core.errors import ErrorInfo, ShepherdError
from protocol.records.tasks import (
    TaskEvent,
    TaskRecord,
    close_request,
    open_request,
)
from protocol.records.tasks import settle as settle_record
from protocol.records.usage import Usage

__all__ = [
    "Attach",
    "Detach",
    "End",
    "Late",
    "Moved",
    "Noted",
    "Refused",
    "Report",
    "Settled",
    "Sync",
    "TaskMessage",
    "Unchanged",
    "receive",
]


# ------------------------------------------------------------------ what a task is told


class Attach(msgspec.Struct, frozen=True, kw_only=True):
    """A request of the task's agent opened: the task waits for it."""

    request_id: str
    at: float
    then: Any = None


class Detach(msgspec.Struct, frozen=True, kw_only=True):
    """A request the task waited for closed."""

    request_id: str
    then: Any = None


class End(msgspec.Struct, frozen=True, kw_only=True):
    """A terminal event, and what settling it records (rule 2)."""

    event: TaskEvent
    at: float
    text: str | None = None
    error: str | None = None
    cancel_requests: bool = True
    reason: str | None = None
    usage: Usage | None = None
    #: the agent's own ``done`` (its work needs no stopping)
    by_agent: bool = False
    #: what the session does with the outcome (rule 3): opaque to the task
    then: Any = None


class Sync(msgspec.Struct, frozen=True, kw_only=True):
    """Nothing for the task to decide: it reports ``then`` back once it has decided
    everything it was told before (a turn's end is judged after a ``done`` sent before it)."""

    then: Any = None


TaskMessage = Attach | Detach | End | Sync


# ------------------------------------------------------------------ what a task reports


class Moved(msgspec.Struct, frozen=True, kw_only=True):
    before: TaskRecord
    after: TaskRecord
    #: the request whose opening moved it (its waiting episode keeps it)
    opened: str | None = None
    then: Any = None


class Late(msgspec.Struct, frozen=True, kw_only=True):
    """A request opened for the task after it settled (rule 1): the session cancels it."""

    record: TaskRecord
    request_id: str
    then: Any = None


class Noted(msgspec.Struct, frozen=True, kw_only=True):
    """A message with a ``then`` that changed nothing (rule 3)."""

    record: TaskRecord
    then: Any = None


class Settled(msgspec.Struct, frozen=True, kw_only=True):
    before: TaskRecord
    after: TaskRecord
    by_agent: bool = False
    then: Any = None


class Unchanged(msgspec.Struct, frozen=True, kw_only=True):
    """An ending that came after the one that won: the record as it settled."""

    record: TaskRecord
    then: Any = None


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    record: TaskRecord
    error: ErrorInfo
    then: Any = None


Report = Moved | Late | Noted | Settled | Unchanged | Refused

#: what a task is told (a tuple: ``isinstance`` with one is several times quicker than a union)
_MESSAGES = (Attach, Detach, End, Sync)
#: the reports of an ending
ENDINGS = (Settled, Unchanged, Refused)


def receive(record: TaskRecord, message: TaskMessage) -> tuple[TaskRecord, Report | None]:
    """The task's new record, and what it reports (None: nothing changed, nothing to say)."""
    if not isinstance(message, _MESSAGES):
        raise TypeError(f"a task is not told {type(message).__name__}")
    then = message.then
    match message:
        case Attach(request_id=request_id, at=at):
            if record.terminal:
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
    return record, None if then is None else Noted(record=record, then=then)


def _end(record: TaskRecord, end: End) -> tuple[TaskRecord, Report]:
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
    return settled, Settled(before=record, after=settled, by_agent=end.by_agent, then=end.then)
