"""What reaches the parent from its agents: envelopes, and what their actors report.

Rules:

1. The transport has authenticated every envelope that gets here (its sender proved its id
   with its capability, for this session) and dropped duplicates: the rules trust the sender
   id. A sender the session does not know is logged and ignored.
2. Every ``message``, ``reply``, ``done`` and ``query`` gets one receipt (accepted, or refused
   with a typed error; a query's carries its answer: :mod:`protocol.session.watchdog_queries`);
   a runtime event gets none. An agent cannot send the parent's kinds (``task``,
   ``ack``, ``control``, ``notice``): refused.
3. **A failure after acceptance is told.** An envelope the parent accepted but could not hand
   to an agent's inbox (the agent exited, its inbox is full) fails the task it carried (and
   the parent hears of it even if nobody watches the task); the request a message opened is
   cancelled (journaled), then its sender is told it was not delivered.
"""

from __future__ import annotations

import msgspec

from protocol.core.errors import ErrorInfo, InvalidArgument, ShepherdError
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.tasks import TaskEvent
from protocol.session import (
    agents,
    approvals,
    outbox,
    requests,
    routing,
    settlement,
    watchdog_queries,
)
from protocol.session.effects import Effect, Log, Notify
from protocol.session.state import Ctx, SessionState
from protocol.wire.envelopes import (
    AnyEnvelope,
    MessageEnvelope,
    QueryEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)

__all__ = ["delivery_failed", "envelope"]


def envelope(s: SessionState, env: AnyEnvelope, cx: Ctx) -> list[Effect]:
    row = s.agents.get(env.sender_id)
    if row is None:
        return [Log(level="warning", text=f"envelope {env.message_id} from unknown sender")]
    row = s.agents[row.agent_id] = msgspec.structs.replace(row, last_active_at=cx.now)
    try:
        match env:
            case RuntimeEnvelope():
                return agents.runtime_event(s, row, env, cx)
            case MessageEnvelope(approval=True):
                request_id, effects = approvals.request(s, row, env, cx)
                return effects + outbox.ack(s, cx, env, request_id=request_id)
            case MessageEnvelope() | ReplyEnvelope():
                receipt, effects = routing.route(s, row.agent_id, env, cx)
                return effects + outbox.ack(s, cx, env, request_id=receipt.request_id)
            case TaskDoneEnvelope():
                return settlement.done(s, row, env, cx)
            case QueryEnvelope():  # a watchdog agent's question: answered by the watchdog
                return watchdog_queries.query(s, row, env, cx)
            case _:
                raise InvalidArgument(f"an agent cannot send {type(env).__name__}")
    except ShepherdError as exc:  # refused before anything changed
        return outbox.ack(s, cx, env, error=exc.info())


def delivery_failed(s: SessionState, env: AnyEnvelope, error: ErrorInfo, cx: Ctx) -> list[Effect]:
    """Rule 3."""
    effects: list[Effect] = []
    if isinstance(env, TaskEnvelope):
        why = f"task could not be delivered: {error.message}"
        record = s.tasks.get(env.task_id)
        if record is not None and not record.terminal:
            effects += settlement.settle(s, env.task_id, TaskEvent.FAIL, cx, error=why)
        text = f"task {env.task_id} to {s.name_of(env.target_id)} failed: {why}"
        note = Notice(
            created_at=cx.now,
            code="not_delivered",
            text=text,
            agent_id=env.target_id,
            task_id=env.task_id,
            refs=(env.task_id,),
        )
        effects.append(Notify(note=note))
    elif isinstance(env, MessageEnvelope | ReplyEnvelope):
        # the request closes (journaled) before its sender hears of it: told is durable
        if isinstance(env, MessageEnvelope) and env.expects_reply:
            effects += requests.close(s, env.message_id, RequestState.CANCELLED, cx)
        if env.sender_id == PARENT_ID:
            text = (
                f"message {env.message_id} to {s.name_of(env.target_id)} could not be "
                f"delivered: {error.message}"
            )
            note = Notice(
                created_at=cx.now,
                code="not_delivered",
                text=text,
                agent_id=env.target_id,
                task_id=env.task_id or _active_task(s, env.target_id),
                refs=(env.message_id,),
            )
            effects.append(Notify(note=note))
        else:
            text = f"message {env.message_id} could not be delivered: {error.message}"
            effects += outbox.notice(s, cx, env.sender_id, "not_delivered", text, env.message_id)
    return effects


def _active_task(s: SessionState, agent_id: str) -> str | None:
    """The task the agent was working on when a message without one was meant for it."""
    row = s.agents.get(agent_id)
    return row.active_task if row is not None else None
