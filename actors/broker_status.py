"""The broker's status answer: agents with their process state and their task, side by side.

A read of the broker's own tables (and read models), built on the broker's thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.transport import PARENT_INBOX
from protocol import api

if TYPE_CHECKING:
    from actors.broker import BrokerActor

__all__ = ["status_view"]


def status_view(broker: BrokerActor, handle: str | None) -> api.StatusResult:
    now = broker.clock.now()
    entries = [broker._agent(handle)] if handle else list(broker.agents.values())
    rows = []
    for entry in entries:
        task_status = None
        task_id = entry.active_task or _last_task_of(broker, entry.agent_id)
        if task_id is not None:
            record = broker.tasks[task_id]
            pending = tuple(
                broker.requests[r] for r in record.pending_requests if r in broker.requests
            )
            waiting_age = now - record.waiting_since if record.waiting_since is not None else None
            task_status = api.TaskStatus(
                task_id=task_id,
                state=record.state,
                description=record.description,
                created_at=record.created_at,
                waiting_since=record.waiting_since,
                waiting_age_s=waiting_age,
                pending_requests=pending,
                stale=record.waiting_since is not None
                and (
                    broker._stale_notified.get(task_id) == record.waiting_since
                    or (waiting_age or 0.0) >= broker.settings.stale_wait_threshold_s
                ),
                result=broker.results.get(task_id),
            )
        rows.append(
            api.AgentStatus(
                agent_id=entry.agent_id,
                name=entry.name,
                adapter=entry.adapter,
                process_state=entry.process_state,  # type: ignore[arg-type]
                closed=entry.closed,
                task=task_status,
                last_active_at=entry.last_active_at,
                exit_code=entry.exit_code,
                mailbox_wake=entry.mailbox_wake,  # type: ignore[arg-type]
            )
        )
    # The filesystem mailbox says how the parent inbox is woken; other transports have no say.
    wake_mode = getattr(broker._transport, "wake_mode", None)
    return api.StatusResult(
        session_id=broker.session_id,
        now=now,
        agents=tuple(rows),
        mailbox_wake=wake_mode(PARENT_INBOX) if callable(wake_mode) else None,
    )


def _last_task_of(broker: BrokerActor, agent_id: str) -> str | None:
    last = None
    for task_id, record in broker.tasks.items():
        if record.agent_id == agent_id:
            last = task_id
    return last
