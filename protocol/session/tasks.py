"""Tasks in the session: delegation, ``done``, settlement, deadlines, turns without ``done``.

The task machine itself (states, the table, the guards) is :mod:`protocol.records.tasks`; this
module says who may move a task and what else happens when it moves.

Rules:

1. **One active task per agent.** ``delegate`` checks the agent's slot (``agent_busy``;
   messages are still accepted), journals the task, opens its note, arms its deadline and
   hands the task to the agent: it is ``running`` once handed over, whether the agent is busy
   or idle (its bridge queues it). An agent in a git worktree gets it once where its worktree
   stands is recorded (:mod:`protocol.session.worktrees`).
2. **Only the owner settles its task with done.** A ``done`` names its task or means the
   sender's active task; another agent's task is ``forbidden_sender``. A ``done`` on a task
   already settled is answered with the stored result (a redelivery after a restart).
3. **The first terminal event wins**, whoever sends it: the agent's ``done``, the parent's
   cancel or fail, the agent's exit or close, a failed delivery, the deadline. Each is routed
   to the task's own actor, which decides (:mod:`protocol.session.task`); later ones change
   nothing and get the stored result. ``tasks`` is the session's read model of the task
   records: changed only by what the task actors report (:func:`reported`), in order.
4. **Settlement happens once**, when the task reports it: the result is journaled first
   (durable before anyone hears of it), the note finalised, the agent's slot freed, the
   requests the task dropped cancelled, the result handed to each watcher subscribed to the
   task (for an agent in a git worktree, once the files the task changed are listed in it),
   and the task's actor stopped.
5. **Ending a task stops its work.** When anything but the agent's own ``done`` settles it
   and the agent is still running, the agent gets a ``control cancel_task`` naming the task
   (every adapter stops that task's work and is ready for the next task). The control carries
   the reason; no separate notice is sent.
6. **A turn that ends without done is told.** A turn that ends while the agent's task is still
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
    ErrorInfo,
    ForbiddenSender,
    InvalidArgument,
    InvalidHandle,
)
from protocol.core.ids import IdKind, kind_of
from protocol.records.journal import PromptRecord
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.tasks import (
    TaskEvent,
    TaskRecord,
    TaskState,
    event_for_done,
    start,
)
from protocol.records.tasks import settle as settle_record
from protocol.records.usage import Budget
from protocol.session import outbox, requests, worktrees
from protocol.session import task as one_task
from protocol.session.effects import (
    Answer,
    CancelTimer,
    Deliver,
    Effect,
    FinaliseNote,
    Journal,
    Log,
    Notify,
    OpenNote,
    SpawnTask,
    StartTimer,
    StopTask,
    Story,
    TaskDeadline,
    TellTask,
    WatchdogInstruction,
    WatchdogTask,
)
from protocol.session.state import AgentRow, Ctx, SessionState, Turn, TurnStats
from protocol.wire.envelopes import ControlEnvelope, TaskDoneEnvelope, TaskEnvelope

__all__ = [
    "AckDone",
    "AnswerSettle",
    "deadline",
    "delegate",
    "delegate_one",
    "done",
    "parent_settles",
    "prompt",
    "replay",
    "reported",
    "settle",
    "task_envelope",
    "turn_end",
    "turn_ended",
]

#: what the parent's cancel or fail says when the caller gave no reason
_BY_PARENT = {TaskEvent.CANCEL: "cancelled by the parent", TaskEvent.FAIL: "failed by the parent"}


class AckDone(msgspec.Struct, frozen=True, kw_only=True):
    """After an agent's ``done`` is decided: its receipt (with the result, or the refusal)."""

    envelope: TaskDoneEnvelope


class TurnEnd(msgspec.Struct, frozen=True, kw_only=True):
    """After the task decided what its agent sent before its turn ended: judge the turn."""

    agent_id: str
    turn: Turn
    exit_code: int | None = None
    is_error: bool = False


