"""Restoring a session after a parent restart: a fold of the journal, then the same effects.

Rules:

1. **The journal is the truth.** :func:`fold` replays its records, in order, through the same
   moves the rules made when they wrote them (``protocol.records.tasks`` and
   ``protocol.records.requests`` machines, the process table): a task comes back ``running`` or,
   with open requests, ``waiting`` since the start of its current episode; a settled task stays
   settled with its result. Intermediate moves are not journaled: they are derived.
2. **Nothing is started twice, nothing closed comes back.** :func:`resume` asks for the
   agents' processes with the same ``SpawnAgent`` effect a spawn uses, marked to *adopt* the
   running bridge (or, for an agent whose exit was journaled, to keep only its output): a
   restarted parent never starts a second process. An agent the parent had closed stays
   closed (its ``agent_close`` record); if its process had not exited yet, it is adopted and
   closed again. Open tasks get their actors again (each arms its own deadline, and knows
   what the task spent) and their task envelope with its old id
   (an agent's inbox drops one it already had); pending requests keep their reply deadlines.
3. **Nothing is told twice.** A watcher delivers only what it had not delivered: neither a
   result its ``watch`` answer carried (``inline``, journaled) nor one a notification carried
   (the notifications file *is* the record of delivery). A waiting episode already reported
   stale is not reported again.
4. A task whose agent is gone (closed, exited, unknown) fails: "the agent was gone when the
   parent restarted".
5. **Recovery** (``serve --recover``): an agent whose bridge is gone too is started again and
   its open task handed again, once per incarnation (:mod:`protocol.session.recover`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NoReturn

import msgspec

from protocol.core.ids import IdKind
from protocol.records.journal import (
    AgentCloseRecord,
    AgentExitRecord,
    AgentRecord,
    AgentRecoverRecord,
    MergeRecord,
    PromptRecord,
    SessionLimitsRecord,
    TaskChangesRecord,
    TaskResumeRecord,
    UsageRecord,
    WatcherRecord,
    WorktreeRemovedRecord,
)
from protocol.records.requests import RequestRecord
from protocol.records.settings import Settings
from protocol.records.tasks import TaskEvent, TaskRecord, TaskState
from protocol.session import (
    admission,
    agents,
    budgets,
    checks,
    claims,
    merges,
    providers,
    recover,
    requests,
    settlement,
    task_budget,
    tasks,
    watchers,
    worktree_events,
    worktrees,
)
from protocol.session.effects import (
    Effect,
    OpenNote,
    RequestTimeout,
    SpawnTask,
    SpawnWatcher,
    StartTimer,
    StopAgent,
    Story,
    WatchdogAgent,
)
from protocol.session.state import Ctx, SessionState, WatcherState
from protocol.session.tasks import stale_for

__all__ = ["Restore", "fold", "resume"]


class _NoIds:
    """Replaying makes no ids: everything it needs was journaled."""

    def new(self, kind: IdKind) -> NoReturn:
        raise AssertionError(f"a replay made a new {kind.value} id")

    def secret(self) -> NoReturn:
        raise AssertionError("a replay made a new capability")


_NO_IDS = _NoIds()


def fold(records: Iterable[msgspec.Struct], into: SessionState | None = None) -> SessionState:
    """Replay journal records, in order, into the session state they describe (rule 1)."""
    s = into if into is not None else SessionState("", Settings())
    for record in records:
        match record:
            case AgentRecord():
                agents.join(s, record, Ctx(record.created_at, _NO_IDS))
            case AgentExitRecord():
                agents.replay_exit(s, record, Ctx(record.at, _NO_IDS))
            case AgentCloseRecord():
                agents.replay_close(s, record)
            case TaskRecord():
                recover.replay_delegation(s, record)
                tasks.replay(s, record, Ctx(record.created_at, _NO_IDS))
            case RequestRecord():
                at = record.resolved_at if record.resolved_at is not None else record.created_at
                requests.replay(s, record, Ctx(at, _NO_IDS))
            case PromptRecord():
                s.prompts[record.prompt_id] = record.task_id
            case WatcherRecord():
                pending = tuple(t for t in record.ids if t not in record.inline)
                if pending:
                    watcher = watchers.subscribe(
                        s, record.watcher_id, record.ids, pending, record.created_at
                    )
                    s.folded_watchers[record.watcher_id] = watcher
            case UsageRecord():
                budgets.replay(s, record)
            case AgentRecoverRecord():
                recover.replay_recover(s, record)
            case TaskResumeRecord():
                recover.replay_resume(s, record)
            case WorktreeRemovedRecord():
                worktrees.replay_removed(s, record)
            case TaskChangesRecord():
                worktree_events.replay_changes(s, record)
            case SessionLimitsRecord():
                s.limits = record.limits
            case MergeRecord():
                merges.replay(s, record)
    return s


class Restore(msgspec.Struct, kw_only=True):
    """What a restarted parent starts from: the folded journal, per watcher the task ids whose
    completion it already delivered and per task the requests named by the stale-wait notices
    it already gave (both read from the notifications file), and how many damaged lines the
    two files had (torn tails cut off, unreadable records skipped; each was logged)."""

    state: SessionState
    delivered: dict[str, set[str]] = {}
    stale_noticed: dict[str, set[str]] = {}
    problems: int = 0
    #: ``serve --recover``: start again the agents whose bridges are gone (rule 5)
    recover: bool = False
    #: the agents whose bridge was found running at the restart (read with ``recover``)
    live: frozenset[str] = frozenset()
    #: per open task, what its agent told the parent (from the notifications): its history
    told: dict[str, list[str]] = {}
    #: the soft budget warnings the notifications file holds, as (task id or ``session``,
    #: limit): each one passed and not among them is told after the restart (budgets rule 3)
    warned: set[tuple[str, str]] = set()

    def stale_notice_given(self, task_id: str) -> bool:
        """Was the task's current waiting episode already reported stale?"""
        opened = self.state.episodes.get(task_id, ())
        return not self.stale_noticed.get(task_id, set()).isdisjoint(opened)


