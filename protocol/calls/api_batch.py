"""The batch operations' Structs (``delegate_many``, ``spawn_many``): many of one operation in
one call, one broker message and one journal write; each item is checked like the single
operation and refused on its own (see :mod:`protocol.session.batch`). Beside
:mod:`protocol.calls.api`, whose Structs the items are."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from protocol.calls.api import Arguments, DelegateArgs, SpawnArgs, SpawnOptions
from protocol.core.limits import (
    MAX_BATCH,
    BudgetCost,
    BudgetMinutes,
    BudgetTokens,
    BudgetTurns,
    DeadlineMinutes,
    Handle,
    Priority,
    Text,
    TimeoutFrom,
    VerifyAttempts,
    VerifyCommand,
    VerifyTimeout,
)

__all__ = [
    "DelegateItem",
    "DelegateManyArgs",
    "DelegateManyResult",
    "ItemError",
    "SpawnManyArgs",
    "SpawnManyResult",
]


class DelegateItem(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One task of a ``delegate_many``: the fields of ``delegate``; each optional one left out
    is the call's (:meth:`DelegateManyArgs.single`)."""

    target: Handle  # agent id or name
    task: Text
    #: left out: the call's ``timeout_minutes`` (else the session's default). Not ``None``:
    #: JSON clients send NaN and infinities as null, which must be refused, never read as
    #: "no deadline"
    timeout_minutes: DeadlineMinutes | msgspec.UnsetType = msgspec.UNSET
    #: delegate's budgets of this task (left out: the call's; see ``DelegateArgs``)
    max_turns: BudgetTurns | msgspec.UnsetType = msgspec.UNSET
    max_tokens: BudgetTokens | msgspec.UnsetType = msgspec.UNSET
    max_cost: BudgetCost | msgspec.UnsetType = msgspec.UNSET
    max_minutes: BudgetMinutes | msgspec.UnsetType = msgspec.UNSET
    #: delegate's acceptance check of this task (left out: the call's)
    verify: VerifyCommand | msgspec.UnsetType = msgspec.UNSET
    verify_attempts: VerifyAttempts | msgspec.UnsetType = msgspec.UNSET
    verify_timeout_s: VerifyTimeout | msgspec.UnsetType = msgspec.UNSET
    #: delegate's queue priority and deadline start of this task (left out: the call's)
    priority: Priority | msgspec.UnsetType = msgspec.UNSET
    timeout_from: TimeoutFrom | msgspec.UnsetType = msgspec.UNSET


class ItemError(msgspec.Struct, frozen=True, kw_only=True):
    """An item a batch refused: its place in the call, and why (the rest went ahead)."""

    index: int
    code: str
    message: str


class DelegateManyResult(msgspec.Struct, frozen=True, kw_only=True):
    #: per item, in the call's order: its task id, or None where it was refused (``errors``)
    task_ids: tuple[str | None, ...]
    errors: tuple[ItemError, ...] = ()
    #: ``watch``: the one watcher of every accepted task (None when none was accepted)
    watcher_id: str | None = None


class DelegateManyArgs(
    Arguments[DelegateManyResult], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    items: Annotated[tuple[DelegateItem, ...], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]
    #: the deadline of every item that gives none (None: the session's default)
    timeout_minutes: DeadlineMinutes | None = None
    #: the budgets of every item that gives none (None: no limit of that kind; the session's
    #: budget still caps tokens and cost)
    max_turns: BudgetTurns | None = None
    max_tokens: BudgetTokens | None = None
    max_cost: BudgetCost | None = None
    max_minutes: BudgetMinutes | None = None
    #: the acceptance check of every item that gives none (None: each agent's own)
    verify: VerifyCommand | None = None
    verify_attempts: VerifyAttempts | None = None
    verify_timeout_s: VerifyTimeout | None = None
    #: the queue priority and deadline start of every item that gives none
    priority: Priority | None = None
    timeout_from: TimeoutFrom | None = None
    #: also register one watcher of every accepted task (in the same journal write)
    watch: bool = False

    def single(self, item: DelegateItem) -> DelegateArgs:
        """The ``delegate`` of ``item``: each field of delegate the item left out is the
        call's (a field of delegate that is neither's fails here: they must not drift)."""
        fields: dict[str, Any] = {"target": item.target, "task": item.task}
        for name in DelegateArgs.__struct_fields__:
            if name not in fields:
                mine = getattr(item, name)
                fields[name] = getattr(self, name) if mine is msgspec.UNSET else mine
        return DelegateArgs(**fields)


class SpawnManyResult(msgspec.Struct, frozen=True, kw_only=True):
    #: per name, in the call's order: the new agent's id, or None where it was refused
    agent_ids: tuple[str | None, ...]
    errors: tuple[ItemError, ...] = ()


class SpawnManyArgs(
    Arguments[SpawnManyResult], SpawnOptions, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """Several agents of one kind: each name is a ``spawn`` with the same options, every
    option of ``spawn`` (:class:`SpawnOptions`). A worktree is each agent's own (its default
    branch is named after the agent), so a ``branch`` is refused for more than one name
    (:func:`protocol.session.batch.check_spawn_many`)."""

    names: Annotated[tuple[Handle, ...], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]

    def one(self, name: str) -> SpawnArgs:
        """The spawn of ``name`` with this call's options."""
        fields = msgspec.structs.asdict(self)
        del fields["names"]
        return SpawnArgs(name=name, **fields)
