"""``shepherd merge AGENT [--into BRANCH] [--strategy merge|squash|rebase] [--check]``: an
agent's worktree branch merged into another branch, checked first without touching any
checkout. Runs on the session's git thread (:class:`actors.session.worktrees.GitWorker`).

Rules:

1. **The branch, committed.** What is merged is the agent's branch: its worktree must have no
   uncommitted change (those are not on the branch; ``invalid_argument`` lists them). A
   worktree a close removed is fine: its branch stays.
2. **Into** the branch ``--into`` names (a local branch, not the agent's own), by default the
   branch checked out in the repository's own directory (``invalid_argument`` if that is a
   detached HEAD). A branch checked out in a worktree with uncommitted changes is refused.
3. **Checked first.** ``git merge-tree --write-tree`` merges the two in the object store only:
   conflicts are answered as their paths (``merged: false``), with nothing changed; so is a
   ``--check``'s clean result. A branch already in ``into``, or whose merge would change
   nothing (squashed in before), has nothing to merge (``up_to_date``).
4. **Committed without a checkout.** ``merge``: a commit of merge-tree's tree with both heads as
   parents; ``squash``: the same tree, ``into``'s head its one parent; ``rebase``: each of the
   branch's commits (merges refused) cherry-picked in order in a temporary detached worktree,
   removed after (a conflict there is answered as a conflict, nothing changed).
5. **Moved at once, or not at all.** ``into`` checked out somewhere (the repository's own
   directory, or a worktree) is fast-forwarded there (``git merge --ff-only``: its checkout
   follows); otherwise its ref is moved by ``git update-ref`` given its old value (a branch
   that moved meanwhile makes it fail, nothing changed). A failure of git is ``git_failed``
   with git's words; commits made before it are left unreferenced, harmless.
6. **Bounded**: at most :data:`~protocol.core.limits.WORKTREE_FILES_LISTED` conflicting and
   changed paths listed (sorted; counts whole), each cut to 300 characters.
7. **The others told.** After a merge, each other live agent whose worktree changed (since
   its branch's base, committed or not) paths the merge changed is listed in ``overlaps`` (at
   most :data:`~protocol.core.limits.WORKTREE_OVERLAP_AGENTS`); the session sends each a
   message naming them (:mod:`actors.session.merging`).
8. **Siblings rebased, when asked** (``rebase_siblings``): each of those agents whose worktree
   has no uncommitted change gets its branch rebased onto the merge in its worktree; a rebase
   that conflicts is undone (``git rebase --abort``). Each is listed as ``rebased`` or
   ``not_rebased`` and told which.
"""

from __future__ import annotations

import os
import tempfile

import msgspec

from actors.session.git import GitError, differ_from, dirty_paths, git, run_git
from protocol.calls.api_worktrees import MergeArgs, MergeResult
from protocol.core.errors import GitFailed, InvalidArgument
from protocol.core.limits import WORKTREE_FILES_LISTED, WORKTREE_OVERLAP_AGENTS
from protocol.records.worktrees import MergeTarget, Overlap, WorktreeRef, shown

__all__ = ["Plan", "head_of", "move", "plan"]

