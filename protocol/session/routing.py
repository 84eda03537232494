"""Routing: a message goes from its sender, through the parent, to its target.

Rules:

1. A message is addressed to an agent (by id or name) that is not closed, or to the parent
   (``shepherd``); an agent cannot message itself. Naming a task: it must exist, and an agent
   may name only its own (``forbidden_sender``); naming none, an agent's message belongs to its
   active task. A plain message never changes any task's state.
2. A message with ``expects_reply`` opens a request (:mod:`protocol.session.requests`), unless
   its sender is closed: a message sent before its sender was closed still goes, but no
   request opens (no reply could ever reach a closed agent). A message whose request was
   opened before a parent restart does not open it again.
3. **Only the target replies.** A reply names its request; only the agent the request was sent
   to may answer it, and the answer goes back to the request's sender (who must not be closed).
4. A reply to a request that closed without an answer (timed out, cancelled) is delivered as
   late content (marked ``late`` to the asker; the receipt's ``request_state`` says how the
   request had closed) and changes nothing. A second reply to a request already answered is
   refused (``invalid_transition``, naming the request and its answer): the asker has its
   answer and has moved on, and a second one could be taken for the answer to a newer
   question; the replier can still send it as a plain message. The same reply seen again (a
   redelivery, same message id) gets the same accepted receipt and is not forwarded twice.
5. What is forwarded is checked to fit one envelope, stamped for its target, before anything
   is opened, closed or sent (``limit_exceeded``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.calls import api
from protocol.core.errors import ForbiddenSender, InvalidArgument, InvalidHandle, InvalidTransition
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import AgentMessage
from protocol.records.requests import RequestRecord, RequestState
from protocol.session import outbox, requests
from protocol.session.effects import Answer, Deliver, Effect, Notify, WatchdogInstruction
from protocol.session.state import Ctx, SessionState
from protocol.wire.envelopes import MessageEnvelope, ReplyEnvelope

__all__ = ["parent_message", "route"]

Routed = MessageEnvelope | ReplyEnvelope


def parent_message(s: SessionState, args: api.MessageArgs, cx: Ctx) -> list[Effect]:
    if not args.message.strip():
        raise InvalidArgument("message text is empty")
    common: dict[str, Any] = {
        "message_id": cx.ids.new(IdKind.MESSAGE),
        "session_id": s.session_id,
        "sender_id": PARENT_ID,
        "target_id": args.target,
        "created_at": cx.now,
        "content": args.message,
        "task_id": args.task_id,
        "thread_id": args.thread_id,
        "delivery": "steer" if args.steer else "follow_up",
    }
    env: Routed
    if args.reply_to is not None:
        env = ReplyEnvelope(reply_to=args.reply_to, **common)
    else:
        env = MessageEnvelope(
            expects_reply=args.expects_reply, reply_timeout_s=args.reply_timeout_s, **common
        )
    result, effects = route(s, PARENT_ID, env, cx)
    return [*effects, Answer(value=result)]


def route(
    s: SessionState, sender_id: str, env: Routed, cx: Ctx
) -> tuple[api.MessageResult, list[Effect]]:
    """Route a message or a reply from ``sender_id`` (the parent or an agent)."""
    sender_name = PARENT_ID if sender_id == PARENT_ID else s.agents[sender_id].name
    if isinstance(env, ReplyEnvelope):
        return _reply(s, sender_id, sender_name, env, cx)
    target_id = _target(s, env.target_id)
    if target_id == sender_id:
        raise InvalidArgument("an agent cannot message itself")
    task_id = env.task_id
    if task_id is not None:
        owner = s.tasks.get(task_id)
        if owner is None:
            raise InvalidHandle(f"no task {task_id} in this session")
        if sender_id not in (PARENT_ID, owner.agent_id):
            raise ForbiddenSender(f"task {task_id} belongs to another agent")
    elif sender_id != PARENT_ID:
        task_id = s.agents[sender_id].active_task
    if sender_id != PARENT_ID and s.agents[sender_id].closed and env.expects_reply:
        env = msgspec.structs.replace(env, expects_reply=False)  # rule 2
    forwarded = msgspec.structs.replace(
        env, target_id=target_id, task_id=task_id, sender_name=sender_name, capability=""
    )
    if target_id != PARENT_ID:
        outbox.check_fits(s, forwarded, "the message")
    effects: list[Effect] = []
    request_id: str | None = None
    if env.expects_reply:
        request_id = env.message_id
        if request_id not in s.requests:  # else: opened before a parent restart
            timeout = (
                env.reply_timeout_s
                if env.reply_timeout_s is not None
                else s.settings.default_reply_timeout_s
            )
            record = RequestRecord(
                request_id=request_id,
                sender_id=sender_id,
                target_id=target_id,
                created_at=cx.now,
                question=env.content,
                task_id=task_id,
                thread_id=env.thread_id,
                deadline_at=cx.now + timeout if timeout is not None else None,
            )
            effects += requests.open_(s, record, cx)
    forward = _forward(s, target_id, forwarded, cx)
    if request_id is not None and target_id == PARENT_ID:  # a question to the parent
        effects = requests.told_once_waiting(effects, request_id, forward)
    else:
        effects += forward
    return api.MessageResult(
        message_id=env.message_id, accepted=True, request_id=request_id
    ), effects


def _target(s: SessionState, target: str) -> str:
    if target == PARENT_ID:
        return PARENT_ID
    return s.agent(target, live=True).agent_id


def _reply(
    s: SessionState, sender_id: str, sender_name: str, env: ReplyEnvelope, cx: Ctx
) -> tuple[api.MessageResult, list[Effect]]:
    request = s.requests.get(env.reply_to)
    if request is None:
        raise InvalidHandle(
            f"no request {env.reply_to} in this session (or it closed long ago: only the "
            f"last {s.settings.closed_requests_kept} closed requests are kept)"
        )
    if request.kind == "approval" and sender_id == PARENT_ID:
        raise InvalidArgument(
            f"request {env.reply_to} is an approval request: answer it with approve or deny"
        )
    if request.target_id != sender_id:
        raise ForbiddenSender(
            f"request {env.reply_to} was sent to {s.name_of(request.target_id)}; only it can reply"
        )
    given = _target(s, env.target_id) if env.target_id != request.sender_id else request.sender_id
    if given != request.sender_id:
        raise InvalidArgument(
            f"request {env.reply_to} came from {s.name_of(request.sender_id)}; "
            "a reply goes back to its sender"
        )
    asker = s.agents.get(request.sender_id)
    if asker is not None and asker.closed:
        raise InvalidHandle(
            f"{s.name_of(request.sender_id)} is closed; the reply cannot be delivered"
        )
    if request.state is RequestState.REPLIED:
        if request.reply_id == env.message_id:  # this very reply, seen again
            seen = api.MessageResult(
                message_id=env.message_id,
                accepted=True,
                request_id=request.request_id,
                request_state=RequestState.PENDING.value,
            )
            return seen, []
        raise InvalidTransition(
            f"request {request.request_id} was already answered (reply {request.reply_id}); "
            "a second reply is not delivered. Send it as a new message if it still matters."
        )
    state_before = request.state
    late = not request.pending
    forwarded = msgspec.structs.replace(
        env,
        target_id=request.sender_id,
        task_id=request.task_id,
        thread_id=env.thread_id or request.thread_id,
        sender_name=sender_name,
        late=late,
        capability="",
    )
    if request.sender_id != PARENT_ID:
        outbox.check_fits(s, forwarded, "the reply")  # before the request is closed
    effects: list[Effect] = []
    if not late:
        effects += requests.close(
            s,
            request.request_id,
            RequestState.REPLIED,
            cx,
            reply_id=env.message_id,
            reply_text=env.content,
        )
    effects += _forward(s, request.sender_id, forwarded, cx)
    result = api.MessageResult(
        message_id=env.message_id,
        accepted=True,
        request_id=request.request_id,
        request_state=state_before.value,
    )
    return result, effects


def _forward(s: SessionState, target_id: str, env: Routed, cx: Ctx) -> list[Effect]:
    """Hand ``env`` to its target: the parent's sink, or the agent's inbox."""
    if target_id == PARENT_ID:
        note = AgentMessage(
            created_at=cx.now,
            message_id=env.message_id,
            sender_id=env.sender_id,
            sender_name=env.sender_name,
            content=env.content,
            task_id=env.task_id,
            thread_id=env.thread_id,
            expects_reply=isinstance(env, MessageEnvelope) and env.expects_reply,
            reply_to=env.reply_to if isinstance(env, ReplyEnvelope) else None,
        )
        return [Notify(note=note)]
    return [
        Deliver(agent_id=target_id, envelope=env),
        WatchdogInstruction(
            agent_id=target_id,
            kind="reply" if isinstance(env, ReplyEnvelope) else "message",
            text=env.content,
            task_id=s.agents[target_id].active_task,
            at=cx.now,
        ),
    ]
