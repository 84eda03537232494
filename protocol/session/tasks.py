"""Tasks in the session: delegation and turns without ``done`` (their settlement:
:mod:`protocol.session.settlement`).

The task machine itself (states, the table, the guards) is :mod:`protocol.records.tasks`; a
task's own rules (its waiting transitions, its settlement) are :mod:`protocol.session.task`,
run by its actor; this module says who may give a task and what else happens then.

Rules:

1. **One active task per agent.** ``delegate`` checks the agent's slot (``agent_busy``;
   messages are still accepted), journals the task, opens its note, starts its actor (which
   arms its deadline: :mod:`protocol.session.task`, rule 5) and hands the task to the
   agent: it is ``running`` once handed over, whether the agent is busy or idle (its bridge
   queues it). An agent in a git worktree gets it once where its worktree
   stands is recorded (:mod:`protocol.session.worktrees`).
2. **A turn that ends without done is told.** A turn that ends while the agent's task is still
   open, without ``done`` and without a question waiting for a reply, is told to the parent
   once per turn (``turn_ended_without_done``, with the turn's exit status and the tail of its
   output) and counted in the task's status. A turn that began before the task was delegated
   is not the task's.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from protocol.calls import api
from protocol.core.errors import (
    AgentBusy,
    InvalidArgument,
)
from protocol.core.ids import IdKind
from protocol.records.journal import PromptRecord
from protocol.records.notifications import Notice
from protocol.records.tasks import (
    TaskEvent,
    TaskRecord,
    TaskState,
    queue,
    start,
)
from protocol.records.tasks import settle as settle_record
from protocol.records.usage import Budget
from protocol.session import admission, checks, outbox, requests, task_budget, worktrees
from protocol.session import task as one_task
from protocol.session.effects import (
    Answer,
    Effect,
    Journal,
    Notify,
    OpenNote,
    SpawnTask,
    Story,
    TellTask,
    WatchdogInstruction,
    WatchdogTask,
)
from protocol.session.state import AgentRow, Ctx, SessionState, Turn, TurnStats
from protocol.session.task_stale import Stale
from protocol.wire.envelopes import TaskEnvelope

__all__ = [
    "TurnEnd",
    "delegate",
    "delegate_one",
    "prompt",
    "replay",
    "task_envelope",
    "turn_end",
    "turn_ended",
]


class TurnEnd(msgspec.Struct, frozen=True, kw_only=True):
    """After the task decided what its agent sent before its turn ended: judge the turn."""

    agent_id: str
    turn: Turn
    exit_code: int | None = None
    is_error: bool = False


def task_envelope(s: SessionState, record: TaskRecord, cx: Ctx) -> TaskEnvelope:
    """The task as handed to its agent: the same envelope id every time (an agent's inbox
    drops a task it already had, when a restarted parent hands it over again)."""
    return outbox.from_parent(
        TaskEnvelope,
        s,
        cx,
        record.agent_id,
        message_id=record.message_id,
        created_at=record.created_at,
        task_id=record.task_id,
        content=record.description,
        deadline_at=record.deadline_at,
    )


def delegate(
    s: SessionState, args: api.DelegateArgs, cx: Ctx, *, budget: Budget | None = None
) -> list[Effect]:
    """``budget``: the limits granted by :mod:`protocol.session.budgets`, which calls this."""
    result, effects = delegate_one(s, args, cx, budget)
    return [*effects, Answer(value=result)]


def delegate_one(
    s: SessionState, args: api.DelegateArgs, cx: Ctx, budget: Budget | None = None
) -> tuple[api.DelegateResult, list[Effect]]:
    row = s.agent(args.target, live=True)
    if not args.task.strip():
        raise InvalidArgument("task text is empty")
    if args.timeout_minutes is not None and not args.timeout_minutes > 0:
        raise InvalidArgument(
            f"timeout must be a positive number of minutes, got {args.timeout_minutes}"
        )
    if row.active_task is not None:
        raise AgentBusy(
            f"agent {row.name} already has active task {row.active_task}; "
            "messages are still accepted"
        )
    timeout_s = (
        args.timeout_minutes * 60.0
        if args.timeout_minutes is not None
        else s.settings.default_task_timeout_s
    )
    from_start = args.timeout_from == "start" and timeout_s is not None
    record = TaskRecord(
        task_id=cx.ids.new(IdKind.TASK),
        agent_id=row.agent_id,
        agent_name=row.name,
        description=args.task,
        created_at=cx.now,
        deadline_at=cx.now + timeout_s if timeout_s is not None and not from_start else None,
        message_id=cx.ids.new(IdKind.MESSAGE),
        budget=budget,
        check=checks.check_of(row, args),
        priority=args.priority or 0,
        start_timeout_s=timeout_s if from_start else None,
    )
    envelope = task_envelope(s, record, cx)
    # checked with a deadline, as if it had one: never too big once handed over
    outbox.check_fits(s, msgspec.structs.replace(envelope, deadline_at=cx.now), "the task text")
    task_id = record.task_id
    s.agents[row.agent_id] = msgspec.structs.replace(row, active_task=task_id)
    queued = admission.enabled(s) and not admission.fits(s, row.agent_id, cx.now)
    place = 0
    if queued:  # no slot: it waits, journaled queued (admission, rule 2)
        record, place = admission.enqueue(s, queue(record))
    effects: list[Effect] = [Journal(record=record), OpenNote(record=record)]
    s.tasks[task_id] = record
    result = api.DelegateResult(
        task_id=task_id, agent_id=row.agent_id, accepted=True, agent_name=row.name
    )
    if queued:
        effects += requests.task_moved(s, None, record, cx)
        effects.append(_spawn(s, record))
        effects += admission.wake(s, cx)  # its provider's next token, if paced
        return msgspec.structs.replace(result, queued=True, queue_place=place), effects
    effects += requests.task_moved(s, record, start(record, cx.now), cx)
    admission.took(s, s.tasks[task_id], cx.now)
    effects.append(_spawn(s, s.tasks[task_id]))
    return result, effects + _handed(s, row, s.tasks[task_id], cx, envelope)


def _spawn(s: SessionState, record: TaskRecord) -> SpawnTask:
    """The new task's actor (with its soft warnings, if it has a budget, and how long its
    waits may last untold)."""
    soft = task_budget.soft_for(record, s.settings.budget_soft_fraction)
    return SpawnTask(record=record, soft=soft, stale=stale_for(s))


def stale_for(s: SessionState, told: float | None = None) -> Stale:
    """A task actor's stale-wait state (:mod:`protocol.session.task_stale`): the session's
    threshold, and the episode already told of (a restart's)."""
    return Stale(after_s=s.settings.stale_wait_threshold_s, told=told)


def _handed(
    s: SessionState, row: AgentRow, record: TaskRecord, cx: Ctx, envelope: TaskEnvelope
) -> list[Effect]:
    """The task goes to its agent (or first where its worktree stands is recorded)."""
    return [
        worktrees.deliver_task(s, row, record, envelope),
        WatchdogTask(agent_id=row.agent_id, task_id=record.task_id),
        WatchdogInstruction(
            agent_id=row.agent_id,
            kind="task",
            text=record.description,
            task_id=record.task_id,
            at=cx.now,
        ),
    ]


def started(s: SessionState, record: TaskRecord, cx: Ctx) -> list[Effect]:
    """A queued task's actor decided its ``Start`` (admission, rule 5): journaled running
    (its actor armed a deadline counted from the start), its budget's minutes armed, handed
    over. One that settled
    first gives its slot to the next."""
    row = s.agents.get(record.agent_id)
    if record.state is not TaskState.RUNNING or row is None:
        s.admitted.pop(record.task_id, None)
        return admission.fill(s, cx)
    effects: list[Effect] = [Journal(record=record)]
    waited = cx.now - record.created_at
    effects.append(Story(text=f"{row.name}: task {record.task_id} started ({waited:.1f} s queued)"))
    return effects + _handed(s, row, record, cx, task_envelope(s, record, cx))


def prompt(
    s: SessionState, args: api.PromptArgs, cx: Ctx, *, budget: Budget | None = None
) -> list[Effect]:
    """Compatibility: a prompt is a task, and its id an alias of the task's id."""
    delegated, effects = delegate_one(
        s,
        api.DelegateArgs(
            target=args.target, task=args.prompt, timeout_minutes=args.timeout_minutes
        ),
        cx,
        budget,
    )
    prompt_id = cx.ids.new(IdKind.PROMPT)
    s.prompts[prompt_id] = delegated.task_id
    result = api.PromptResult(
        prompt_id=prompt_id,
        task_id=delegated.task_id,
        agent_id=delegated.agent_id,
        accepted=delegated.accepted,
    )
    return [
        *effects,
        Journal(record=PromptRecord(prompt_id=prompt_id, task_id=delegated.task_id)),
        Answer(value=result),
    ]


# ------------------------------------------------------------------ turns


def turn_end(
    s: SessionState,
    agent_id: str,
    turn: Turn,
    cx: Ctx,
    *,
    exit_code: int | None = None,
    is_error: bool = False,
) -> list[Effect]:
    """An agent's turn ended: judged (rule 6), once its task's actor has decided an ending
    routed to it before (a ``done`` sent just before the turn ended is not overtaken by it);
    with none on its way, at once."""
    row = s.agents.get(agent_id)
    record = s.tasks.get(row.active_task) if row is not None and row.active_task else None
    if record is None or record.terminal:
        return []
    if not s.endings.get(record.task_id):
        return turn_ended(s, agent_id, turn, cx, exit_code=exit_code, is_error=is_error)
    then = TurnEnd(agent_id=agent_id, turn=turn, exit_code=exit_code, is_error=is_error)
    return [TellTask(task_id=record.task_id, message=one_task.Sync(then=then))]


def turn_ended(
    s: SessionState,
    agent_id: str,
    turn: Turn,
    cx: Ctx,
    *,
    exit_code: int | None = None,
    is_error: bool = False,
) -> list[Effect]:
    """Rule 6: should the parent hear that this turn ended with the task still open?"""
    row = s.agents.get(agent_id)
    if row is None or row.closed or row.active_task is None:
        return []
    record = s.tasks.get(row.active_task)
    if record is None or record.terminal:
        return []
    if turn.started_at is not None and turn.started_at < record.created_at:
        return []  # the turn began before the task existed: it was not the task's turn
    if s.waits(agent_id):
        return []  # it asked and waits for a reply: ending the turn is what it should do
    stats = s.turn_stats.get(record.task_id, TurnStats())
    s.turn_stats[record.task_id] = msgspec.structs.replace(
        stats, count=stats.count + 1, ended_at=cx.now, exit_code=exit_code
    )
    status = ""
    if exit_code is not None:
        status = f" (exit status {exit_code})"
    elif is_error:
        status = " (with an error)"
    text = (
        f"{row.name}'s turn ended without done{status}; task {record.task_id} is still "
        f"{record.state.value}. A turn ending never ends a task: the agent must call done, "
        "or you can message, cancel or fail the task."
        + (f" Its output ends:{_indented(turn.tail)}" if turn.tail else " It printed nothing.")
    )
    note = Notice(
        created_at=cx.now,
        code="turn_ended_without_done",
        text=text,
        agent_id=row.agent_id,
        task_id=record.task_id,
    )
    return [
        Story(text=f"{row.name}: turn ended without done{status} ({record.task_id})"),
        Notify(note=note),
    ]


def _journaled_move(before: TaskRecord, record: TaskRecord) -> bool:
    """A task's record journaled again while open: the open moves that are journaled (a
    queued task started, a claim into ``verifying``, ``running`` again after a failed
    attempt); the others are derived."""
    return not before.terminal and (
        record.state is not before.state or record.attempt != before.attempt
    )


def _indented(lines: Sequence[str]) -> str:
    return "".join(f"\n  {line}" for line in lines)


#: the event that moves a task into each terminal state (to replay a settlement)
_SETTLED_BY: dict[TaskState, TaskEvent] = {
    TaskState.COMPLETED: TaskEvent.COMPLETE,
    TaskState.BLOCKED: TaskEvent.BLOCK,
    TaskState.FAILED: TaskEvent.FAIL,
    TaskState.CANCELLED: TaskEvent.CANCEL,
    TaskState.TIMED_OUT: TaskEvent.TIME_OUT,
}


def replay(s: SessionState, record: TaskRecord, cx: Ctx) -> None:
    """A task record read back from the journal (written when it was delegated and when it
    settled): the same moves through the machine, without telling anyone again."""
    task_id = record.task_id
    before = s.tasks.get(task_id)
    row = s.agents.get(record.agent_id)
    if not record.terminal:
        if before is not None:
            if _journaled_move(before, record):  # started, verifying, an attempt back
                requests.task_moved(s, before, record, cx)
            return
        s.tasks[task_id] = record
        if record.state is TaskState.CREATED:
            requests.task_moved(s, record, start(record, record.created_at), cx)
        if row is not None:
            s.agents[row.agent_id] = msgspec.structs.replace(row, active_task=task_id)
        return
    result = record.result
    if before is None or before.terminal or result is None:
        s.tasks[task_id] = record  # nothing to replay it from: it is what was journaled
        return
    settled, _ = settle_record(
        before,
        _SETTLED_BY[record.state],
        result.completed_at,
        text=result.text,
        error=result.error,
        cancel_requests=True,
        reason=result.reason,
        usage=result.usage,
        evidence=result.evidence,
    )
    requests.task_moved(s, before, settled, cx)
    s.turn_stats.pop(task_id, None)
    if row is not None and row.active_task == task_id:
        s.agents[row.agent_id] = msgspec.structs.replace(row, active_task=None)
