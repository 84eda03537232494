"""``merge`` at the session's edge: the broker names the agent's branch and the other live
agents' worktrees (:func:`protocol.session.worktrees.merge_target`), the session's git thread
merges (:mod:`actors.session.git_merge`), and each other agent whose worktree changed paths
the merge changed is sent a message naming them, as the parent's message (a closed agent is
passed over)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from protocol.calls import api
from protocol.calls.api_worktrees import MergeArgs, MergeResult
from protocol.core.errors import ShepherdError
from protocol.records.worktrees import MergeTarget, Overlap

__all__ = ["merge", "told"]


def merge(
    args: MergeArgs,
    ask: Callable[[MergeArgs], MergeTarget],
    git: Callable[[MergeTarget, MergeArgs], Future[MergeResult]],
    run: Callable[[api.MessageArgs], Any],
    timeout_s: float,
) -> MergeResult:
    """``ask``: the broker's answer; ``git``: the git thread's merge; ``run``: an operation."""
    result = git(ask(args), args).result(timeout=timeout_s)
    for overlap in result.overlaps:
        with contextlib.suppress(ShepherdError):  # closed meanwhile: nothing to tell
            run(api.MessageArgs(target=overlap.agent, message=told(result, overlap)))
    return result


def told(result: MergeResult, overlap: Overlap) -> str:
    """The message to an agent whose worktree changed paths the merge changed."""
    more = overlap.count - len(overlap.files)
    paths = ", ".join(overlap.files) + (f" and {more} more" if more > 0 else "")
    return (
        f"[shepherd] {result.agent}'s branch was merged into {result.into} "
        f"({(result.commit or '')[:12]}): it changed {overlap.count} path(s) your worktree "
        f"changed too: {paths}. Bring {result.into} into your branch before you go on."
    )
