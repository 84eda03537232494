"""Requests: a question sent with ``expects_reply``, from the moment it opens until it closes.

Rules:

1. A request opens when a message with ``expects_reply`` is routed (by
   :mod:`protocol.session.routing`): it is journaled, it gets its reply deadline
   (``reply_timeout_s``, else ``default_reply_timeout_s``; none: no deadline) and, if its sender
   is working on a task, that task is ``waiting`` until no request of it is pending
   (:mod:`protocol.records.tasks` rule 3). The request table changes here; the task's
   ``pending_requests`` are its actor's, told of each request that opens or closes
   (:mod:`protocol.session.task`), in the order the table changed.
2. **Wait-for cycles.** Every pending request is an edge *sender waits on target*. A request
   whose edge closes a cycle (A waits on B waits on A, or longer) is a deadlock no timeout
   will explain: the parent is told at once, naming the whole cycle, and so is the asker.
   The request still opens (reported, not refused).
3. A request closes exactly once (:mod:`protocol.records.requests`): replied, cancelled (its task
   settled, its sender or target left) or timed out (its deadline passed). Closing it is
   journaled and, if it ends its task's wait, the task runs again.
4. A request that closed without an answer is told to its sender when the sender did not
   cause it (a time-out, the target leaving).
"""

from __future__ import annotations

import msgspec

from protocol.core.ids import PARENT_ID
from protocol.records.notifications import Notice, WaitCycle
from protocol.records.requests import RequestRecord, RequestState, resolve
from protocol.records.tasks import TaskRecord, TaskState, close_request, open_request
from protocol.records.waits import find_cycle
from protocol.session import decisions, outbox, stale
from protocol.session.effects import (
    AppendNote,
    CancelTimer,
    Effect,
    Journal,
    Notify,
    RequestTimeout,
    StartTimer,
    Story,
    TellTask,
)
from protocol.session.state import Ctx, SessionState
from protocol.session.task import Attach, Detach

__all__ = [
    "AfterWaiting",
    "attach",
    "close",
    "open_",
    "replay",
    "task_moved",
    "timeout",
    "told_once_waiting",
]


class AfterWaiting(msgspec.Struct, frozen=True, kw_only=True):
    """What the parent hears of a request, once its task's actor has moved the task to
    ``waiting`` (the ``then`` of the ``Attach`` routed for it)."""

    effects: tuple[Effect, ...] = ()


def told_once_waiting(effects: list[Effect], request_id: str, told: list[Effect]) -> list[Effect]:
    """``told`` (what the parent hears of the request ``request_id``) after its task waits for
    it: in the ``then`` of the ``Attach`` routed for it, else at once. So a parent that reads
    ``status`` on hearing of a question or an approval sees the task waiting."""
    for i, effect in enumerate(effects):
        if not isinstance(effect, TellTask):
            continue
        message = effect.message
        if isinstance(message, Attach) and message.request_id == request_id:
            before = message.then.effects if isinstance(message.then, AfterWaiting) else ()
            then = AfterWaiting(effects=(*before, *told))
            attach = msgspec.structs.replace(message, then=then)
            return [
                *effects[:i],
                TellTask(task_id=effect.task_id, message=attach),
                *effects[i + 1 :],
            ]
    return effects + told


def task_moved(
    s: SessionState,
    before: TaskRecord | None,
    after: TaskRecord,
    cx: Ctx,
    opened: str | None = None,
) -> list[Effect]:
    """Keep a task's new record, tell its story if its state changed, keep its episode."""
    s.tasks[after.task_id] = after
    effects: list[Effect] = []
    if before is None or before.state is not after.state:
        extra = ""
        if after.state is TaskState.WAITING and after.pending_requests:
            request = s.requests.get(after.pending_requests[-1])
            if request is not None:
                extra = f" for {s.name_of(request.target_id)}: {request.question!r}"
        elif after.result is not None:
            body = after.result.text or after.result.error
            extra = f" (rc {after.result.return_code})" + (f": {body}" if body else "")
        who = s.name_of(after.agent_id)
        effects.append(Story(text=f"{who}: task {after.task_id} {after.state.value}{extra}"))
    stale.sync(s, after, opened)
    return effects


def open_(s: SessionState, record: RequestRecord, cx: Ctx) -> list[Effect]:
    """Open ``record`` (rule 1): the caller checked who may ask whom."""
    cycle = find_cycle(s.requests.wait_edges(), (record.sender_id, record.target_id))
    s.requests.put(record)
    request_id = record.request_id
    effects: list[Effect] = [Journal(record=record)]
    if record.task_id is not None:
        line = f"asked {s.name_of(record.target_id)} ({request_id}): {record.question}"
        effects.append(AppendNote(task_id=record.task_id, line=line))
    asker, asked = s.name_of(record.sender_id), s.name_of(record.target_id)
    effects.append(Story(text=f"{asker} asks {asked} (request {request_id})"))
    if record.deadline_at is not None:
        delay = record.deadline_at - cx.now
        effects.append(StartTimer(delay=delay, event=RequestTimeout(request_id=request_id)))
    effects += attach(s, record, cx)
    if cycle is not None:
        effects = told_once_waiting(effects, request_id, _report_cycle(s, request_id, cycle, cx))
    return effects


