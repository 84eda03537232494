"""Agents' git worktrees: made at ``spawn``, probed per task, removed at ``close`` if clean.

Where: ``<session dir>/worktrees/<agent name>``, on the branch ``shepherd/<session>/<name>``
(or ``--branch``), made from ``--repo`` (default: the session's working directory) at
``--base`` (default its HEAD). The agent's process starts there (its ``cwd``), whatever its
adapter.

Who runs git (never the broker's thread, which must not wait on a process):

- the session's edge (:class:`~actors.session.session.Session`, on the caller's thread):
  :func:`prepare` before a spawn, and the removal after a close, through the worker;
- :class:`GitWorker`, one thread per session: the ``ProbeWorktree`` effects (a task's
  snapshot, a task's changes) in the order the broker hands them over, each answer handed
  back to the broker as an event; and the edge's close and ``worktrees`` questions, after
  what was asked before them (a task cancelled by a close is listed before the worktree goes).

A failure of git is never only logged: a spawn is refused (``invalid_argument`` with git's
message), a probe comes back with its error (the rules tell the parent), a kept worktree is
told with why.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from actors.runtime.log import logger
from actors.session import git_merge
from actors.session.git import (
    GIT_TIMEOUT_S,
    GitError,
    content_hashes,
    differ_from,
    dirty_paths,
    git,
    snapshot,
)
from protocol.calls import api, api_worktrees
from protocol.core.errors import InvalidArgument
from protocol.core.ids import is_valid_name
from protocol.records.journal import MergeRecord
from protocol.records.worktrees import (
    MergeTarget,
    WorktreeProbed,
    WorktreeRef,
    WorktreeReleased,
    changed_since,
    default_branch,
    make_changes,
    shown,
)
from protocol.session import merges
from protocol.session.effects import ProbeWorktree

__all__ = ["GitWorker", "prepare", "undo"]


def _refuse(field: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"spawn: {field}: {why}")


def prepare(args: api.SpawnArgs, root: Path, session_id: str) -> tuple[api.SpawnArgs, bool]:
    """Make the agent's worktree (``args.worktree``); the arguments to spawn it with: ``repo``
    (the repository's top directory), ``branch``, ``base`` (a commit) and ``cwd`` (the
    worktree) filled in, as its journaled options will say; and whether a new branch was made.
    Refusals are ``invalid_argument`` naming the field; a refused one leaves nothing behind."""
    if not args.worktree:
        for field in ("repo", "branch", "base"):
            if getattr(args, field) is not None:
                raise _refuse(field, "only with --worktree (worktree: true)")
        return args, False
    if not is_valid_name(args.name):
        raise _refuse("name", f"{args.name!r} is not a valid agent name")
    if args.cwd is not None:
        raise _refuse("cwd", "an agent with a worktree runs in it; name the repository with repo")
    if args.adapter == "simulated":
        raise _refuse("worktree", "a simulated agent runs no process to put in a worktree")
    given = args.repo or os.getcwd()
    if not os.path.isdir(given):
        what = "is not a directory" if os.path.exists(given) else "does not exist"
        raise _refuse("repo", f"{given} {what}")
    try:
        repo = git(["rev-parse", "--show-toplevel"], given).strip()
    except GitError as exc:
        raise _refuse("repo", f"{given} is not a git work tree ({exc})") from None
    branch = args.branch or default_branch(session_id, args.name)
    if branch.startswith("-"):
        raise _refuse("branch", f"{branch!r} is not a valid branch name")
    try:
        git(["check-ref-format", "--branch", branch], repo)
    except GitError:
        raise _refuse("branch", f"{branch!r} is not a valid branch name") from None
    exists = _has_branch(repo, branch)
    if exists and args.base is not None:
        raise _refuse("base", f"branch {branch} exists already; base names a new branch's start")
    start = branch if exists else (args.base or "HEAD")
    try:
        base = git(["rev-parse", "--verify", "--end-of-options", start + "^{commit}"], repo)
    except GitError:
        raise _refuse("base", f"{start!r} is not a commit of {repo}") from None
    path = root / args.name
    if os.path.lexists(path):
        raise _refuse(
            "worktree", f"{path} exists already (a kept worktree of an earlier {args.name})"
        )
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    command = (
        ["worktree", "add", str(path), branch]
        if exists
        else ["worktree", "add", "-b", branch, str(path), base.strip()]
    )
    try:
        git(command, repo)
    except GitError as exc:
        raise _refuse("branch", f"no worktree for {branch}: {exc}") from None
    made = msgspec.structs.replace(
        args, repo=repo, branch=branch, base=base.strip(), cwd=str(path), worktree=True
    )
    return made, not exists


def _has_branch(repo: str, branch: str) -> bool:
    try:
        git(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], repo)
    except GitError:
        return False
    return True


def undo(args: api.SpawnArgs, made_branch: bool) -> None:
    """A spawn refused after :func:`prepare` made its worktree: remove it (and its branch if
    the spawn made it: nothing was done on it)."""
    if not args.worktree or args.cwd is None or args.repo is None:
        return
    try:
        git(["worktree", "remove", "--force", args.cwd], args.repo)
        if made_branch and args.branch is not None:
            git(["branch", "-D", args.branch], args.repo)
    except GitError as exc:
        logger.warning("could not undo the worktree {}: {}", args.cwd, exc)
        shutil.rmtree(args.cwd, ignore_errors=True)


# ----------------------------------------------------------------------------- the worker


#: the edge's wait for the git worker (what was asked before, then its own git calls)
GIT_WAIT_S = 4 * GIT_TIMEOUT_S


class GitWorker:
    """One thread running git for a session, in the order it was asked."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shepherd-git")

    def probe(self, effect: ProbeWorktree, answer: Callable[[WorktreeProbed], object]) -> None:
        """Run the probe; its answer (with git's error, if it failed) goes to ``answer``."""

        def run() -> None:
            try:
                event = _probe(effect)
            except Exception as exc:  # git's failure, or a path gone: told, never dropped
                event = WorktreeProbed(
                    kind=effect.kind,
                    task_id=effect.task_id,
                    agent_id=effect.worktree.agent_id,
                    error=str(exc) or type(exc).__name__,
                )
            answer(event)

        self._submit(run)

    def release(self, ref: WorktreeRef) -> Future[WorktreeReleased]:
        return self._submit(lambda: _release(ref))

    def inspect(
        self, rows: tuple[api_worktrees.WorktreeStatus, ...]
    ) -> Future[tuple[api_worktrees.WorktreeStatus, ...]]:
        return self._submit(lambda: tuple(_inspect(row) for row in rows))

    def plan_merge(self, target: MergeTarget, args: api_worktrees.MergeArgs) -> Future[Any]:
        return self._submit(lambda: git_merge.plan(target, args))

    def move(self, plan: git_merge.Plan, rebase_siblings: bool = False) -> Future[Any]:
        return self._submit(lambda: git_merge.move(plan, rebase_siblings))

    def probe_merge(self, record: MergeRecord, answer: Callable[[MergeRecord], object]) -> None:
        """Where a merge's ``into`` stands now (:func:`protocol.session.merges.settle`)."""

        def run() -> None:
            try:
                head = git_merge.head_of(record.repo, record.into)
            except Exception:  # git failed, the repository is gone: not known to be done
                head = None
            answer(merges.settle(record, head, record.at))

        self._submit(run)

    def _submit(self, fn: Callable[[], Any]) -> Future[Any]:
        try:
            return self._pool.submit(fn)
        except RuntimeError:  # shut down: the session is closing
            done: Future[Any] = Future()
            done.set_exception(GitError("the session is shutting down"))
            return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