class AnswerSettle(msgspec.Struct, frozen=True, kw_only=True):
    """After the parent's cancel or fail is decided: the answer to its call (``call``: which
    of the calls waiting for their answer, numbered by whoever runs the effects)."""

    call: int = 0


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
    record = TaskRecord(
        task_id=cx.ids.new(IdKind.TASK),
        agent_id=row.agent_id,
        agent_name=row.name,
        description=args.task,
        created_at=cx.now,
        deadline_at=cx.now + timeout_s if timeout_s is not None else None,
        message_id=cx.ids.new(IdKind.MESSAGE),
        budget=budget,
    )
    envelope = task_envelope(s, record, cx)
    # checked with a deadline, as if it had one: never too big once handed over
    outbox.check_fits(s, msgspec.structs.replace(envelope, deadline_at=cx.now), "the task text")
    task_id = record.task_id
    s.agents[row.agent_id] = msgspec.structs.replace(row, active_task=task_id)
    effects: list[Effect] = [Journal(record=record), OpenNote(record=record)]
    if record.deadline_at is not None:
        delay = record.deadline_at - cx.now
        effects.append(StartTimer(delay=delay, event=TaskDeadline(task_id=task_id)))
    s.tasks[task_id] = record
    effects += requests.task_moved(s, record, start(record, cx.now), cx)
    effects.append(SpawnTask(record=s.tasks[task_id]))
    effects += [
        worktrees.deliver_task(s, row, record, envelope),
        WatchdogTask(agent_id=row.agent_id, task_id=task_id),
        WatchdogInstruction(
            agent_id=row.agent_id, kind="task", text=args.task, task_id=task_id, at=cx.now
        ),
    ]
    result = api.DelegateResult(
        task_id=task_id, agent_id=row.agent_id, accepted=True, agent_name=row.name
    )
    return result, effects


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


# ------------------------------------------------------------------ settlement


def settle(
    s: SessionState,
    task_id: str,
    event: TaskEvent,
    cx: Ctx,
    *,
    text: str | None = None,
    error: str | None = None,
    cancel_requests: bool = True,
    by_agent: bool = False,
    reason: str | None = None,
    then: AckDone | AnswerSettle | None = None,
) -> list[Effect]:
    """Route a terminal event to the task's actor (rule 3); nothing if the task had settled
    already (its actor is gone) or is unknown. What happens then: :func:`reported`."""
    record = s.tasks.get(task_id)
    if record is None or record.terminal:
        return []
    end = one_task.End(
        event=event,
        at=cx.now,
        text=text,
        error=error,
        cancel_requests=cancel_requests,
        reason=reason,
        usage=s.task_usage.get(task_id),
        by_agent=by_agent,
        then=then,
    )
    return [TellTask(task_id=task_id, message=end)]


def reported(s: SessionState, report: one_task.Report, cx: Ctx) -> list[Effect]:
    """What a task's actor decided, acted on by the session (rules 3 and 4)."""
    match report:
        case one_task.Moved(before=before, after=after, opened=opened):
            return requests.task_moved(s, before, after, cx, opened=opened)
        case one_task.Late(record=record, request_id=request_id):
            why = f"task {record.task_id} {record.state.value}"
            return requests.close(s, request_id, RequestState.CANCELLED, cx, why=why)
        case one_task.Noted(record=record, then=then):
            return _then(s, then, record, cx)
        case one_task.Settled(before=before, after=after, by_agent=by_agent, then=then):
            return _settled(s, before, after, cx, by_agent=by_agent) + _then(s, then, after, cx)
        case one_task.Unchanged(record=record, then=then):
            return _then(s, then, record, cx, already=True)
        case one_task.Refused(record=record, error=error, then=then):
            return _then(s, then, record, cx, error=error)
    raise TypeError(f"a task does not report {type(report).__name__}")


def _then(
    s: SessionState,
    then: AckDone | AnswerSettle | TurnEnd | None,
    record: TaskRecord,
    cx: Ctx,
    *,
    already: bool = False,
    error: ErrorInfo | None = None,
) -> list[Effect]:
    """What the session does once the ending it routed was decided (``then``)."""
    match then:
        case AckDone(envelope=env):
            if error is not None:  # refused by the machine (unresolved requests): nothing moved
                return outbox.ack(s, cx, env, error=error)
            return outbox.ack(s, cx, env, result=record.result)
        case AnswerSettle():
            assert error is None, error  # a cancel or a fail is never refused by the machine
            return [_settle_answer(record, already=already)]
        case TurnEnd(agent_id=agent_id, turn=turn, exit_code=exit_code, is_error=is_error):
            return turn_ended(s, agent_id, turn, cx, exit_code=exit_code, is_error=is_error)
    return []


def _settle_answer(record: TaskRecord, *, already: bool) -> Answer:
    result = record.result
    assert result is not None, record
    fields = msgspec.structs.asdict(result)
    return Answer(value=api.SettleResult(**fields, already_settled=already))