def attach(s: SessionState, record: RequestRecord, cx: Ctx) -> list[Effect]:
    """The request's task (if open) waits for it: its actor is told."""
    task = s.tasks.get(record.task_id) if record.task_id is not None else None
    if task is None or task.terminal:
        return []
    return [TellTask(task_id=task.task_id, message=Attach(request_id=record.request_id, at=cx.now))]


def _attach_replayed(s: SessionState, record: RequestRecord, cx: Ctx) -> None:
    """The fold's :func:`attach`: no actor runs yet, the record moves here."""
    task = s.tasks.get(record.task_id) if record.task_id is not None else None
    if task is None or task.terminal:
        return
    after = open_request(task, record.request_id, cx.now)
    if after is not task:
        task_moved(s, task, after, cx, opened=record.request_id)


def _report_cycle(s: SessionState, request_id: str, cycle: list[str], cx: Ctx) -> list[Effect]:
    names = tuple(s.name_of(a) for a in cycle)
    shown = " -> ".join(names)
    effects: list[Effect] = [
        Story(text=f"wait cycle: {shown}"),
        Notify(
            note=WaitCycle(
                created_at=cx.now, request_id=request_id, cycle=names, agent_ids=tuple(cycle)
            )
        ),
    ]
    if cycle[0] != PARENT_ID:
        text = (
            f"Your request {request_id} closes a wait cycle {shown}: nobody in it can answer "
            "while waiting. Answer the pending question you hold, or report blocked."
        )
        effects += outbox.notice(s, cx, cycle[0], "wait_cycle", text, request_id)
    return effects


def close(
    s: SessionState,
    request_id: str,
    state: RequestState,
    cx: Ctx,
    *,
    notify_sender: bool = False,
    reply_id: str | None = None,
    why: str | None = None,
    reply_text: str = "",
    approved: bool = False,
    answer: str | None = None,
) -> list[Effect]:
    """Close a request (rule 3); closing one already closed changes nothing. An approval
    records its outcome (``approved``, and ``answer``, else ``why``) and its caller is told
    (:mod:`protocol.session.decisions`)."""
    record = s.requests.get(request_id)
    if record is None:
        return []
    closed, changed = resolve(record, state, cx.now, reply_id=reply_id, reply_text=reply_text)
    if not changed:
        return []
    if closed.kind == "approval":
        closed = decisions.decided(closed, approved, answer if answer is not None else why)
    s.requests.put(closed)
    effects: list[Effect] = [
        Journal(record=closed),
        Story(text=f"request {request_id} {state.value}"),
    ]
    if record.deadline_at is not None:
        effects.append(CancelTimer(key=("reply", request_id)))
    task = s.tasks.get(closed.task_id) if closed.task_id is not None else None
    if task is not None and not task.terminal:  # it may not have reported it waits, yet
        effects.append(TellTask(task_id=task.task_id, message=Detach(request_id=request_id)))
        effects.append(AppendNote(task_id=task.task_id, line=_closed_line(s, closed, why)))
    if closed.kind == "approval":
        return effects + decisions.tell(s, closed, cx)  # its call is told, not its inbox
    if notify_sender and state is not RequestState.REPLIED:
        text = (
            f"Your request {request_id} to {s.name_of(closed.target_id)} was "
            f"{state.value.replace('_', ' ')}" + (f": {why}" if why else ".")
        )
        code = f"request_{state.value}"
        if closed.sender_id == PARENT_ID:
            note = Notice(
                created_at=cx.now,
                code=code,
                text=text,
                agent_id=closed.target_id,
                task_id=closed.task_id,
                refs=(request_id,),
            )
            effects.append(Notify(note=note))
        else:
            effects += outbox.notice(s, cx, closed.sender_id, code, text, request_id)
    return effects


def _closed_line(s: SessionState, closed: RequestRecord, why: str | None) -> str:
    """The task's note line of its request closing: the answer, the approval's outcome, or how
    it closed and why."""
    who, ident = s.name_of(closed.target_id), closed.request_id
    if closed.kind == "approval":
        outcome = "approved" if closed.approved else "denied"
        return f"{who} {outcome} approval {ident}" + (f": {closed.answer}" if closed.answer else "")
    if closed.state is RequestState.REPLIED:
        return f"{who} replied ({ident}): {closed.reply_text}"
    return f"request {ident} to {who} {closed.state.value}" + (f": {why}" if why else "")


def timeout(s: SessionState, event: RequestTimeout, cx: Ctx) -> list[Effect]:
    """The reply deadline passed: the request times out (its sender is told)."""
    return close(s, event.request_id, RequestState.TIMED_OUT, cx, notify_sender=True)


def replay(s: SessionState, record: RequestRecord, cx: Ctx) -> None:
    """A request record read back from the journal: the same moves as when it was written
    (its task waits, or runs again), without telling anyone again."""
    s.requests.put(record)
    if record.pending:
        _attach_replayed(s, record, cx)
        return
    task = s.tasks.get(record.task_id) if record.task_id is not None else None
    if task is not None and not task.terminal:
        after = close_request(task, record.request_id)
        if after is not task:
            task_moved(s, task, after, cx)
