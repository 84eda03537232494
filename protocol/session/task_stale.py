"""One task's stale wait as its actor decides it: when the parent is told the task waits too long.

A task's *waiting episode* runs from the request that made it wait to the moment it has no
pending request left (its record's ``waiting_since`` is the episode's start). The task's actor
holds its :class:`Stale` state and decides:

1. **One point per episode.** While the task waits with a request pending, its one timer
   (:func:`protocol.session.task_budget.alarm`) is also armed for ``waiting_since +
   after_s`` (the session's ``stale_wait_threshold_s``); when the episode ends (a reply, its
   settlement) that point is gone, and the timer with it, unless something else is due.
2. **Told once.** When the timer goes off at that point and the task still waits in the same
   episode, the actor reports :class:`StaleFound` and keeps the episode as told: never twice
   for one episode. The next episode is a new point, told again.
3. **Across a restart.** A restarted parent starts the actor with the episode told if the
   record of delivery holds its notice (:func:`protocol.session.restore.resume`).

The session turns the report into the parent's notice (:func:`protocol.session.stale.found`,
which reads the request table and the recipient's state). The task's state is never changed
by this: a stale wait is news, not an ending.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.records.tasks import TaskRecord, TaskState

__all__ = ["Stale", "StaleFound", "due_at", "rang"]


class Stale(msgspec.Struct, frozen=True, gc=False):
    """A task's stale-wait state: how long a wait may last untold (``after_s``), and the start
    of the episode the parent was told of (None: none yet)."""

    after_s: float
    told: float | None = None


class StaleFound(msgspec.Struct, frozen=True, kw_only=True):
    """The task has waited ``after_s`` in the episode that began at ``since`` (rule 2)."""

    record: TaskRecord
    since: float
    at: float
    then: Any = None


def due_at(record: TaskRecord, stale: Stale | None) -> float | None:
    """When the task's current episode is stale, if it waits and was not told of it (rule 1)."""
    if stale is None or record.state is not TaskState.WAITING or not record.pending_requests:
        return None
    since = record.waiting_since
    if since is None or stale.told == since:
        return None
    return since + stale.after_s


def rang(
    record: TaskRecord, stale: Stale | None, armed: float, at: float
) -> tuple[Stale | None, StaleFound | None]:
    """The task's timer, armed for ``armed``, went off at ``at``: the episode is stale if
    ``armed`` reached its point (rule 2); else nothing."""
    point = due_at(record, stale)
    if stale is None or point is None or armed < point:
        return stale, None
    since = record.waiting_since
    assert since is not None
    return msgspec.structs.replace(stale, told=since), StaleFound(record=record, since=since, at=at)