def resume(restore: Restore, cx: Ctx) -> list[Effect]:
    """The effects that bring the folded state back to life (rules 2-4)."""
    s = restore.state
    s.journal_problems = restore.problems
    s.budget_warned |= {w for w in restore.warned if w[0] == budgets.SESSION_SCOPE}
    for task_id, episode in list(s.stale.items()):  # a wait the parent was told of before
        if restore.stale_notice_given(task_id):
            s.stale[task_id] = msgspec.structs.replace(episode, notified=True)
    # each open task's actor first, from the record the fold found: what follows may tell it
    effects: list[Effect] = [_spawn(restore, r) for r in s.tasks.values() if not r.terminal]
    for request in s.requests.pending():
        if request.deadline_at is not None:
            event = RequestTimeout(request_id=request.request_id)
            effects.append(StartTimer(delay=max(0.0, request.deadline_at - cx.now), event=event))
    for agent_id in list(s.agents):
        row = s.agents[agent_id] = msgspec.structs.replace(
            s.agents[agent_id], last_active_at=cx.now
        )
        if restore.recover and recover.wants_respawn(row, restore.live):
            effects += recover.respawn(s, row, cx)
        else:
            effects.append(agents.respawn(row))
        effects.append(
            WatchdogAgent(
                agent_id=agent_id, name=row.name, at=cx.now, adapter=row.adapter, role=row.role
            )
        )
        if row.closed and row.process_state != "exited":  # closed, not yet gone: close it again
            effects.append(StopAgent(agent_id=agent_id))
    for task_id, record in list(s.tasks.items()):
        if record.terminal:
            continue
        effects.append(OpenNote(record=record, restored=True))  # its note kept as it is
        owner = s.agents.get(record.agent_id)
        if owner is None or owner.closed:
            why = "the agent was gone when the parent restarted"
            effects += settlement.settle(s, task_id, TaskEvent.FAIL, cx, error=why)
            continue
        told, ended = budgets.restored(s, task_id, cx)
        effects += told
        if ended:
            continue
        claims.restored(s, task_id)  # its tool calls before the restart are not known
        if record.state is TaskState.VERIFYING:  # its check runs again, once
            effects.append(checks.run_check(s, record))
        if record.state is not TaskState.QUEUED:  # a queued one waits for its slot still
            effects += recover.hand(s, record, cx, restore.told)
    watching = _watchers(restore, cx)
    effects += watching
    effects += budgets.resume(s, cx)
    effects += providers.restored(s, cx)  # no hold of the last parent stands
    effects += admission.restored(s, cx)  # the slots held, the queue, and what fits now
    effects += merges.restored(s)  # a merge planned and not known done: git says which
    open_tasks = sum(1 for r in s.tasks.values() if not r.terminal)
    effects.append(
        Story(
            text=f"session restored: {len(s.agents)} agents, {len(s.results)} settled, "
            f"{open_tasks} open tasks, "
            f"{sum(1 for e in watching if isinstance(e, SpawnWatcher))} watchers"
        )
    )
    return effects


def _spawn(restore: Restore, record: TaskRecord) -> SpawnTask:
    """An open task's actor, from its record, what it spent and the soft warnings it gave
    (its deadline armed by it)."""
    s, task_id = restore.state, record.task_id
    told = frozenset(limit for scope, limit in restore.warned if scope == task_id)
    soft = task_budget.soft_for(record, s.settings.budget_soft_fraction, told)
    episode = s.stale.get(task_id)  # its wait, if the parent was told of it before
    stale = stale_for(s, episode.since if episode is not None and episode.notified else None)
    return SpawnTask(record=record, usage=s.task_usage.get(task_id), soft=soft, stale=stale)


def _watchers(restore: Restore, cx: Ctx) -> list[Effect]:
    """Each watcher the journal describes gets its actor again, keeping only what it had not
    delivered (the fold's watchers are handed over: the session keeps none); a result that
    settled and was never delivered goes out now, once (rule 3)."""
    s = restore.state
    live: list[WatcherState] = []
    for watcher in s.folded_watchers.values():
        delivered = restore.delivered.get(watcher.watcher_id, set())
        for task_id in watcher.pending & delivered:
            subscribed = s.subscribers.get(task_id, [])
            if watcher.watcher_id in subscribed:
                subscribed.remove(watcher.watcher_id)
            if not subscribed:
                s.subscribers.pop(task_id, None)
        pending = watcher.pending - delivered
        if pending:
            # its actor starts watching again now
            live.append(msgspec.structs.replace(watcher, pending=pending, since=cx.now))
    s.folded_watchers = {}
    effects: list[Effect] = [SpawnWatcher(watcher=w) for w in live]
    for task_id in list(s.subscribers):
        result = s.result_of(task_id)
        if result is not None:  # settled, never delivered: deliver it now, once
            effects += watchers.hand_over(s, result, result.completed_at)
    return effects