#: commit subjects a squashed commit's message lists at most
_SUBJECTS = 50


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A clean merge committed, ``into`` not moved yet (rule 5: :func:`move` moves it)."""

    target: MergeTarget
    #: what the answer will be (``commit`` set, ``merged`` still false)
    result: MergeResult
    #: the worktree that has ``into`` checked out, if one does
    checkout: str | None
    message: str


def plan(target: MergeTarget, args: MergeArgs) -> MergeResult | Plan:
    """Rules 1-4: the answer when nothing is to move (conflicts, a check, up to date), else the
    plan; ``invalid_argument`` or ``git_failed`` when nothing was changed."""
    try:
        return _plan(target, args)
    except GitError as exc:
        raise GitFailed(f"merge: {exc}") from None


def move(plan: Plan, rebase_siblings: bool = False) -> MergeResult:
    """Rules 5, 7 and 8: ``into`` moved to the plan's commit, the other agents it concerns,
    and (``rebase_siblings``) their branches rebased onto it."""
    result, repo = plan.result, plan.target.ref.repo
    assert result.commit is not None
    try:
        if plan.checkout is not None:
            git(["merge", "--ff-only", "--quiet", result.commit], plan.checkout)
        else:
            into, before = f"refs/heads/{result.into}", result.before
            git(["update-ref", "-m", plan.message, into, result.commit, before], repo)
        merged = set(_paths(repo, result.before, result.commit))
    except GitError as exc:
        raise GitFailed(f"merge: {exc}") from None
    overlaps = _overlaps(merged, plan.target.siblings)
    result = msgspec.structs.replace(result, merged=True, overlaps=overlaps)
    if not rebase_siblings or not overlaps:
        return result
    told = {o.agent for o in overlaps}
    onto = result.commit
    assert onto is not None
    rebased: list[str] = []
    not_rebased: list[str] = []
    for sibling in plan.target.siblings:
        if sibling.agent in told:
            (rebased if _rebase(sibling.path, onto) else not_rebased).append(sibling.agent)
    return msgspec.structs.replace(result, rebased=tuple(rebased), not_rebased=tuple(not_rebased))


def _rebase(path: str, onto: str) -> bool:
    """Rule 8: a worktree with no uncommitted change, its branch rebased onto ``onto`` (a
    conflict undoes it); whether it was."""
    try:
        if dirty_paths(path):
            return False
        if run_git(["rebase", "--quiet", onto], path)[0] == 0:
            return True
        run_git(["rebase", "--abort"], path)
    except (GitError, OSError):
        pass
    return False


def head_of(repo: str, branch: str) -> str | None:
    """``branch``'s commit in ``repo`` (None: no such branch)."""
    ask = ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"]
    code, out = run_git(ask, repo, ok=(0, 1))
    return out.strip() if code == 0 else None


def _overlaps(merged: set[str], siblings: tuple[WorktreeRef, ...]) -> tuple[Overlap, ...]:
    """Rule 7: each live sibling whose worktree changed paths the merge changed."""
    found = []
    for sibling in siblings:
        try:
            common = sorted(merged & differ_from(sibling.path, sibling.base))
        except (GitError, OSError):  # gone, or git failed there: nothing known to tell
            continue
        if common:
            files, count = _listed(common)
            found.append(
                Overlap(agent=sibling.agent, branch=sibling.branch, files=files, count=count)
            )
    return tuple(found[:WORKTREE_OVERLAP_AGENTS])


def _plan(target: MergeTarget, args: MergeArgs) -> MergeResult | Plan:
    ref = target.ref
    repo, branch = ref.repo, ref.branch
    if os.path.isdir(ref.path) and (dirty := dirty_paths(ref.path)):
        listed = ", ".join(shown(p) for p in sorted(dirty)[:10])
        raise InvalidArgument(
            f"merge: {ref.agent}'s worktree has {len(dirty)} uncommitted change(s) ({listed}): "
            "they are not on its branch; commit them first"
        )
    into = args.into or _checked_out_branch(repo)
    if into.startswith("-") or run_git(["check-ref-format", "--branch", into], repo)[0] != 0:
        raise InvalidArgument(f"merge: into: {into[:80]!r} is not a valid branch name")
    if into == branch:
        raise InvalidArgument(f"merge: into: {into} is {ref.agent}'s own branch")
    before = _head(repo, into, "into")
    head = _head(repo, branch, "agent")
    checkout = _checkout_of(repo, into)
    if checkout is not None and (dirty := dirty_paths(checkout)):
        raise InvalidArgument(
            f"merge: into: {into} is checked out in {checkout} with {len(dirty)} uncommitted "
            "change(s); commit or stash them first"
        )
    base = MergeResult(
        agent=ref.agent,
        branch=branch,
        into=into,
        strategy=args.strategy,
        before=before,
        merged=False,
    )
    if run_git(["merge-base", "--is-ancestor", head, before], repo)[0] == 0:
        return msgspec.structs.replace(base, up_to_date=True)
    code, out = run_git(
        ["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", before, head],
        repo,
        ok=(0, 1),
    )
    tree, *paths = [p for p in out.split("\0") if p]
    if code == 1:
        return _conflicts(base, paths)
    if tree == git(["rev-parse", f"{before}^{{tree}}"], repo).strip():
        return msgspec.structs.replace(base, up_to_date=True)  # squashed in already, say
    files, count = _changed(repo, before, tree)
    if args.check:
        return msgspec.structs.replace(base, checked_only=True, files=files, files_count=count)
    message = f"Merge {branch} into {into} (shepherd merge of {ref.agent})"
    if args.strategy == "merge":
        commit = git(["commit-tree", tree, "-p", before, "-p", head, "-m", message], repo)
    elif args.strategy == "squash":
        commit = git(["commit-tree", tree, "-p", before, "-m", _squashed(repo, ref, before)], repo)
    else:
        replayed = _rebased(repo, before, head)
        if isinstance(replayed, list):
            return _conflicts(base, replayed)
        commit = replayed
    result = msgspec.structs.replace(base, commit=commit.strip(), files=files, files_count=count)
    return Plan(target=target, result=result, checkout=checkout, message=message)


