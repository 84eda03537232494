"""One watcher's rules: its own state and an event in, its new state and what to do out.

A watcher is an actor (:class:`actors.session.watcher.WatcherActor`) from ``watch`` (or
``wait``) until it has delivered every id it watches. It owns a :class:`WatcherState`: the ids
it watches in the caller's order, those still pending, and the results buffered in its open
coalescing window. The session only routes each settled task's result to the watchers
subscribed to it (:mod:`protocol.session.watchers`); what happens next is decided here.

Rules:

1. **Exactly once.** A watcher takes a result only for a task still pending for it and not
   already buffered; a result it has delivered is no longer pending, so it is never taken
   again.
2. **Coalescing.** The first result taken into an empty buffer opens the window: one timer
   (the watcher's own) that closes it ``coalesce_s`` after that task ended (``opened``: when
   its agent said ``done``, or when the task settled:
   :func:`protocol.session.watchers.ended_at`), or after the watcher started watching
   (``since``: a restart gives it its actor again) if that is later; not after the watcher
   heard of it. The time a settlement takes to be decided, made durable and routed counts
   against the window, so the window holds no result more than ``coalesce_s`` past its end.
   A result that reaches the watcher later than that (many settling at once, a slow
   journal) closes the window at once (a timer of no delay: results routed with it in the
   same message still join it). Results taken while it is open join the buffer.
3. **Flush.** When the window closes, everything buffered goes out as ONE notification, in
   the order the caller named the ids, saying what is still pending. A flush with nothing
   buffered (a timer that lost a race) changes nothing.
4. **Done.** A watcher with nothing pending after a flush is done: its actor stops.
"""

from __future__ import annotations

import msgspec

from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TaskResult
from protocol.session.effects import Flush, StartTimer
from protocol.session.state import WatcherState

__all__ = ["done", "flush", "take"]


def take(
    w: WatcherState, result: TaskResult, opened: float, coalesce_s: float, now: float
) -> tuple[WatcherState, StartTimer | None]:
    """``w`` takes ``result`` (its task ended at ``opened``) into its buffer (rule 1); the
    timer that opens its window, if this is the window's first result (rule 2), as of ``now``
    (on the clock ``opened`` was read on: a clock that went back never makes the window
    longer than ``coalesce_s``)."""
    if result.task_id not in w.pending or any(r.task_id == result.task_id for r in w.buffer):
        return w, None
    opens = not w.buffer
    w = msgspec.structs.replace(w, buffer=(*w.buffer, result))
    if not opens:
        return w, None
    held = now - max(opened, w.since)  # how long the window has been open
    delay = coalesce_s - min(max(held, 0.0), coalesce_s)
    return w, StartTimer(delay=delay, event=Flush(watcher_id=w.watcher_id))


def flush(w: WatcherState, now: float) -> tuple[WatcherState, TaskCompletion | None]:
    """The window closed: one notification with everything buffered, in the caller's order
    (rule 3); the watcher keeps what is still pending."""
    if not w.buffer:
        return w, None
    order = {task_id: i for i, task_id in enumerate(w.ids)}
    results = tuple(sorted(w.buffer, key=lambda r: order[r.task_id]))
    pending = w.pending - {r.task_id for r in results}
    note = TaskCompletion(
        created_at=now,
        watcher_id=w.watcher_id,
        ids=w.ids,
        results=results,
        pending=tuple(t for t in w.ids if t in pending),
    )
    return msgspec.structs.replace(w, pending=pending, buffer=()), note


def done(w: WatcherState) -> bool:
    """Nothing left to deliver (rule 4)."""
    return not w.pending
