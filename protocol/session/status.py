"""The status answer: agents with their process state and their task, side by side.

A pure view of the session's state. Texts in it are previews (a task's text, a request's
question, a result's summary: see :mod:`protocol.core.limits`); the answer holds every agent from
``cursor`` on plus the session's counts, and the CLI's and tools' surface pages it to its
frame (:mod:`protocol.calls.answers`). An agent shows its active task, else its newest one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from protocol.calls import api
from protocol.calls.answers import preview_result
from protocol.core.limits import PREVIEW_CHARS, preview
from protocol.records import sandbox
from protocol.records.tasks import TaskState
from protocol.records.worktrees import ref_of
from protocol.session import admission, pacing
from protocol.session.state import AgentRow, SessionState, TurnStats
from protocol.wire.envelopes import MailboxWake

__all__ = ["view"]


#: a task that holds a slot: handed to its agent and open (admission, rule 2)
_HOLDING = (TaskState.RUNNING, TaskState.WAITING, TaskState.VERIFYING)


def view(
    s: SessionState,
    handle: str | None,
    now: float,
    *,
    cursor: int = 0,
    parent_wake: MailboxWake | None = None,
) -> api.StatusResult:
    everyone = [s.agent(handle)] if handle else list(s.agents.values())
    last_tasks = _last_tasks(s)
    processes: Counter[str] = Counter()
    states: Counter[str] = Counter()
    for row in everyone:
        processes[row.process_state] += 1
        task_id = row.active_task or last_tasks.get(row.agent_id)
        if task_id is not None:
            states[s.tasks[task_id].state.value] += 1
    places = admission.places(s) if s.queue else {}
    rows = tuple(
        _agent(s, row, row.active_task or last_tasks.get(row.agent_id), now, places)
        for row in everyone[cursor:]
    )
    return api.StatusResult(
        session_id=s.session_id,
        now=now,
        agents=rows,
        cursor=cursor,
        summary=api.StatusSummary(
            agents=len(everyone),
            processes=dict(processes),
            tasks=dict(states),
            usage=s.session_usage,
            budget_tokens=s.settings.budget_tokens,
            budget_cost=s.settings.budget_cost,
            running=sum(
                1
                for r in s.agents.values()
                if r.active_task is not None and s.tasks[r.active_task].state in _HOLDING
            ),
            queued=len(s.queue),
            max_running=s.settings.max_running,
            cooldowns={p: until for p, until in s.cooldowns.items() if until > now},
            node_caps=dict(s.node_caps),
            paced=pacing.paced_rates(s),
        ),
        journal_problems=s.journal_problems,
        mailbox_wake=parent_wake,
    )


def _agent(
    s: SessionState, row: AgentRow, task_id: str | None, now: float, places: dict[str, int]
) -> api.AgentStatus:
    return api.AgentStatus(
        agent_id=row.agent_id,
        name=row.name,
        adapter=row.adapter,
        process_state=row.process_state,
        closed=row.closed,
        task=_task(s, task_id, now, places) if task_id is not None else None,
        last_active_at=row.last_active_at,
        exit_code=row.exit_code,
        mailbox_wake=row.mailbox_wake,
        pid=row.pid if row.process_state != "exited" else None,
        usage=s.agent_usage.get(row.agent_id),
        node=row.options.get("node"),
        role=row.role,
        sandbox=sandbox.view_of(row.options),
        **_worktree(s, row),
    )


def _worktree(s: SessionState, row: AgentRow) -> dict[str, Any]:
    """An agent in a git worktree: its branch and its changed paths (last counted)."""
    ref = ref_of(row.agent_id, row.name, row.options)
    if ref is None:
        return {}
    return {"branch": ref.branch, "changed_files": s.worktree_changed.get(row.agent_id)}


def _task(s: SessionState, task_id: str, now: float, places: dict[str, int]) -> api.TaskStatus:
    record = s.tasks[task_id]
    pending = tuple(
        msgspec.structs.replace(s.requests[r], question=preview(s.requests[r].question) or "")
        for r in record.pending_requests
        if r in s.requests
    )
    result = record.result
    since = record.waiting_since
    waiting_age = now - since if since is not None else None
    episode = s.stale.get(task_id)
    told = episode is not None and episode.notified and episode.since == since
    turns = s.turn_stats.get(task_id, TurnStats())
    return api.TaskStatus(
        task_id=task_id,
        state=record.state,
        description=preview(record.description) or "",
        description_chars=(
            len(record.description) if len(record.description) > PREVIEW_CHARS else None
        ),
        created_at=record.created_at,
        waiting_since=since,
        waiting_age_s=waiting_age,
        pending_requests=pending,
        stale=since is not None
        and (told or (waiting_age or 0.0) >= s.settings.stale_wait_threshold_s),
        result=preview_result(result) if result is not None else None,
        turns_without_done=turns.count,
        last_turn_ended_at=turns.ended_at,
        last_turn_exit_code=turns.exit_code,
        usage=s.task_usage.get(task_id),
        budget=record.budget,
        check=record.check,
        attempt=record.attempt,
        tool_calls=turns.tool_calls,
        queue_place=places.get(task_id),
    )


def _last_tasks(s: SessionState) -> dict[str, str]:
    """Each agent's newest task (one pass over the tasks, not one per agent)."""
    last: dict[str, str] = {}
    for task_id, record in s.tasks.items():
        last[record.agent_id] = task_id
    return last
