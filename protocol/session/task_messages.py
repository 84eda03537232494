"""What a task is told and what it reports: the messages of its rules
(:mod:`protocol.session.task`, which names them all again), as frozen Structs."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.core.errors import ErrorInfo
from protocol.records.checks import Evidence
from protocol.records.tasks import TaskEvent, TaskRecord
from protocol.records.usage import Usage
from protocol.records.worktrees import WorktreeChanges

__all__ = [
    "ENDINGS",
    "MESSAGES",
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
    #: what the session does with the outcome (rule 6): opaque to the task
    then: Any = None


class Start(msgspec.Struct, frozen=True, kw_only=True):
    """A queued task's slot is free: it is handed over (rule 4; a task already settled, by a
    cancel that came first, stays so and reports ``Noted``)."""

    at: float
    then: Any = None


class Sync(msgspec.Struct, frozen=True, kw_only=True):
    """Nothing for the task to decide: it reports ``then`` back once it has decided
    everything it was told before (a turn's end is judged after a ``done`` sent before it)."""

    then: Any = None


class Checked(msgspec.Struct, frozen=True, kw_only=True):
    """A run of the task's check ended (rule 3)."""

    evidence: Evidence
    at: float
    usage: Usage | None = None
    then: Any = None


class Spent(msgspec.Struct, frozen=True, kw_only=True):
    """What the task has spent so far (``usage``, the running total), counted by the session
    (rule 5): over a counted limit of its budget, the task fails ``budget_exceeded`` at
    ``at``; else its actor keeps it for the result of an ending it decides itself."""

    usage: Usage
    at: float
    then: Any = None


class Due(msgspec.Struct, frozen=True, kw_only=True):
    """The task's own timer went off (rule 5): ``due``, the instant it was armed for (what
    :func:`deadline` said); ``at``, now; ``usage``, what it spent, as its actor was last
    told."""

    due: float
    at: float
    usage: Usage | None = None
    then: Any = None


class Listed(msgspec.Struct, frozen=True, kw_only=True):
    """What the settled task changed in its agent's worktree (rule 7)."""

    changes: WorktreeChanges
    then: Any = None


TaskMessage = Attach | Detach | End | Sync | Checked | Start | Spent | Due | Listed


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
    """A message with a ``then`` that changed nothing (rule 6)."""

    record: TaskRecord
    then: Any = None


class Settled(msgspec.Struct, frozen=True, kw_only=True):
    before: TaskRecord
    after: TaskRecord
    by_agent: bool = False
    #: decided by the task alone (rule 5: its timer, or what it spent), not by an ending
    #: the session routed to it
    alone: bool = False
    then: Any = None


class Unchanged(msgspec.Struct, frozen=True, kw_only=True):
    """An ending that came after the one that won: the record as it settled."""

    record: TaskRecord
    then: Any = None


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    record: TaskRecord
    error: ErrorInfo
    then: Any = None


class Verifying(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's ``completed`` is being checked (rule 3): ``before``'s pending requests were
    dropped."""

    before: TaskRecord
    after: TaskRecord
    then: Any = None


class Rejected(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt of the check failed and another is left: the task runs again (rule 3)."""

    before: TaskRecord
    after: TaskRecord
    evidence: Evidence
    then: Any = None


Report = Moved | Late | Noted | Settled | Unchanged | Refused | Verifying | Rejected

#: what a task is told (a tuple: ``isinstance`` with one is several times quicker than a union)
MESSAGES = (Attach, Detach, End, Sync, Checked, Start, Spent, Due, Listed)
#: the reports of an ending (an ``End``, or the ``Checked`` a check's end is routed as)
ENDINGS = (Settled, Unchanged, Refused, Verifying, Rejected)
#: the reports of an ending that moved the task (they hold ``after``, the others ``record``)
MOVES = (Settled, Verifying, Rejected)