def _settled(
    s: SessionState, before: TaskRecord, settled: TaskRecord, cx: Ctx, *, by_agent: bool
) -> list[Effect]:
    """The task settled (rules 4-5): what the session does about it, in order."""
    task_id = settled.task_id
    result = settled.result
    assert result is not None
    effects: list[Effect] = []
    if before.deadline_at is not None:
        effects.append(CancelTimer(key=("deadline", task_id)))
    if before.budget is not None and before.budget.max_minutes is not None:
        effects += [CancelTimer(key=("budget_soft", task_id)), CancelTimer(key=("budget", task_id))]
    effects += [Journal(record=settled), FinaliseNote(record=settled)]
    effects += requests.task_moved(s, before, settled, cx)
    row = s.agents.get(settled.agent_id)
    if row is not None and row.active_task == task_id:
        s.agents[row.agent_id] = row = msgspec.structs.replace(row, active_task=None)
        effects.append(WatchdogTask(agent_id=row.agent_id, task_id=None))
    why = f"task {task_id} {settled.state.value}"
    for request_id in before.pending_requests:
        effects += requests.close(s, request_id, RequestState.CANCELLED, cx, why=why)
    s.turn_stats.pop(task_id, None)
    if row is not None and not row.closed and not by_agent:
        effects.append(_stop_work(s, settled, cx))
    effects += worktrees.on_settle(s, result, cx)
    rc = result.return_code
    effects.append(Log(text=f"task {task_id} {settled.state.value} (rc {rc})"))
    effects.append(StopTask(task_id=task_id))
    return effects


def _stop_work(s: SessionState, record: TaskRecord, cx: Ctx) -> Deliver:
    """The parent ended the task: the agent stops working on it (rule 5)."""
    result = record.result
    assert result is not None
    what = record.state.value.replace("_", " ")
    reason = f"task {record.task_id} {what}" + (f": {result.error}" if result.error else "")
    control = outbox.from_parent(
        ControlEnvelope,
        s,
        cx,
        record.agent_id,
        action="cancel_task",
        task_id=record.task_id,
        reason=reason,
    )
    return Deliver(agent_id=record.agent_id, envelope=control)


def parent_settles(
    s: SessionState, task_id: str, event: TaskEvent, why: str | None, cx: Ctx
) -> list[Effect]:
    """The parent's cancel or fail: the answer says whether it was this event that settled it
    (given once the task decided: :class:`AnswerSettle`)."""
    if kind_of(task_id) is not IdKind.TASK or task_id not in s.tasks:
        raise InvalidHandle(f"no task {task_id!r} in this session")
    record = s.tasks[task_id]
    if record.terminal:
        return [_settle_answer(record, already=True)]
    return settle(s, task_id, event, cx, error=why or _BY_PARENT[event], then=AnswerSettle())


def done(s: SessionState, row: AgentRow, env: TaskDoneEnvelope, cx: Ctx) -> list[Effect]:
    """An agent's ``done`` (rule 2); refusals raise, and the caller turns them into receipts."""
    if env.task_id is None:
        if row.active_task is None:
            raise InvalidHandle(f"agent {row.name} has no active task to finish")
        env = msgspec.structs.replace(env, task_id=row.active_task)
    task_id = env.task_id
    assert task_id is not None
    record = s.tasks.get(task_id)
    if record is None:
        raise InvalidHandle(f"no task {task_id} in this session")
    if record.agent_id != row.agent_id:
        raise ForbiddenSender(f"task {task_id} belongs to another agent")
    if record.terminal:  # a redelivery: the stored result
        return outbox.ack(s, cx, env, result=record.result)
    return settle(
        s,
        task_id,
        event_for_done(env.status),
        cx,
        text=env.summary,
        error=env.error,
        cancel_requests=env.cancel_requests,
        by_agent=True,
        then=AckDone(envelope=env),
    )


def deadline(s: SessionState, event: TaskDeadline, cx: Ctx) -> list[Effect]:
    record = s.tasks.get(event.task_id)
    if record is None or record.terminal:
        return []
    why = "task deadline passed before the agent called done"
    return settle(s, event.task_id, TaskEvent.TIME_OUT, cx, error=why)


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
    """An agent's turn ended: judged (rule 6) once its task has decided everything routed to
    it before (a ``done`` sent just before the turn ended is not overtaken by it)."""
    row = s.agents.get(agent_id)
    record = s.tasks.get(row.active_task) if row is not None and row.active_task else None
    if record is None or record.terminal:
        return []
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
    s.turn_stats[record.task_id] = TurnStats(
        count=stats.count + 1, ended_at=cx.now, exit_code=exit_code
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
    )
    requests.task_moved(s, before, settled, cx)
    s.turn_stats.pop(task_id, None)
    if row is not None and row.active_task == task_id:
        s.agents[row.agent_id] = msgspec.structs.replace(row, active_task=None)