def _conflicts(base: MergeResult, paths: list[str]) -> MergeResult:
    listed, count = _listed(paths)
    return msgspec.structs.replace(base, conflicts=listed, conflicts_count=count)


def _checked_out_branch(repo: str) -> str:
    code, out = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], repo, ok=(0, 1))
    if code != 0 or not out.strip():
        raise InvalidArgument(
            f"merge: into: {repo} has no branch checked out (a detached HEAD): name one with into"
        )
    return out.strip()


def _head(repo: str, branch: str, field: str) -> str:
    head = head_of(repo, branch)
    if head is None:
        raise InvalidArgument(f"merge: {field}: no branch {branch[:80]!r} in {repo}")
    return head


def _checkout_of(repo: str, branch: str) -> str | None:
    """The worktree (the repository's own directory included) that has ``branch`` out."""
    path = None
    for line in git(["worktree", "list", "--porcelain"], repo).splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree ") :]
        elif line == f"branch refs/heads/{branch}":
            return path
    return None


def _changed(repo: str, before: str, after: str) -> tuple[tuple[str, ...], int]:
    return _listed(_paths(repo, before, after))


def _paths(repo: str, before: str, after: str) -> list[str]:
    out = git(["diff", "--name-only", "-z", "--no-renames", before, after, "--"], repo)
    return [p for p in out.split("\0") if p]


def _listed(paths: list[str]) -> tuple[tuple[str, ...], int]:
    unique = sorted(set(paths))
    return tuple(shown(p) for p in unique[:WORKTREE_FILES_LISTED]), len(unique)


def _squashed(repo: str, ref: WorktreeRef, before: str) -> str:
    subjects = git(["log", "--format=%s", f"{before}..{ref.branch}", "--"], repo).splitlines()
    more = len(subjects) - _SUBJECTS
    lines = [f"- {s}" for s in subjects[:_SUBJECTS]] + ([f"- and {more} more"] if more > 0 else [])
    head = f"{ref.agent}: {ref.branch} squashed ({len(subjects)} commit(s); shepherd merge)"
    return head + "\n\n" + "\n".join(lines)


def _rebased(repo: str, before: str, head: str) -> str | list[str]:
    """The branch's commits replayed on ``before``: the last commit, or the conflicting paths."""
    if git(["rev-list", "--merges", f"{before}..{head}"], repo).split():
        raise InvalidArgument("merge: strategy: rebase replays no merge commit; use merge")
    commits = git(["rev-list", "--reverse", f"{before}..{head}"], repo).split()
    with tempfile.TemporaryDirectory(prefix="shepherd-rebase-") as scratch:
        place = os.path.join(scratch, "tree")
        git(["worktree", "add", "--detach", "--quiet", place, before], repo)
        try:
            for commit in commits:
                pick = ["cherry-pick", "--allow-empty", "--keep-redundant-commits", commit]
                if run_git(pick, place)[0] != 0:
                    conflicted = git(["diff", "--name-only", "-z", "--diff-filter=U"], place)
                    run_git(["cherry-pick", "--abort"], place)
                    return [p for p in conflicted.split("\0") if p] or [commit]
            return git(["rev-parse", "HEAD"], place).strip()
        finally:
            run_git(["worktree", "remove", "--force", place], repo)
