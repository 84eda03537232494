"""The broker's status answer: agents with their process state and their task, side by side.

A read of the broker's own tables (and read models), built on the broker's thread. Texts in
it are previews (a task's text, a request's question, a result's summary: see
:mod:`protocol.limits`); the answer holds every agent from ``cursor`` on plus the session's
counts, and the CLI's and tools' surface pages it to its frame (:mod:`protocol.answers`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import msgspec

from actors.transport import PARENT_INBOX
from protocol import api
from protocol.answers import preview_result
from protocol.limits import PREVIEW_CHARS, preview

if TYPE_CHECKING:
    from actors.broker import BrokerActor

__all__ = ["status_view"]


def status_view(broker: BrokerActor, handle: str | None, cursor: int = 0) -> api.StatusResult:
    now = broker.clock.now()
    everyone = [broker._agent(handle)] if handle else list(broker.agents.values())
    last_tasks = _last_tasks(broker)
    rows = []
    processes: Counter[str] = Counter()
    states: Counter[str] = Counter()
    for entry in everyone:
        processes[entry.process_state] += 1
        task_id = entry.active_task or last_tasks.get(entry.agent_id)
        if task_id is not None:
            states[broker.tasks[task_id].state.value] += 1
    for entry in everyone[cursor:]:
        task_status = None
        task_id = entry.active_task or last_tasks.get(entry.agent_id)
        if task_id is not None:
            record = broker.tasks[task_id]
            pending = tuple(
                msgspec.structs.replace(
                    broker.requests[r], question=preview(broker.requests[r].question) or ""
                )
                for r in record.pending_requests
                if r in broker.requests
            )
            result = broker.results.get(task_id)
            waiting_age = now - record.waiting_since if record.waiting_since is not None else None
            task_status = api.TaskStatus(
                task_id=task_id,
                state=record.state,
                description=preview(record.description) or "",
                description_chars=(
                    len(record.description) if len(record.description) > PREVIEW_CHARS else None
                ),
                created_at=record.created_at,
                waiting_since=record.waiting_since,
                waiting_age_s=waiting_age,
                pending_requests=pending,
                stale=record.waiting_since is not None
                and (
                    broker._stale_notified.get(task_id) == record.waiting_since
                    or (waiting_age or 0.0) >= broker.settings.stale_wait_threshold_s
                ),
                result=preview_result(result) if result is not None else None,
                **_turns_without_done(broker, task_id),
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
        cursor=cursor,
        summary=api.StatusSummary(
            agents=len(everyone), processes=dict(processes), tasks=dict(states)
        ),
        journal_problems=broker.journal_problems,
        mailbox_wake=wake_mode(PARENT_INBOX) if callable(wake_mode) else None,
    )


def _turns_without_done(broker: BrokerActor, task_id: str) -> dict[str, Any]:
    count, ended_at, exit_code = broker._turn_stats.get(task_id, (0, None, None))
    return {
        "turns_without_done": count,
        "last_turn_ended_at": ended_at,
        "last_turn_exit_code": exit_code,
    }


def _last_tasks(broker: BrokerActor) -> dict[str, str]:
    """Each agent's newest task (one pass over the tasks, not one per agent)."""
    last: dict[str, str] = {}
    for task_id, record in broker.tasks.items():
        last[record.agent_id] = task_id
    return last
