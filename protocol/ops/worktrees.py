"""The agents' git worktrees' operations (``shepherd worktrees``, ``shepherd merge``), beside
:mod:`protocol.ops.parent`: entries of the operation table (see :mod:`protocol.ops`)."""

from __future__ import annotations

from protocol.calls import api_worktrees, views
from protocol.calls.answers import WORKTREE_PAGES
from protocol.ops.spec import Param, Tool, entry

__all__ = ["MERGE", "WORKTREES"]


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


MERGE = entry(
    "merge",
    api_worktrees.MergeArgs,
    help="merge an agent's branch: checked with git merge-tree first, conflicts reported",
    view=views.merge,
    params={
        "agent": Param(
            description="The agent (spawned with a worktree) whose branch to merge", cli="agent"
        ),
        "into": Param(
            description=(
                "The branch to merge into (default: the branch checked out in the "
                "repository's own directory)"
            ),
            cli="--into",
            metavar="BRANCH",
        ),
        "strategy": Param(
            description=(
                "merge (a merge commit), squash (one commit), or rebase (the branch's commits "
                "replayed on top); default merge"
            ),
            cli="--strategy",
        ),
        "queue": Param(
            description=(
                "Instead of one agent: every agent whose last task completed, in the order they "
                "completed, one after another (a conflict stops the queue)"
            ),
            cli="--queue",
        ),
        "order": Param(
            description="With queue: these agents, in this order (at most 100), instead",
            cli="--order",
            metavar="AGENT",
        ),
        "check": Param(
            description="Only check whether it merges cleanly (git merge-tree); change nothing",
            cli="--check",
        ),
        "rebase_siblings": Param(
            description=(
                "After the merge, rebase onto it the branches of the other agents whose "
                "worktrees changed the same paths, when they have no uncommitted change"
            ),
            cli="--rebase-siblings",
        ),
    },
    tool=Tool(
        description=(
            "Merge an agent's worktree branch into a branch (default: the repository's checked "
            "out one). git merge-tree checks it first without touching any checkout: a clean "
            "result is committed (merge, squash or rebase); conflicts are reported as paths, "
            "with nothing changed. The agent's worktree must have no uncommitted changes."
        ),
        prompt_snippet="Merge an agent's branch, or list the paths that conflict",
    ),
)
