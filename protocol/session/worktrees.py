"""Agents in git worktrees: the session's rules (git itself runs off the broker's thread:
each ``ProbeWorktree`` effect is answered later by a
:class:`~protocol.records.worktrees.WorktreeProbed` event; what is pure about git's answers is
:mod:`protocol.records.worktrees`).

Rules:

1. **The start is recorded before the agent can change anything.** A worktree agent's task is
   handed over once its worktree's snapshot is taken (``ProbeWorktree snapshot``, then the
   ``Deliver``). A snapshot that fails still hands the task over (its changes are then
   counted since the branch's base) and the parent is told (notice ``worktree_failed``).
2. **A completion carries the task's changes.** When a worktree agent's task settles, its
   result is journaled and answered at once as always (the first terminal event still wins),
   and its watchers get it once its changes are listed (``ProbeWorktree diff``): the result
   with ``changes`` is journaled again, then handed over. A listing that fails hands over the
   result with ``changes.error``, and the parent is told.
3. **Only a clean worktree is removed.** ``close`` answers with the worktree's path; the
   session's edge then removes it if it is clean (git refuses otherwise) and hands back a
   :class:`~protocol.records.worktrees.WorktreeReleased`: a removal is journaled; a kept worktree is
   told to the parent (notice ``worktree_kept``: where, and why). Closing the agent again
   tries again (after its changes were committed or discarded).
4. ``shepherd worktrees`` lists every agent's worktree, paged (``WORKTREES_PAGE``); the
   edge fills in what only git knows (clean or dirty, changed paths now).
"""

from __future__ import annotations

from typing import Any

from protocol.calls import api_worktrees
from protocol.core.errors import InvalidArgument
from protocol.core.limits import WORKTREES_PAGE
from protocol.records.journal import WorktreeRemovedRecord
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskRecord, TaskResult
from protocol.records.worktrees import MergeTarget, WorktreeRef, WorktreeReleased, ref_of
from protocol.session import watchers
from protocol.session.effects import Deliver, Effect, Journal, Notify, ProbeWorktree, Story
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.wire.envelopes import TaskEnvelope

__all__ = [
    "close_fields",
    "deliver_task",
    "listing",
    "on_settle",
    "released",
    "replay_removed",
    "worktree_of",
]


def worktree_of(s: SessionState, agent_id: str) -> WorktreeRef | None:
    """The agent's worktree, unless it has none or a close removed it."""
    row = s.agents.get(agent_id)
    if row is None or agent_id in s.worktree_removed:
        return None
    return ref_of(row.agent_id, row.name, row.options)


def merge_targets(s: SessionState, args: api_worktrees.MergeArgs) -> tuple[MergeTarget, ...]:
    """What ``merge`` merges: the agent named, or (``queue``) every agent with a worktree whose
    last task completed, in the order they completed."""
    if args.order and not args.queue:
        raise InvalidArgument("merge: order: only with queue")
    if (args.agent is None) == (not args.queue):
        raise InvalidArgument("merge: name an agent, or queue (not both)")
    if args.agent is not None:
        return (merge_target(s, args.agent),)
    if args.order:
        return tuple(merge_target(s, handle) for handle in args.order)
    newest: dict[str, TaskResult | None] = {}
    for record in s.tasks.values():  # in delegation order: each agent's last one stays
        newest[record.agent_id] = record.result
    done = sorted(
        (result.completed_at, agent_id)
        for agent_id, result in newest.items()
        if result is not None and result.status == "completed"
        if (row := s.agents.get(agent_id)) and ref_of(agent_id, row.name, row.options)
    )
    return tuple(merge_target(s, agent_id) for _, agent_id in done)


def merge_target(s: SessionState, handle: str) -> MergeTarget:
    """The agent's branch for ``merge`` (its worktree may be removed: the branch stays), and
    every other live agent's worktree."""
    row = s.agent(handle)
    ref = ref_of(row.agent_id, row.name, row.options)
    if ref is None:
        raise InvalidArgument(f"merge: agent: {row.name} has no worktree (spawn it with worktree)")
    siblings = tuple(
        other
        for r in s.agents.values()
        if r.agent_id != row.agent_id and not r.closed
        if (other := worktree_of(s, r.agent_id)) is not None
    )
    return MergeTarget(ref=ref, siblings=siblings)


