"""The ``worktrees`` and ``merge`` operations' Structs: agents' git worktrees, paged, and an
agent's branch merged (beside :mod:`protocol.calls.api`, whose
:class:`~protocol.calls.api.Arguments` they are)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from protocol.calls.api import Arguments
from protocol.core.limits import MAX_BATCH, Cursor, Handle, RefName
from protocol.records.worktrees import Overlap

__all__ = [
    "MergeArgs",
    "MergeResult",
    "MergeStrategy",
    "QueuedMerge",
    "WorktreeStatus",
    "WorktreesArgs",
    "WorktreesResult",
]

#: ``merge``: a merge commit (two parents), one squashed commit, or the branch's commits
#: replayed one by one on top of ``into``
MergeStrategy = Literal["merge", "squash", "rebase"]


class WorktreeStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One agent's git worktree (``shepherd worktrees``)."""

    agent: str
    agent_id: str
    path: str
    branch: str
    #: the commit the branch started from (changes are counted since it)
    base: str
    #: "clean", "dirty" (uncommitted changes or untracked files), "removed" (by a close),
    #: "missing" (gone from disk), "unknown" (git failed: see ``error``)
    state: Literal["clean", "dirty", "removed", "missing", "unknown"]
    #: paths changed since the branch's base (committed or not); None when not known
    changed_files: int | None = None
    closed: bool = False
    error: str | None = None


class WorktreesResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    #: this page's worktrees (agents in spawn order), from ``cursor`` on
    worktrees: tuple[WorktreeStatus, ...]
    cursor: int = 0
    #: more follow: ask again with this cursor
    next_cursor: int | None = None


class WorktreesArgs(
    Arguments[WorktreesResult], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    #: the first worktree of the page (at most ``WORKTREES_PAGE`` per page)
    cursor: Cursor = 0


class QueuedMerge(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One step of ``merge --queue``: an agent's branch, merged or why not."""

    agent: str
    merged: bool
    commit: str | None = None
    up_to_date: bool = False
    conflicts: tuple[str, ...] = ()
    conflicts_count: int = 0


class MergeResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An agent's branch merged into ``into`` (``shepherd merge``), or why not: nothing is
    changed unless ``merged``."""

    agent: str
    branch: str
    into: str
    strategy: MergeStrategy
    #: ``into``'s commit before
    before: str
    #: ``into`` moved to ``commit``
    merged: bool
    commit: str | None = None
    #: the branch has nothing ``into`` lacks: nothing to merge
    up_to_date: bool = False
    #: only checked (``check``): it would merge cleanly, or these paths conflict
    checked_only: bool = False
    #: the paths that conflict (git merge-tree's), sorted, at most 50, and their count
    conflicts: tuple[str, ...] = ()
    conflicts_count: int = 0
    #: the paths the merge changed in ``into`` (or would), sorted, at most 50, and their count
    files: tuple[str, ...] = ()
    files_count: int = 0
    #: the other live agents whose worktrees changed paths the merge changed (at most 10,
    #: each with at most 50 paths and their count): each was sent a message saying so
    overlaps: tuple[Overlap, ...] = ()
    #: ``rebase_siblings``: the agents in ``overlaps`` whose branches were rebased onto the
    #: merge, and those that were not (a worktree with uncommitted changes, or a conflict:
    #: the rebase was undone), each told so in its message
    rebased: tuple[str, ...] = ()
    not_rebased: tuple[str, ...] = ()
    #: ``--queue``: every merge tried, in order (the fields above are the last one's); a
    #: conflict stops the queue
    queue: tuple[QueuedMerge, ...] = ()


class MergeArgs(Arguments[MergeResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: the agent (spawned with a worktree) whose branch is merged (or ``queue``)
    agent: Handle | None = None
    #: every agent whose last task completed, in the order they completed, one after another
    queue: bool = False
    #: with ``queue``: these agents, in this order, instead
    order: Annotated[tuple[Handle, ...], msgspec.Meta(max_length=MAX_BATCH)] | None = None
    #: the branch to merge into (default: the branch checked out in the repository's own
    #: directory)
    into: RefName | None = None
    strategy: MergeStrategy = "merge"
    #: only check with git merge-tree whether it merges cleanly; change nothing
    check: bool = False
    #: after the merge, rebase onto it the branches of the agents told (``overlaps``) whose
    #: worktrees have no uncommitted change
    rebase_siblings: bool = False
