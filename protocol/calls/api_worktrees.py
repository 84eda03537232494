"""The ``worktrees`` operation's Structs: agents' git worktrees, paged (beside
:mod:`protocol.calls.api`, whose :class:`~protocol.calls.api.Arguments` they are)."""

from __future__ import annotations

from typing import Literal

import msgspec

from protocol.calls.api import Arguments
from protocol.core.limits import Cursor

__all__ = ["WorktreeStatus", "WorktreesArgs", "WorktreesResult"]


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
