"""Tasks in the session: ``done``, the parent's cancel and fail, settlement.

Every ending is routed to the task's own actor, which decides (:mod:`protocol.session.task`);
this module says who may end a task, and what the session does with what the task reports.

Rules:

1. **Only the owner settles its task with done.** A ``done`` names its task or means the
   sender's active task; another agent's task is ``forbidden_sender``. A ``done`` on a task
   already settled is answered with the stored result (a redelivery after a restart).
2. **The first terminal event wins**, whoever sends it: the agent's ``done``, the parent's
   cancel or fail, the agent's exit or close, a failed delivery, a budget. Each is routed
   to the task's own actor, which decides (:mod:`protocol.session.task`); later ones change
   nothing and get the stored result. The deadline, and the task's own budget, are its
   actor's to decide alone (its timer; what it spent, as the session tells it): it reports
   them like the others, answering no ending routed. A task its budget ended (its own or
   the session's) is told to the parent (``budget_exceeded``) once it has settled so.
   ``tasks`` is the session's read model of the task records: changed only by what the
   task actors report (:func:`reported`), in order.
3. **Settlement happens once**, when the task reports it: the result is journaled first
   (durable before anyone hears of it), the note finalised, the agent's slot freed, the
   requests the task dropped cancelled, the result handed to each watcher subscribed to the
   task, and the task's actor stopped. For an agent in a git worktree, the result is handed
   over once the files the task changed are listed in it: its actor lives on until then,
   and adds them to its result (:mod:`protocol.session.task`, rule 7).
4. **Ending a task stops its work.** When anything but the agent's own ``done`` settles it
   and the agent is still running, the agent gets a ``control cancel_task`` naming the task
   (every adapter stops that task's work and is ready for the next task). The control carries
   the reason; no separate notice is sent.
"""

from __future__ import annotations

import msgspec

from protocol.calls import api
from protocol.core.errors import ErrorInfo, ForbiddenSender, InvalidHandle
from protocol.core.ids import IdKind, kind_of
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.tasks import TaskEvent, TaskRecord, TaskState, event_for_done
from protocol.records.usage import BUDGET_EXCEEDED
from protocol.session import (
    admission,
    checks,
    claims,
    outbox,
    requests,
    stale,
    task_budget,
    task_stale,
    watchers,
    worktree_events,
    worktrees,
)
from protocol.session import task as one_task
from protocol.session.effects import (
    Answer,
    Deliver,
    Effect,
    FinaliseNote,
    Journal,
    Log,
    Notify,
    StopCheck,
    StopTask,
    Story,
    TellTask,
    WatchdogTask,
)
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.session.tasks import TurnEnd, started, turn_ended
from protocol.wire.envelopes import ControlEnvelope, TaskDoneEnvelope

__all__ = [
    "AckDone",
    "AnswerSettle",
    "done",
    "parent_settles",
    "reported",
    "settle",
]

#: what the parent's cancel or fail says when the caller gave no reason
_BY_PARENT = {TaskEvent.CANCEL: "cancelled by the parent", TaskEvent.FAIL: "failed by the parent"}


class AckDone(msgspec.Struct, frozen=True, kw_only=True):
    """After an agent's ``done`` is decided: its receipt (with the result, or the refusal)."""

    envelope: TaskDoneEnvelope


class AnswerSettle(msgspec.Struct, frozen=True, kw_only=True):
    """After the parent's cancel or fail is decided: the answer to its call (``call``: which
    of the calls waiting for their answer, numbered by whoever runs the effects)."""

    call: int = 0


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
    s.endings[task_id] = s.endings.get(task_id, 0) + 1
    return [TellTask(task_id=task_id, message=end)]


def reported(s: SessionState, report: task_budget.AnyReport, cx: Ctx) -> list[Effect]:
    """What a task's actor decided, acted on by the session (rules 3 and 4); an ending it
    decided alone (its deadline, its budget) answers no ending the session routed. A soft
    share of its budget it passed (``Warned``) is told to the parent."""
    alone = isinstance(report, one_task.Settled) and report.alone
    if not alone and isinstance(report, one_task.ENDINGS):
        if isinstance(report, one_task.MOVES):
            task_id = report.after.task_id
        else:
            task_id = report.record.task_id
        left = s.endings.pop(task_id, 1) - 1
        if left > 0:
            s.endings[task_id] = left
    match report:
        case one_task.Moved(before=before, after=after, opened=opened, then=then):
            moved = requests.task_moved(s, before, after, cx, opened=opened)
            return moved + _then(s, then, after, cx)
        case one_task.Late(record=record, request_id=request_id, then=then):
            why = f"task {record.task_id} {record.state.value}"
            closed = requests.close(s, request_id, RequestState.CANCELLED, cx, why=why)
            return closed + _then(s, then, record, cx)
        case one_task.Noted(record=record, then=then):
            return _then(s, then, record, cx)
        case one_task.Settled(before=before, after=after, by_agent=by_agent, then=then):
            said = then.envelope.created_at if isinstance(then, AckDone) else None
            effects = _settled(s, before, after, cx, by_agent=by_agent, said_done_at=said)
            effects += _budget_told(after)
            return effects + _then(s, then, after, cx)
        case one_task.Unchanged(record=record, then=then):
            return _then(s, then, record, cx, already=True)
        case one_task.Refused(record=record, error=error, then=then):
            return _then(s, then, record, cx, error=error)
        case one_task.Verifying(after=after, then=then):
            return checks.verifying(s, report, cx) + _then(s, then, after, cx)
        case one_task.Rejected(after=after, then=then):
            return checks.rejected(s, report, cx) + _then(s, then, after, cx)
        case task_budget.Warned(record=record, then=then):
            warned: list[Effect] = []
            for note in task_budget.notices(report):
                warned += [Story(text=f"budget: {note.text}"), Notify(note=note)]
            return warned + _then(s, then, record, cx)
        case task_stale.StaleFound():
            return stale.found(s, report, cx)
    raise TypeError(f"a task does not report {type(report).__name__}")


