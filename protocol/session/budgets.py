"""Budgets: what a task and the session may spend, what they spent, and what happens at the
limits.

A task's limits (:class:`~protocol.records.usage.Budget`: turns, tokens, cost, minutes) come with
``delegate``; the session's (tokens, cost) are settings (``budget_tokens``, ``budget_cost``).
Usage comes from the agents: a turn that starts (every adapter), and ``usage`` runtime events
(tokens and cost: Pi's assistant messages, or ``shepherd-child usage`` from a command agent's
shell).

Rules:

1. **A task's budget never exceeds what the session has left.** At ``delegate``, a task's
   ``max_tokens`` / ``max_cost`` is lowered to the session's remainder (and a task that gave
   none gets the remainder): the answer says which limits were lowered (``clamped``). A session
   with nothing left of a budget refuses the delegation (``limit_exceeded``, naming what is
   left). Children cannot delegate in this system, so there is no child's remainder to apply.
2. **Counted once, journaled first.** Each report is journaled (a ``usage`` record) before
   anything is told of it, and added to the agent's, its active task's (a turn only if it
   began after the task was delegated) and the session's usage. A restart folds the records
   back (:func:`replay`).
3. **The soft limit warns once.** When a task's usage reaches the soft share
   (``budget_soft_fraction``, 80% by default) of one of its limits, the parent gets one
   ``budget_soft_limit`` notice for that task and limit, and never another (after a restart,
   the record of delivery says which were told). A task's warnings are its actor's to decide,
   as its limits are (:mod:`protocol.session.task_budget`), and its minutes' share is its
   own timer; the session warns of its own budget.
4. **The hard limit ends the task.** Usage over a limit (or ``max_minutes`` passed) settles the
   task ``failed`` with ``reason="budget_exceeded"``, through the same settlement as a cancel
   (the agent gets ``control cancel_task``, its turn stops), and the parent is told once it
   has settled so. A task's own limits are its actor's to decide
   (:mod:`protocol.session.task`, rule 5): the session tells it each new total it spent
   (``Spent``), and ``max_minutes`` is its own timer. Usage over the session's budget ends
   every open task, routed
   as a fail. The first terminal event wins: a task ended by its budget is never also
   completed, and a ``done`` after it gets the stored result.
5. The settled result carries the task's usage (completion notifications show it).
"""

from __future__ import annotations

import msgspec

from protocol.calls import api
from protocol.core.errors import LimitExceeded
from protocol.records.journal import UsageRecord
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskEvent, TaskRecord
from protocol.records.usage import (
    BUDGET_EXCEEDED,
    UNITS,
    Budget,
    Usage,
    amount,
    exceeded,
    over,
    spent,
)
from protocol.records.usage import left as usage_left
from protocol.session import outbox, settlement, tasks
from protocol.session.effects import (
    Answer,
    Effect,
    Journal,
    Notify,
    Story,
    TellTask,
)
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.session.task import Spent, decides_alone, overspent
from protocol.session.task_budget import SOFT_CODE
from protocol.wire.envelopes import RuntimeEnvelope

__all__ = [
    "BUDGET_EXCEEDED",
    "SESSION_SCOPE",
    "delegate",
    "grant",
    "prompt",
    "replay",
    "reported",
    "restored",
    "resume",
    "session_budget",
]

#: the scope of the session's own budget in :attr:`SessionState.budget_warned`
SESSION_SCOPE = "session"


def session_budget(s: SessionState) -> Budget:
    return Budget(max_tokens=s.settings.budget_tokens, max_cost=s.settings.budget_cost)


# ------------------------------------------------------------------ granting (rule 1)


