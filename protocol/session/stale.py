"""Stale waits: one notification per waiting episode of a task, decided by its actor.

Rules:

1. A task's *waiting episode* runs from the request that made it wait to the moment it has no
   pending request left; its ``since`` is that first request's creation time. Requests opened
   while it waits belong to the same episode. The session keeps each waiting task's episode
   (its start, its requests, whether the parent was told): what ``status`` shows, and what a
   restarted parent matches against the notices it gave.
2. The task's actor has the timer (:mod:`protocol.session.task_stale`): its one timer is also
   armed for ``since + stale_wait_threshold_s`` while the task waits, and when it goes off in
   the same episode the actor reports it (``StaleFound``), once per episode.
3. The parent is then told once: task, agent, description, age, the oldest pending request,
   its question, its recipient and the recipient's status. Never twice for one episode, also
   across a parent restart (the notifications file says which episodes were told; the actor
   starts with it: :mod:`protocol.session.restore`).
4. A reply that ends the episode (or the task's settlement) forgets it: the next episode is
   told again. Task state is never changed by this monitor.
"""

from __future__ import annotations

import msgspec

from protocol.core.ids import PARENT_ID
from protocol.records.notifications import StaleWait
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session.effects import Effect, Notify, Story
from protocol.session.state import Ctx, Episode, SessionState
from protocol.session.task_stale import StaleFound

__all__ = ["found", "sync"]


def sync(s: SessionState, record: TaskRecord, opened: str | None = None) -> None:
    """Keep the task's episode in step with its record (after any change to it); ``opened`` is
    the request just opened, if that was the change (rule 1)."""
    task_id = record.task_id
    episode = s.stale.get(task_id)
    since = record.waiting_since
    if record.state is TaskState.WAITING and since is not None:
        if episode is not None and episode.since == since:
            if opened is not None and opened not in episode.requests:
                s.stale[task_id] = msgspec.structs.replace(
                    episode, requests=(*episode.requests, opened)
                )
            return
        s.stale[task_id] = Episode(since=since, requests=(opened,) if opened else ())
        return
    if episode is not None:
        del s.stale[task_id]  # the reply (or the settlement) ended the episode


def found(s: SessionState, report: StaleFound, cx: Ctx) -> list[Effect]:
    """The task's actor found its wait stale (rule 2): tell the parent, once, if the task
    still waits in that episode as the session knows it (rule 3)."""
    task_id, since = report.record.task_id, report.since
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
