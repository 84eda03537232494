"""The parent's operations, the timers and what the session's helpers report, each mapped to
its rule.

An operation is its ``protocol.calls.api`` Args Struct; the rules answer with an ``Answer`` effect
(the operation's Result Struct) or, for ``read``, an ``AnswerFromOutput`` (the agent's actor
holds its output). ``status`` is a pure view (:mod:`protocol.session.status`), answered by the
caller, which knows how its transport wakes the parent's inbox.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.calls import api, api_batch, api_worktrees
from protocol.calls.approvals import ApproveArgs, DenyArgs
from protocol.core.errors import InvalidArgument
from protocol.records.checks import CheckDone
from protocol.records.journal import MergeRecord
from protocol.records.tasks import TaskEvent
from protocol.records.worktrees import WorktreeProbed, WorktreeReleased
from protocol.session import (
    admission,
    agents,
    approvals,
    batch,
    budgets,
    checks,
    merges,
    providers,
    requests,
    routing,
    settlement,
    watchers,
    worktree_events,
    worktrees,
)
from protocol.session.effects import (
    Answer,
    AnswerFromOutput,
    CooldownDue,
    Effect,
    PaceDue,
    RequestTimeout,
    RetryDue,
    SessionTimer,
)
from protocol.session.state import Ctx, SessionState

__all__ = ["EVENTS", "call", "fire"]

#: what the session's helpers report (git, checks, nodes, the edge's merges) -> its rule
EVENTS: dict[type, Callable[[SessionState, Any, Ctx], list[Effect]]] = {
    WorktreeProbed: worktree_events.probed,
    CheckDone: checks.checked,
    WorktreeReleased: worktrees.released,
    admission.NodeCap: admission.node_cap,
    MergeRecord: merges.merged,
}


def call(s: SessionState, args: Any, cx: Ctx) -> list[Effect]:
    match args:
        case api.SpawnArgs():
            return batch.spawn_one(s, args, cx)
        case api.DelegateArgs():
            return budgets.delegate(s, args, cx)
        case api_batch.DelegateManyArgs():
            return batch.delegate_many(s, args, cx)
        case api_batch.SpawnManyArgs() | batch.SpawnEach():
            return batch.spawn_many(s, args, cx)
        case api.MessageArgs():
            return routing.parent_message(s, args, cx)
        case api.WatchArgs():
            return watchers.watch(s, args.ids, cx)
        case api.PromptArgs():
            return budgets.prompt(s, args, cx)
        case api.CloseArgs():
            return agents.close(s, args.agent, cx)
        case api.CancelArgs():
            return settlement.parent_settles(s, args.task_id, TaskEvent.CANCEL, args.reason, cx)
        case api.FailArgs():
            return settlement.parent_settles(s, args.task_id, TaskEvent.FAIL, args.error, cx)
        case api.ReadArgs():
            row = s.agent(args.agent)
            return [AnswerFromOutput(agent_id=row.agent_id, lines=args.lines, before=args.before)]
        case api.ResultArgs():
            return [Answer(value=s.result_of(args.task_id))]
        case api_worktrees.WorktreesArgs():
            return [Answer(value=worktrees.listing(s, args.cursor))]
        case api_worktrees.MergeArgs():  # the session's part: the branch; git merges it
            return [Answer(value=worktrees.merge_targets(s, args))]
        case ApproveArgs() | DenyArgs():
            return approvals.answer(s, args, cx)
        case _:
            raise InvalidArgument(f"unknown operation {type(args).__name__}")


def fire(s: SessionState, event: SessionTimer, cx: Ctx) -> list[Effect]:
    """A session timer fired (a watcher's ``Flush`` is its own actor's)."""
    match event:
        case RequestTimeout():
            return requests.timeout(s, event, cx)
        case CooldownDue():
            return providers.cooled(s, event, cx)
        case RetryDue():
            return providers.retry(s, event, cx)
        case PaceDue():
            return providers.paced(s, event, cx)
