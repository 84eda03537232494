"""Watchers: each watched task's result reaches each of its watchers exactly once, coalesced.

Rules:

1. ``watch`` names tasks (or compatibility prompt ids, :mod:`protocol.watching`). Results of
   tasks already settled are in the answer itself; the others are *pending* for the watcher.
   A watcher with nothing pending is not kept.
2. A watcher registered by ``watch`` is journaled before its answer goes out, with the ids
   whose results the answer carried (they count as delivered: a restart never hands them over
   again). A ``wait`` call's watcher is not journaled: it lives only as long as its caller,
   and its notifications go to that caller.
3. **Exactly once.** A settled task's result is handed to each watcher it is pending for, once
   (the subscription is used up as it is used); a watcher takes a result only for a task still
   pending and not already buffered.
4. **Coalescing.** Results reaching one watcher within ``coalesce_ms`` go out as ONE
   notification, in the order the watcher named the ids, saying what is still pending. When
   nothing is pending, the watcher is done.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from protocol import api
from protocol.ids import IdKind
from protocol.journal import WatcherRecord
from protocol.notifications import TaskCompletion
from protocol.session.effects import (
    Answer,
    Effect,
    Flush,
    Journal,
    Notify,
    SpawnWatcher,
    StartTimer,
)
from protocol.session.state import Ctx, SessionState, WatcherState
from protocol.tasks import TaskResult
from protocol.watching import resolve_watch_ids

__all__ = ["flush", "hand_over", "register", "take", "watch"]


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
        register(s, watcher_id, ids, pending, journaled=journaled)
        effects.append(SpawnWatcher(watcher_id=watcher_id))
    result = api.WatchResult(watcher_id=watcher_id, ids=ids, pending=pending, completed=completed)
    return [*effects, Answer(value=result)]


def register(
    s: SessionState,
    watcher_id: str,
    ids: tuple[str, ...],
    pending: Sequence[str],
    *,
    journaled: bool = True,
) -> None:
    """Keep a watcher, subscribed to each task still pending for it."""
    s.watchers[watcher_id] = WatcherState(
        watcher_id=watcher_id, ids=ids, pending=frozenset(pending), journaled=journaled
    )
    for task_id in pending:
        s.subscribers.setdefault(task_id, []).append(watcher_id)


def hand_over(s: SessionState, result: TaskResult, cx: Ctx) -> list[Effect]:
    """A task settled: its result goes to every watcher subscribed to it (rule 3)."""
    effects: list[Effect] = []
    for watcher_id in s.subscribers.pop(result.task_id, ()):
        effects += take(s, watcher_id, result, cx)
    return effects


def take(s: SessionState, watcher_id: str, result: TaskResult, cx: Ctx) -> list[Effect]:
    """One watcher takes one result into its buffer (opening the coalescing window)."""
    watcher = s.watchers.get(watcher_id)
    if watcher is None or result.task_id not in watcher.pending:
        return []
    if any(r.task_id == result.task_id for r in watcher.buffer):
        return []  # already buffered: exactly once per watcher
    s.watchers[watcher_id] = msgspec.structs.replace(watcher, buffer=(*watcher.buffer, result))
    if watcher.buffer:
        return []  # the window is open already
    delay = s.settings.coalesce_ms / 1000.0
    return [StartTimer(delay=delay, event=Flush(watcher_id=watcher_id))]


def flush(s: SessionState, event: Flush, cx: Ctx) -> list[Effect]:
    """The coalescing window closed: one notification with everything buffered (rule 4)."""
    watcher = s.watchers.get(event.watcher_id)
    if watcher is None or not watcher.buffer:
        return []
    order = {task_id: i for i, task_id in enumerate(watcher.ids)}
    results = tuple(sorted(watcher.buffer, key=lambda r: order[r.task_id]))
    pending = watcher.pending - {r.task_id for r in results}
    if pending:
        s.watchers[watcher.watcher_id] = msgspec.structs.replace(
            watcher, pending=pending, buffer=()
        )
    else:
        del s.watchers[watcher.watcher_id]
    note = TaskCompletion(
        created_at=cx.now,
        watcher_id=watcher.watcher_id,
        ids=watcher.ids,
        results=results,
        pending=tuple(t for t in watcher.ids if t in pending),
    )
    return [Notify(note=note)]  # to the watcher's caller (its note names the watcher)
