"""Stale waits: one notification per waiting episode of a task.

Rules:

1. A task's *waiting episode* runs from the request that made it wait to the moment it has no
   pending request left; its ``since`` is that first request's creation time. Requests opened
   while it waits belong to the same episode.
2. A timer exists only while a task waits (none otherwise): it fires at
   ``since + stale_wait_threshold_s``.
3. If the task is still in the same episode when it fires, the parent is told once: task,
   agent, description, age, the oldest pending request, its question, its recipient and the
   recipient's status. Never twice for one episode, also across a parent restart (the
   notifications file says which episodes were told; :mod:`protocol.session.restore`).
4. A reply that ends the episode (or the task's settlement) forgets it: the next episode is
   told again. Task state is never changed by this monitor.
"""

from __future__ import annotations

import msgspec

from protocol.core.ids import PARENT_ID
from protocol.records.notifications import StaleWait
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session.effects import CancelTimer, Effect, Notify, StaleDue, StartTimer, Story
from protocol.session.state import Ctx, Episode, SessionState

__all__ = ["due", "sync"]


def sync(s: SessionState, record: TaskRecord, cx: Ctx, opened: str | None = None) -> list[Effect]:
    """Keep the task's episode in step with its record (after any change to it); ``opened`` is
    the request just opened, if that was the change."""
    task_id = record.task_id
    episode = s.stale.get(task_id)
    since = record.waiting_since
    if record.state is TaskState.WAITING and since is not None:
        if episode is not None and episode.since == since:
            if opened is not None and opened not in episode.requests:
                s.stale[task_id] = msgspec.structs.replace(
                    episode, requests=(*episode.requests, opened)
                )
            return []
        effects: list[Effect] = []
        if episode is not None:
            effects.append(CancelTimer(key=("stale", task_id)))
        s.stale[task_id] = Episode(since=since, requests=(opened,) if opened else ())
        delay = max(0.0, since + s.settings.stale_wait_threshold_s - cx.now)
        effects.append(
            StartTimer(delay=delay, event=StaleDue(task_id=task_id, waiting_since=since))
        )
        return effects
    if episode is None:
        return []
    del s.stale[task_id]  # the reply (or the settlement) ended the episode
    return [CancelTimer(key=("stale", task_id))]


def due(s: SessionState, event: StaleDue, cx: Ctx) -> list[Effect]:
    """The episode's timer fired: tell the parent, once, if the task still waits in it."""
    task_id, since = event.task_id, event.waiting_since
    record = s.tasks.get(task_id)
    episode = s.stale.get(task_id)
    if (
        record is None
        or record.state is not TaskState.WAITING
        or record.waiting_since != since
        or episode is None
        or episode.since != since
        or episode.notified
        or not record.pending_requests
    ):
        return []
    request = s.requests.get(record.pending_requests[0])
    if request is None:
        return []
    s.stale[task_id] = msgspec.structs.replace(episode, notified=True)
    recipient = s.agents.get(request.target_id)
    if request.target_id == PARENT_ID:
        recipient_status = "the parent"
    elif recipient is None:
        recipient_status = "unknown"
    else:
        recipient_status = recipient.process_state + (" (closed)" if recipient.closed else "")
    name = s.name_of(record.agent_id)
    return [
        Story(text=f"{name}: task {task_id} stale (waiting {cx.now - since:.0f}s)"),
        Notify(
            note=StaleWait(
                created_at=cx.now,
                task_id=task_id,
                agent_id=record.agent_id,
                agent_name=name,
                description=record.description,
                waiting_since=since,
                age_s=cx.now - since,
                request_id=request.request_id,
                question=request.question,
                recipient_id=request.target_id,
                recipient_name=s.name_of(request.target_id),
                recipient_status=recipient_status,
            )
        ),
    ]