def _probe(effect: ProbeWorktree) -> WorktreeProbed:
    ref = effect.worktree
    if effect.kind == "snapshot":
        return WorktreeProbed(
            kind="snapshot",
            task_id=effect.task_id,
            agent_id=ref.agent_id,
            snapshot=snapshot(ref.path),
        )
    since_base = differ_from(ref.path, ref.base)
    snap = effect.snapshot
    if snap is None:
        changed, since = since_base, "branch"
    else:
        now = content_hashes(ref.path, snap.dirty)
        changed, since = changed_since(snap, differ_from(ref.path, snap.head), now), "task"
    others: dict[str, tuple[str, set[str]]] = {}
    problems: list[str] = []
    for other in effect.others:
        try:
            others[other.agent] = (other.branch, differ_from(other.path, other.base))
        except GitError as exc:
            problems.append(f"{other.agent}: {exc}")
    changes = make_changes(ref.branch, ref.path, changed, others, since=since)  # type: ignore[arg-type]
    return WorktreeProbed(
        kind=effect.kind,
        task_id=effect.task_id,
        agent_id=ref.agent_id,
        changes=changes,
        changed_files=len(since_base),
        error=("overlap not known for " + "; ".join(problems)) if problems else None,
    )


def _release(ref: WorktreeRef) -> WorktreeReleased:
    """Remove the worktree if it is clean (git itself refuses a dirty one); its branch stays."""
    if not os.path.isdir(ref.path):
        return WorktreeReleased(agent_id=ref.agent_id, path=ref.path, removed=True)
    try:
        dirty = dirty_paths(ref.path)
        if dirty:
            why = f"{len(dirty)} uncommitted or untracked file(s), e.g. {shown(dirty[0])}"
            return WorktreeReleased(agent_id=ref.agent_id, path=ref.path, removed=False, why=why)
        git(["worktree", "remove", ref.path], ref.repo)
    except GitError as exc:
        return WorktreeReleased(agent_id=ref.agent_id, path=ref.path, removed=False, why=str(exc))
    return WorktreeReleased(agent_id=ref.agent_id, path=ref.path, removed=True)


def _inspect(row: api_worktrees.WorktreeStatus) -> api_worktrees.WorktreeStatus:
    if row.state == "removed":
        return row
    if not os.path.isdir(row.path):
        return msgspec.structs.replace(row, state="missing", changed_files=None)
    try:
        dirty = bool(dirty_paths(row.path))
        count = len(differ_from(row.path, row.base))
    except GitError as exc:
        return msgspec.structs.replace(row, state="unknown", error=str(exc)[:500])
    return msgspec.structs.replace(row, state="dirty" if dirty else "clean", changed_files=count)
