"""``merge`` at the session's edge (:mod:`protocol.session.merges`' rules): the broker names
the agent's branch and the other live agents' worktrees
(:func:`protocol.session.worktrees.merge_target`); the session's git thread checks and commits
(:func:`actors.session.git_merge.plan`); the merge is journaled ``planned``; git moves
``into`` (:func:`~actors.session.git_merge.move`); it is journaled ``done`` and told; and each
other agent whose worktree changed paths the merge changed is sent the parent's message naming
them (a closed agent is passed over). Crash points: ``merge.planned`` (journaled, not moved)
and ``merge.moved`` (moved, not journaled done)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import pykka

from actors.runtime.crashpoints import crashpoint
from actors.session.git_merge import Plan
from actors.session.worktrees import GitWorker
from protocol.calls import api
from protocol.calls.api_worktrees import MergeArgs, MergeResult, QueuedMerge
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.records.journal import MergeRecord
from protocol.records.worktrees import MergeTarget, Overlap

__all__ = ["Edge", "merge", "told"]


@dataclass(frozen=True)
class Edge:
    """What a merge uses of the session: its git thread; its broker, which journals (and
    tells) a merge's record, answering once it is durable; ``run``, an operation of the
    parent's; its clock; how long to wait for git."""

    git: GitWorker
    broker: pykka.ActorRef[Any]
    run: Callable[[api.MessageArgs], Any]
    now: Callable[[], float]
    timeout_s: float


def merge(
    args: MergeArgs, ask: Callable[[MergeArgs], tuple[MergeTarget, ...]], edge: Edge
) -> MergeResult:
    """``ask``: the broker's answer to ``args``. With ``queue``, one merge after another,
    until a conflict."""

    def one(target: MergeTarget) -> MergeResult:
        asked = msgspec.structs.replace(args, agent=target.ref.agent, queue=False)
        return _merge(asked, target, edge)

    targets = ask(args)
    if not args.queue:
        return one(targets[0])
    if not targets:
        raise InvalidArgument("merge: queue: no agent with a worktree has a completed last task")
    steps: list[QueuedMerge] = []
    for target in targets:
        result = one(target)
        steps.append(
            QueuedMerge(
                agent=result.agent,
                merged=result.merged,
                commit=result.commit,
                up_to_date=result.up_to_date,
                conflicts=result.conflicts,
                conflicts_count=result.conflicts_count,
            )
        )
        if result.conflicts_count:
            break  # the rest would merge onto what the parent has to settle first
    return msgspec.structs.replace(result, queue=tuple(steps))


def _merge(args: MergeArgs, target: MergeTarget, edge: Edge) -> MergeResult:
    git, run, now, timeout_s = edge.git, edge.run, edge.now, edge.timeout_s

    def record(merge: MergeRecord) -> None:
        edge.broker.ask(merge, timeout=timeout_s)

    step = git.plan_merge(target, args).result(timeout=timeout_s)
    if not isinstance(step, Plan):
        return step  # type: ignore[no-any-return]  # conflicts, a check, up to date
    planned = _record(target, step.result, now())
    record(planned)
    crashpoint("merge.planned")
    try:
        result: MergeResult = git.move(step, args.rebase_siblings).result(timeout=timeout_s)
    except BaseException:
        with contextlib.suppress(Exception):  # not moved: the journal says so
            record(msgspec.structs.replace(planned, state="abandoned", at=now()))
        raise
    crashpoint("merge.moved")
    done = {"overlaps": result.overlaps, "files_count": result.files_count}
    record(msgspec.structs.replace(planned, state="done", at=now(), **done))
    for overlap in result.overlaps:
        with contextlib.suppress(ShepherdError):  # closed meanwhile: nothing to tell
            run(api.MessageArgs(target=overlap.agent, message=told(result, overlap)))
    return result


def _record(target: MergeTarget, result: MergeResult, at: float) -> MergeRecord:
    assert result.commit is not None
    return MergeRecord(
        agent_id=target.ref.agent_id,
        agent=result.agent,
        repo=target.ref.repo,
        branch=result.branch,
        into=result.into,
        strategy=result.strategy,
        before=result.before,
        commit=result.commit,
        state="planned",
        at=at,
    )


def told(result: MergeResult, overlap: Overlap) -> str:
    """The message to an agent whose worktree changed paths the merge changed."""
    more = overlap.count - len(overlap.files)
    paths = ", ".join(overlap.files) + (f" and {more} more" if more > 0 else "")
    said = (
        f"[shepherd] {result.agent}'s branch was merged into {result.into} "
        f"({(result.commit or '')[:12]}): it changed {overlap.count} path(s) your worktree "
        f"changed too: {paths}."
    )
    if overlap.agent in result.rebased:
        return f"{said} Your branch was rebased onto it: look at those paths again."
    if overlap.agent in result.not_rebased:
        why = "it has uncommitted changes, or the rebase conflicted and was undone"
        return f"{said} Your branch was not rebased onto it ({why}): bring {result.into} in."
    return f"{said} Bring {result.into} into your branch before you go on."