def deliver_task(s: SessionState, row: AgentRow, record: TaskRecord, env: TaskEnvelope) -> Effect:
    """Rule 1: hand the task over, or first record where the agent's worktree stands."""
    ref = worktree_of(s, row.agent_id)
    if ref is None:
        return Deliver(agent_id=row.agent_id, envelope=env)
    return ProbeWorktree(kind="snapshot", task_id=record.task_id, worktree=ref)


def on_settle(s: SessionState, result: TaskResult, opened: float) -> list[Effect]:
    """Rule 2: the settled result goes to its watchers (their windows counting from
    ``opened``), after its changes are listed (then from when it settled)."""
    snapshot = s.snapshots.pop(result.task_id, None)
    ref = worktree_of(s, result.agent_id)
    if ref is None or result.changes is not None:
        return watchers.hand_over(s, result, opened)
    s.diffing.add(result.task_id)
    others = tuple(
        other
        for row in s.agents.values()
        if row.agent_id != result.agent_id and not row.closed
        if (other := worktree_of(s, row.agent_id)) is not None
    )
    return [
        ProbeWorktree(
            kind="diff", task_id=result.task_id, worktree=ref, snapshot=snapshot, others=others
        )
    ]


def released(s: SessionState, event: WorktreeReleased, cx: Ctx) -> list[Effect]:
    """Rule 3: what the close did with the worktree is journaled (removed) or told (kept)."""
    row = s.agents.get(event.agent_id)
    if row is None or event.agent_id in s.worktree_removed:
        return []
    if event.removed:
        s.worktree_removed[event.agent_id] = event.path
        record = WorktreeRemovedRecord(agent_id=event.agent_id, path=event.path, at=cx.now)
        return [Journal(record=record), Story(text=f"{row.name}: worktree removed")]
    ref = ref_of(row.agent_id, row.name, row.options)
    branch = f" (branch {ref.branch})" if ref is not None else ""
    text = (
        f"{row.name}'s worktree was kept at {event.path}{branch}: {event.why or 'not clean'}. "
        f"Commit or discard its changes and close {row.name} again to remove it."
    )
    return [
        Notify(
            note=Notice(created_at=cx.now, code="worktree_kept", text=text, agent_id=row.agent_id)
        )
    ]


def replay_removed(s: SessionState, record: WorktreeRemovedRecord) -> None:
    s.worktree_removed[record.agent_id] = record.path


def listing(s: SessionState, cursor: int) -> api_worktrees.WorktreesResult:
    """Rule 4: a page of worktrees, as far as the session knows them (the edge asks git)."""
    rows: list[api_worktrees.WorktreeStatus] = []
    for row in s.agents.values():
        ref = ref_of(row.agent_id, row.name, row.options)
        if ref is None:
            continue
        removed = row.agent_id in s.worktree_removed
        rows.append(
            api_worktrees.WorktreeStatus(
                agent=row.name,
                agent_id=row.agent_id,
                path=ref.path,
                branch=ref.branch,
                base=ref.base,
                state="removed" if removed else "unknown",
                changed_files=None if removed else s.worktree_changed.get(row.agent_id),
                closed=row.closed,
            )
        )
    page = tuple(rows[cursor : cursor + WORKTREES_PAGE])
    more = cursor + WORKTREES_PAGE < len(rows)
    return api_worktrees.WorktreesResult(
        worktrees=page, cursor=cursor, next_cursor=cursor + len(page) if more else None
    )


def close_fields(s: SessionState, row: AgentRow) -> dict[str, Any]:
    """What ``close`` answers about the agent's worktree (the edge then removes it if clean)."""
    ref = worktree_of(s, row.agent_id)
    return {} if ref is None else {"worktree_path": ref.path}
