"""Batch operations: many of one operation in one call, each item under the single one's rules.

Rules:

1. **Each item is the single operation.** A name of ``spawn_many`` is a ``spawn`` with the
   call's options (:mod:`protocol.session.agents`: a name is unique, ...); an item of
   ``delegate_many`` is a ``delegate`` (:mod:`protocol.session.tasks`: one active task per
   agent, the text fits its envelope, ...). An item those rules refuse is reported in the
   answer (its index, its error's code and message) and changes nothing; the others go ahead.
   Two items for one agent: the second finds the agent busy. What the Args Struct refuses (a
   NaN deadline, an empty text, more than ``MAX_BATCH`` items) refuses the whole call: nothing
   is done.
2. **Journaled together, before anyone hears.** Every record of the batch (its tasks, and the
   watcher ``watch`` asks for) comes first among the effects, one run of ``Journal`` effects
   that the broker writes at once (one fsync); then each item's other effects, in item order.
3. **One watcher for the batch** (``watch``): of every accepted task, in item order, journaled
   with them (:mod:`protocol.session.watchers`, the same exactly-once rules as ``watch``).
4. **The answer fits one envelope.** It is one id or one error per item; an error's message is
   cut to :data:`ERROR_CHARS`. A batch whose largest possible answer would not fit the
   session's envelope is refused at once (``limit_exceeded``), before anything is done.
"""

from __future__ import annotations

import msgspec

from protocol.calls import api, api_batch
from protocol.calls.answers import encoded_size
from protocol.core.errors import InvalidArgument, LimitExceeded, ShepherdError
from protocol.core.ids import IdKind, make_id
from protocol.core.limits import answer_budget, preview
from protocol.records import sandbox
from protocol.session import agents, approvals, budgets, checks, claims, watchers
from protocol.session.effects import Answer, Effect, Journal
from protocol.session.state import Ctx, SessionState

__all__ = [
    "ERROR_CHARS",
    "SpawnEach",
    "check_spawn_many",
    "delegate_many",
    "first_spawn",
    "item_error",
    "largest_answer",
    "spawn_many",
    "spawn_one",
]

#: an item's error message in a batch's answer is cut to this many characters
ERROR_CHARS = 300


def largest_answer(count: int, kind: IdKind = IdKind.TASK) -> api_batch.DelegateManyResult:
    """The largest answer a batch of ``count`` items can have (rule 4): each item with the
    longest id there can be AND refused with the longest message, and a watcher."""
    longest_id = make_id(kind, "f" * 64)
    message = preview("x" * (ERROR_CHARS + 1_000_000), ERROR_CHARS) or ""
    error = api_batch.ItemError(index=count, code="x" * 32, message=message)
    return api_batch.DelegateManyResult(
        task_ids=(longest_id,) * count, errors=(error,) * count, watcher_id=longest_id
    )


def _check_fits(s: SessionState, what: str, count: int, kind: IdKind) -> None:
    """Rule 4, before anything is done."""
    budget = answer_budget(s.settings.max_envelope_bytes)
    if (size := encoded_size(largest_answer(count, kind))) > budget:
        raise LimitExceeded(
            f"{what}: the answer to {count} items may take {size} bytes, over "
            f"the {budget} bytes one answer may take (max_envelope_bytes less the envelope's "
            "header): send fewer items per call"
        )


def item_error(index: int, exc: ShepherdError) -> api_batch.ItemError:
    """How an answer tells of item ``index`` refused by ``exc`` (its message cut, rule 4)."""
    message = preview(exc.message, ERROR_CHARS) or ""
    return api_batch.ItemError(index=index, code=exc.code, message=message)


class SpawnEach(msgspec.Struct, frozen=True, kw_only=True):
    """A ``spawn_many`` whose names the session's edge made ready one by one (each its own
    worktree, its own node): each item a ``spawn``, with the call's options."""

    items: tuple[api.SpawnArgs, ...]