def _budget_told(record: TaskRecord) -> list[Effect]:
    """A task its budget ended (its own or the session's): the parent's ``budget_exceeded``
    notice, saying why, and the story. Told once the task has settled so, never of an ending
    that lost (a time-out needs no notice: its completion says it)."""
    result = record.result
    if result is None or result.reason != BUDGET_EXCEEDED or result.error is None:
        return []
    why = result.error
    note = Notice(
        created_at=result.completed_at,
        code=BUDGET_EXCEEDED,
        text=f"task {record.task_id} ({record.agent_name}) failed: {why}",
        agent_id=record.agent_id,
        task_id=record.task_id,
    )
    return [Story(text=f"{record.agent_name}: {why}"), Notify(note=note)]


def _then(
    s: SessionState,
    then: AckDone | AnswerSettle | TurnEnd | requests.AfterWaiting | worktree_events.Diffed | None,
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
            if record.state is TaskState.VERIFYING and record.check is not None:
                note = (
                    f"your claim is being checked: the parent runs `{record.check.command}` "
                    f"(attempt {record.attempt} of {record.check.attempts}); you are told if it "
                    "fails"
                )
                return outbox.ack(s, cx, env, note=note)
            return outbox.ack(s, cx, env, result=record.result)
        case AnswerSettle():
            assert error is None, error  # a cancel or a fail is never refused by the machine
            return [_settle_answer(record, already=already)]
        case requests.AfterWaiting(effects=told):
            return list(told)
        case TurnEnd(agent_id=agent_id, turn=turn, exit_code=exit_code, is_error=is_error):
            return turn_ended(s, agent_id, turn, cx, exit_code=exit_code, is_error=is_error)
        case admission.Started():
            return started(s, record, cx)
        case worktree_events.Diffed(changes=changes):
            return worktree_events.listed(s, record, changes, cx)
    return []


def _settle_answer(record: TaskRecord, *, already: bool) -> Answer:
    result = record.result
    assert result is not None, record
    fields = msgspec.structs.asdict(result)
    return Answer(value=api.SettleResult(**fields, already_settled=already))


def _settled(
    s: SessionState,
    before: TaskRecord,
    settled: TaskRecord,
    cx: Ctx,
    *,
    by_agent: bool,
    said_done_at: float | None,
) -> list[Effect]:
    """The task settled (rules 4-5): what the session does about it, in order (its
    watchers' windows count from when its agent said ``done``, if it did:
    :func:`protocol.session.watchers.ended_at`)."""
    task_id = settled.task_id
    result = settled.result
    assert result is not None
    effects: list[Effect] = []  # its deadline and its minutes: its actor's timer, gone with it
    if before.state is TaskState.VERIFYING:  # an ending during a check ends the check
        effects.append(StopCheck(task_id=task_id))
    effects += [Journal(record=settled), FinaliseNote(record=settled)]
    effects += requests.task_moved(s, before, settled, cx)
    row = s.agents.get(settled.agent_id)
    if row is not None and row.active_task == task_id:
        s.agents[row.agent_id] = row = msgspec.structs.replace(row, active_task=None)
        effects.append(WatchdogTask(agent_id=row.agent_id, task_id=None))
    if before.pending_requests:
        why = f"task {task_id} {settled.state.value}"
        for request_id in before.pending_requests:
            effects += requests.close(s, request_id, RequestState.CANCELLED, cx, why=why)
    if by_agent:
        effects += claims.settled(s, before, settled, cx)
    s.turn_stats.pop(task_id, None)
    handed = before.state is not TaskState.QUEUED  # a queued task's agent never had it
    if row is not None and not row.closed and not by_agent and handed:
        effects.append(_stop_work(s, settled, cx))
    opened = watchers.ended_at(result, said_done_at)
    if handed:
        effects += worktrees.on_settle(s, result, opened)
    else:
        effects += watchers.hand_over(s, result, opened)
    effects += admission.release(s, before, cx)
    rc = result.return_code
    effects.append(Log(text=f"task {task_id} {settled.state.value} (rc {rc})"))
    if task_id not in s.diffing:  # else its actor adds its changes first (rule 3)
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
    if env.status == "completed":
        claims.refused(s, row, record)
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
