"""Watchers, as the session sees them: who watches which task, and where a result goes.

A watcher is an actor of its own (its rules: :mod:`protocol.session.watcher`). The session
keeps no watcher's state: only ``subscribers``, which watchers a task's result is routed to.

Rules:

1. ``watch`` names tasks (or compatibility prompt ids, :mod:`protocol.records.watching`). Results of
   tasks already settled are in the answer itself; the others are *pending* for the watcher.
   A watcher with nothing pending is not started.
2. A watcher registered by ``watch`` is journaled before its answer goes out, with the ids
   whose results the answer carried (they count as delivered: a restart never hands them over
   again). A ``wait`` call's watcher is not journaled: it lives only as long as its caller,
   and its notifications go to that caller.
3. **Routed once.** A settled task's result is handed to each watcher subscribed to it, and
   the subscriptions are used up as they are used: a result is routed to a watcher once (the
   watcher's own rules take it exactly once, and coalesce).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from protocol.calls import api
from protocol.core.ids import IdKind
from protocol.records.journal import WatcherRecord
from protocol.records.tasks import TaskResult
from protocol.records.watching import resolve_watch_ids
from protocol.session.effects import Answer, Effect, HandOver, Journal, SpawnWatcher
from protocol.session.state import Ctx, SessionState, WatcherState

__all__ = ["ended_at", "hand_over", "subscribe", "watch"]


def watch(
    s: SessionState, raw_ids: Sequence[object], cx: Ctx, *, journaled: bool = True
) -> list[Effect]:
    ids = resolve_watch_ids(raw_ids, s.tasks, s.prompts)
    watcher_id = cx.ids.new(IdKind.WATCHER)
    # a settled task whose worktree changes are still being listed is pending: its result
    # comes with them (protocol.session.worktrees)
    completed = tuple(
        r for r in (s.result_of(t) for t in ids) if r is not None and r.task_id not in s.diffing
    )
    pending = tuple(t for t in ids if t not in s.results or t in s.diffing)
    effects: list[Effect] = []
    if pending:
        if journaled:
            record = WatcherRecord(
                watcher_id=watcher_id,
                ids=ids,
                created_at=cx.now,
                inline=tuple(r.task_id for r in completed),
            )
            effects.append(Journal(record=record))
        watcher = subscribe(s, watcher_id, ids, pending, cx.now, journaled=journaled)
        effects.append(SpawnWatcher(watcher=watcher))
    result = api.WatchResult(watcher_id=watcher_id, ids=ids, pending=pending, completed=completed)
    return [*effects, Answer(value=result)]


def subscribe(
    s: SessionState,
    watcher_id: str,
    ids: tuple[str, ...],
    pending: Sequence[str],
    since: float,
    *,
    journaled: bool = True,
) -> WatcherState:
    """Subscribe a watcher to each task still pending for it; the state its actor starts
    from (watching since ``since``)."""
    for task_id in pending:
        s.subscribers.setdefault(task_id, []).append(watcher_id)
    return WatcherState(
        watcher_id=watcher_id,
        ids=ids,
        pending=frozenset(pending),
        journaled=journaled,
        since=since,
    )


def hand_over(s: SessionState, result: TaskResult, opened: float) -> list[Effect]:
    """A task settled: its result goes to every watcher subscribed to it (rule 3), its window
    counting from ``opened`` (when it ended: :func:`ended_at`)."""
    return [
        HandOver(watcher_id=watcher_id, result=result, opened=opened)
        for watcher_id in s.subscribers.pop(result.task_id, ())
    ]


def ended_at(result: TaskResult, said_done_at: float | None) -> float:
    """When a task ended, as far as its watchers' windows count: when its agent said
    ``done`` (the time its ``done`` says it was sent), if that is a time before the task
    settled; else when it settled. A clock of the agent's that is ahead, or a time that is no
    time, never makes a window close later than it would from the settlement; one that is
    behind only shortens the window (never below nothing)."""
    if said_done_at is None or not math.isfinite(said_done_at):
        return result.completed_at
    return min(said_done_at, result.completed_at)
