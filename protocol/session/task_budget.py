"""One task's budget as its actor keeps it: what it spent, its limits, and its soft warnings.

A task with a budget (:class:`~protocol.records.usage.Budget`) is told what it spent by the
session (``Spent``, the running total: :mod:`protocol.session.budgets`), and its own timer
goes off at its deadline, at the end of its minutes, and at their soft share. Its ends are
rule 5 of :mod:`protocol.session.task`; this module adds what its actor decides beside them,
and how the actor's two inputs (a message routed to it, its timer) meet the rules, so that
the actor and a test drive a task the same way:

1. **The soft share warns once, decided by the task.** When what the task spent reaches the
   soft share (``budget_soft_fraction``, 80% by default) of one of its counted limits (turns,
   tokens, cost), or its minutes run past that share of ``max_minutes`` (counted from its
   start), it reports ``Warned`` with the limits newly passed, and never warns of them
   again. Past a limit it gives no warning: it ends (rule 5 of the task's rules). A task
   settled gives none.
2. **What was told survives a restart.** The limits warned of are the task's :class:`Soft`
   state; after a restart its actor starts from those the record of delivery shows told
   (:attr:`Restore.warned <protocol.session.restore.Restore.warned>`), and is told what it
   spent again: a share passed and never told (the parent died in between) is told then,
   once.
3. **One timer.** The actor's timer is armed for :func:`alarm`: the earliest of the task's
   own deadline (:func:`protocol.session.task.deadline`), the soft share of its minutes not
   yet warned of, and, while it waits, the point where its wait is stale
   (:func:`protocol.session.task_stale.due_at`). When it goes off (:func:`rang`), an end that
   had come is the task's rule 5; else the soft share is warned of; else its actor asks
   :func:`protocol.session.task_stale.rang` whether its wait is stale.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.records.notifications import Notice
from protocol.records.tasks import TaskRecord, TaskState
from protocol.records.usage import UNITS, Usage, amount, over, spent
from protocol.session import task as rules
from protocol.session import task_stale
from protocol.session.task_stale import Stale, StaleFound

__all__ = ["SOFT_CODE", "Soft", "Warned", "alarm", "notices", "rang", "soft_for", "told"]

#: the parent's notice of a soft share passed
SOFT_CODE = "budget_soft_limit"


class Soft(msgspec.Struct, frozen=True, gc=False):
    """A task's soft warnings: the share of a limit that warns (``fraction``), and the limits
    already warned of (rule 1)."""

    fraction: float
    told: frozenset[str] = frozenset()


class Warned(msgspec.Struct, frozen=True, kw_only=True):
    """The task passed the soft share of ``limits`` (rule 1): ``usage`` as it was told, ``at``
    the instant it decided."""

    record: TaskRecord
    limits: tuple[str, ...]
    usage: Usage
    at: float
    then: Any = None


#: what a task's actor reports of a message or of its timer
AnyReport = rules.Report | Warned | StaleFound


def soft_for(
    record: TaskRecord, fraction: float, told: frozenset[str] = frozenset()
) -> Soft | None:
    """The soft state a new task's actor starts with: None for a task without a budget."""
    if record.budget is None or record.budget.empty:
        return None
    return Soft(fraction=fraction, told=told)


def _minutes_soft(record: TaskRecord, soft: Soft | None) -> float | None:
    """When the soft share of the task's minutes passes, if it is still to be warned of."""
    if soft is None or "max_minutes" in soft.told or record.terminal:
        return None
    begun = rules.minutes_begun(record)
    if begun is None:
        return None
    assert record.budget is not None
    assert record.budget.max_minutes is not None
    return begun + record.budget.max_minutes * 60.0 * soft.fraction


def alarm(record: TaskRecord, soft: Soft | None, stale: Stale | None = None) -> float | None:
    """When the task's actor's timer goes off (rule 3), or None: no timer. Its stale point
    too, while it waits (:func:`protocol.session.task_stale.due_at`)."""
    ends = rules.deadline(record)
    if soft is not None:  # a budget: the soft share of its minutes too
        ends = _earliest(ends, _minutes_soft(record, soft))
    if stale is not None and record.state is TaskState.WAITING:
        ends = _earliest(ends, task_stale.due_at(record, stale))
    return ends


def _earliest(one: float | None, other: float | None) -> float | None:
    if one is None or other is None:
        return other if one is None else one
    return min(one, other)


def told(
    record: TaskRecord, soft: Soft | None, message: rules.TaskMessage
) -> tuple[TaskRecord, Soft | None, AnyReport | None]:
    """A message routed to the task: its rules decide (:func:`protocol.session.task.receive`);
    what it spent, when it did not end the task, may warn (rule 1)."""
    record, report = rules.receive(record, message)
    if soft is None or type(message) is not rules.Spent or record.terminal:
        return record, soft, report  # no budget (most tasks), or nothing it spent
    if report is not None and type(report) is not rules.Noted:
        return record, soft, report
    assert record.budget is not None
    passed = over(message.usage, record.budget, soft.fraction)
    soft, warned = _warn(record, soft, passed, message.usage, message.at)
    if warned is None:
        return record, soft, report
    then = report.then if report is not None else None
    return record, soft, msgspec.structs.replace(warned, then=then)


def rang(
    record: TaskRecord, soft: Soft | None, armed: float, at: float, usage: Usage | None
) -> tuple[TaskRecord, Soft | None, AnyReport | None]:
    """The actor's timer, armed for ``armed`` (what :func:`alarm` said), went off at ``at``;
    ``usage``: what the task spent, as its actor was last told (rule 3)."""
    ends = rules.deadline(record)
    if ends is not None and armed >= ends:
        record, report = rules.receive(record, rules.Due(due=armed, at=at, usage=usage))
        return record, soft, report
    soft_at = _minutes_soft(record, soft)
    if soft is None or soft_at is None or armed < soft_at:
        return record, soft, None  # armed for a point since moved: nothing came
    soft, warned = _warn(record, soft, ["max_minutes"], usage or Usage(), at)
    return record, soft, warned


def _warn(
    record: TaskRecord, soft: Soft, passed: list[str], usage: Usage, at: float
) -> tuple[Soft, Warned | None]:
    new = tuple(limit for limit in passed if limit not in soft.told)
    if not new or rules.overspent(record, usage) is not None:
        return soft, None
    soft = msgspec.structs.replace(soft, told=soft.told | set(new))
    return soft, Warned(record=record, limits=new, usage=usage, at=at)


def notices(warned: Warned) -> list[Notice]:
    """What the parent is told of a ``Warned``: one notice per limit (``refs`` names the
    limit: a restarted parent reads it back from the record of delivery, rule 2)."""
    record, budget = warned.record, warned.record.budget
    assert budget is not None
    told: list[Notice] = []
    for limit in warned.limits:
        bound = getattr(budget, limit)
        if limit == "max_minutes":
            text = (
                f"task {record.task_id} ({record.agent_name}) has run "
                f"{(warned.at - record.created_at) / 60.0:.1f} of its {bound:g} minutes "
                "(max_minutes); past them it ends as failed"
            )
        else:
            text = (
                f"task {record.task_id} ({record.agent_name}) has used "
                f"{amount(limit, spent(warned.usage, limit))} of its {amount(limit, bound)} "
                f"{UNITS[limit]} ({limit}); past {amount(limit, bound)} it ends as failed"
            )
        told.append(
            Notice(
                created_at=warned.at,
                code=SOFT_CODE,
                text=text,
                agent_id=record.agent_id,
                task_id=record.task_id,
                refs=(limit,),
            )
        )
    return told