def grant(s: SessionState, asked: Budget) -> tuple[Budget | None, tuple[str, ...]]:
    """The budget a new task gets, and the limits lowered to the session's remainder."""
    if s.settings.budget_tokens is None and s.settings.budget_cost is None:
        return (None if asked.empty else asked), ()  # no session budget: nothing to lower
    session = session_budget(s)
    granted: dict[str, float | None] = {f: getattr(asked, f) for f in asked.__struct_fields__}
    clamped: list[str] = []
    for limit in ("max_tokens", "max_cost"):
        bound = getattr(session, limit)
        if bound is None:
            continue
        left = usage_left(limit, bound, spent(s.session_usage, limit))
        nothing_left = left < 1 if limit == "max_tokens" else left <= 0  # whole tokens only
        if nothing_left:
            raise LimitExceeded(
                f"the session's budget is spent: {amount(limit, spent(s.session_usage, limit))}"
                f" of {amount(limit, bound)} {UNITS[limit]} used, 0 left ({limit})"
            )
        if limit == "max_tokens":
            left = int(left)
        mine = granted[limit]
        if mine is None or mine > left:
            if mine is not None:
                clamped.append(limit)
            granted[limit] = left
    budget = Budget(**granted)  # type: ignore[arg-type]  # the fields of Budget, bounded above
    return (None if budget.empty else budget), tuple(clamped)


def delegate(s: SessionState, args: api.DelegateArgs, cx: Ctx) -> list[Effect]:
    asked = Budget(
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        max_cost=args.max_cost,
        max_minutes=args.max_minutes,
    )
    budget, clamped = grant(s, asked)
    effects = tasks.delegate(s, args, cx, budget=budget)
    return _with_budget(s, effects, budget, clamped, cx)


def prompt(s: SessionState, args: api.PromptArgs, cx: Ctx) -> list[Effect]:
    """The compatibility prompt takes no limits, but the session's budget still caps it."""
    budget, clamped = grant(s, Budget())
    effects = tasks.prompt(s, args, cx, budget=budget)
    return _with_budget(s, effects, budget, clamped, cx)


def _with_budget(
    s: SessionState,
    effects: list[Effect],
    budget: Budget | None,
    clamped: tuple[str, ...],
    cx: Ctx,
) -> list[Effect]:
    *before, last = effects
    assert isinstance(last, Answer)
    value = last.value
    if isinstance(value, api.DelegateResult):
        value = msgspec.structs.replace(value, budget=budget, clamped=clamped)
    return [*before, Answer(value=value)]


def _fraction(s: SessionState) -> float:
    return s.settings.budget_soft_fraction


# ------------------------------------------------------------------ counting (rules 2-4)


