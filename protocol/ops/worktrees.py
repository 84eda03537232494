"""The agents' git worktrees' operation (``shepherd worktrees``), beside
:mod:`protocol.ops.parent`: one entry of the operation table (see :mod:`protocol.ops`)."""

from __future__ import annotations

from protocol.calls import api_worktrees, views
from protocol.calls.answers import WORKTREE_PAGES
from protocol.ops.spec import Tool, entry

__all__ = ["WORKTREES"]


WORKTREES = entry(
    "worktrees",
    api_worktrees.WorktreesArgs,
    help="agents' git worktrees: path, branch, clean or dirty, changed files",
    view=views.worktrees,
    pager=WORKTREE_PAGES,
    params={
        "cursor": (
            "Start at this worktree (default 0); an answer that could not hold every worktree "
            "gives next_cursor"
        ),
    },
    tool=Tool(
        description=(
            "List the agents' git worktrees (agents spawned with worktree): agent, path, branch, "
            "clean or dirty (uncommitted changes or untracked files), and how many files each "
            "changed since its branch's base. A close removes only a clean worktree."
        ),
        prompt_snippet="List the agents' git worktrees and what each changed",
    ),
)