def check_spawn_many(args: api_batch.SpawnManyArgs) -> None:
    """What refuses a whole ``spawn_many`` beyond its Struct: one ``branch`` cannot be every
    name's (a branch is checked out in one worktree only, and each agent has its own)."""
    if args.worktree and args.branch is not None and len(args.names) > 1:
        raise InvalidArgument(
            f"spawn_many: branch: {len(args.names)} agents cannot share the branch "
            f"{args.branch!r} (each worktree needs its own branch); leave branch out (each "
            "gets shepherd/<session>/<name>) or spawn them one at a time"
        )


def spawn_one(s: SessionState, args: api.SpawnArgs, cx: Ctx) -> list[Effect]:
    """One ``spawn``'s rules: an agent's own (:func:`protocol.session.agents.spawn`) and its
    approval rules' (:func:`protocol.session.approvals.check_spawn`); each name of a
    ``spawn_many`` follows them too."""
    approvals.check_spawn(args)
    checks.check_options(args.verify, args.node, "spawn: verify")
    claims.check_spawn(args)
    sandbox.check_spawn(args)
    return agents.spawn(s, args, cx)


def spawn_many(s: SessionState, args: api_batch.SpawnManyArgs | SpawnEach, cx: Ctx) -> list[Effect]:
    """Each name is a ``spawn`` with the call's options (rules 1, 2, 4); the options were
    checked once by the caller (they name files and programs: the same for every name)."""
    if isinstance(args, api_batch.SpawnManyArgs):
        check_spawn_many(args)
        items = tuple(args.one(name) for name in args.names)
    else:
        items = args.items
    _check_fits(s, "spawn_many", len(items), IdKind.AGENT)
    journal: list[Effect] = []
    rest: list[Effect] = []
    agent_ids: list[str | None] = []
    errors: list[api_batch.ItemError] = []
    for index, one in enumerate(items):
        try:
            effects = spawn_one(s, one, cx)
        except ShepherdError as exc:  # refused before anything changed (rule 1)
            errors.append(item_error(index, exc))
            agent_ids.append(None)
            continue
        for effect in effects:
            if isinstance(effect, Answer):
                agent_ids.append(effect.value.agent_id)
            else:
                (journal if isinstance(effect, Journal) else rest).append(effect)
    answer = api_batch.SpawnManyResult(agent_ids=tuple(agent_ids), errors=tuple(errors))
    return [*journal, *rest, Answer(value=answer)]


def delegate_many(s: SessionState, args: api_batch.DelegateManyArgs, cx: Ctx) -> list[Effect]:
    _check_fits(s, "delegate_many", len(args.items), IdKind.TASK)
    journal: list[Effect] = []
    rest: list[Effect] = []
    task_ids: list[str | None] = []
    errors: list[api_batch.ItemError] = []
    for index, item in enumerate(args.items):
        try:
            # each item is a delegate: its budget within the session's, its timers, its answer
            effects = budgets.delegate(s, args.single(item), cx)
        except ShepherdError as exc:  # refused before anything changed (rule 1)
            errors.append(item_error(index, exc))
            task_ids.append(None)
            continue
        for effect in effects:
            if isinstance(effect, Answer):
                task_ids.append(effect.value.task_id)
            else:
                (journal if isinstance(effect, Journal) else rest).append(effect)
    watcher_id = None
    accepted = tuple(t for t in task_ids if t is not None)
    if args.watch and accepted:
        for effect in watchers.watch(s, accepted, cx):
            if isinstance(effect, Answer):
                watcher_id = effect.value.watcher_id
            else:
                (journal if isinstance(effect, Journal) else rest).append(effect)
    answer = api_batch.DelegateManyResult(
        task_ids=tuple(task_ids), errors=tuple(errors), watcher_id=watcher_id
    )
    return [*journal, *rest, Answer(value=answer)]


def first_spawn(args: object) -> api.SpawnArgs | None:
    """The (first) spawn a call asks for, if it is one: a spawn's options are the same for
    every name of a batch, so the edge checks them once, on this one."""
    if isinstance(args, api.SpawnArgs):
        return args
    if isinstance(args, api_batch.SpawnManyArgs):
        return args.one(args.names[0])
    if isinstance(args, SpawnEach) and args.items:
        return args.items[0]
    return None