def reported(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """A runtime event that counts: a turn's start, or a ``usage`` report (receipted when it
    came with a one-shot inbox: ``shepherd-child usage``)."""
    if env.event == "turn_start":
        task_id = row.active_task
        record = s.tasks.get(task_id) if task_id is not None else None
        if record is not None and env.created_at < record.created_at:
            task_id = None  # the turn began before the task existed: it is not the task's
        return _count(s, row, task_id, Usage(turns=1), cx)
    delta = Usage(tokens=env.tokens or 0, cost=env.cost or 0.0)
    effects = _count(s, row, row.active_task, delta, cx)
    if env.reply_inbox is not None:
        effects += outbox.ack(s, cx, env)
    return effects


def _count(
    s: SessionState, row: AgentRow, task_id: str | None, delta: Usage, cx: Ctx
) -> list[Effect]:
    if delta == Usage():
        return []
    record = s.tasks.get(task_id) if task_id is not None else None
    if record is None or record.terminal:
        task_id = None
    _add(s, row.agent_id, task_id, delta)
    usage = UsageRecord(
        agent_id=row.agent_id,
        task_id=task_id,
        turns=delta.turns,
        tokens=delta.tokens,
        cost=delta.cost,
        at=cx.now,
    )
    effects: list[Effect] = [Journal(record=usage)]
    if task_id is not None and decides_alone(s.tasks[task_id]):
        # its actor decides its limits and its soft warnings (rules 3 and 4)
        effects.append(
            TellTask(task_id=task_id, message=Spent(usage=s.task_usage[task_id], at=cx.now))
        )
    effects += _check_session(s, cx)
    return effects


def _add(s: SessionState, agent_id: str, task_id: str | None, delta: Usage) -> None:
    s.agent_usage[agent_id] = s.agent_usage.get(agent_id, Usage()) + delta
    s.session_usage = s.session_usage + delta
    if task_id is not None:
        s.task_usage[task_id] = s.task_usage.get(task_id, Usage()) + delta


def _check_session(s: SessionState, cx: Ctx) -> list[Effect]:
    if s.settings.budget_tokens is None and s.settings.budget_cost is None:
        return []  # no budget of the session's (most sessions): nothing to build
    budget = session_budget(s)
    usage = s.session_usage
    effects: list[Effect] = []
    why = exceeded(usage, budget, "the session", its_limit=False)
    if why is not None:
        for record in [r for r in s.tasks.values() if not r.terminal]:
            effects += _end(s, record, why, cx)
        return effects
    for limit in over(usage, budget, _fraction(s)):
        bound = getattr(budget, limit)
        text = (
            f"the session has used {amount(limit, spent(usage, limit))} of its budget of "
            f"{amount(limit, bound)} {UNITS[limit]}; past it every open task ends as failed "
            "and no task is delegated"
        )
        effects += _warn(s, limit, text, cx)
    return effects


def _warn(s: SessionState, limit: str, text: str, cx: Ctx) -> list[Effect]:
    """Rule 3 for the session: once per limit (a task's are its actor's:
    :mod:`protocol.session.task_budget`)."""
    if (SESSION_SCOPE, limit) in s.budget_warned:
        return []
    s.budget_warned.add((SESSION_SCOPE, limit))
    # refs names the limit: a restarted parent reads it back from the record of delivery
    note = Notice(created_at=cx.now, code=SOFT_CODE, text=text, refs=(limit,))
    return [Story(text=f"budget: {text}"), Notify(note=note)]


def _end(s: SessionState, record: TaskRecord, why: str, cx: Ctx) -> list[Effect]:
    """Rule 4: settled as failed by the parent's side (its agent stops, as for a cancel; the
    parent is told once it settled so: :func:`protocol.session.settlement.reported`)."""
    return settlement.settle(
        s, record.task_id, TaskEvent.FAIL, cx, error=why, reason=BUDGET_EXCEEDED
    )


# ------------------------------------------------------------------ restart


def replay(s: SessionState, record: UsageRecord) -> None:
    """A usage record read back: counted again. Which soft limits were warned of is the record
    of delivery's to say (:attr:`Restore.warned <protocol.session.restore.Restore.warned>`):
    one journaled but never told (the parent died in between) is told after the restart, by
    :func:`restored` for a task and :func:`resume` for the session."""
    delta = Usage(turns=record.turns, tokens=record.tokens, cost=record.cost)
    task = s.tasks.get(record.task_id) if record.task_id is not None else None
    _add(s, record.agent_id, record.task_id if task is not None else None, delta)


def restored(s: SessionState, task_id: str, cx: Ctx) -> tuple[list[Effect], bool]:
    """After a restart, before an open task is handed over again: a task with a budget that
    spent something has its actor told so, once (``Spent``: past a limit it ends the task,
    past a soft share never told it warns now, as it would have:
    :mod:`protocol.session.task_budget`); a task over the session's budget (the parent
    stopped between counting and ending it) ends now. True: it ends, so it is not handed
    over again."""
    record, usage = s.tasks[task_id], s.task_usage.get(task_id)
    told: list[Effect] = []
    if usage is not None and record.budget is not None and not record.budget.empty:
        told.append(TellTask(task_id=task_id, message=Spent(usage=usage, at=cx.now)))
        if overspent(record, usage) is not None:
            return told, True
    why = exceeded(s.session_usage, session_budget(s), "the session", its_limit=False)
    return (told, False) if why is None else (_end(s, record, why, cx), True)


def resume(s: SessionState, cx: Ctx) -> list[Effect]:
    """After a restart: a soft share of the session's budget passed and never told is told
    now, once (its tasks' are theirs: :func:`restored`)."""
    return _check_session(s, cx)
