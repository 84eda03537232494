"""Message routing and the request table: the broker's messaging half (seed 002 phase 6).

A message goes from its sender, through the parent, to its target (an agent or the parent's
sink). ``expects_reply`` opens a request — journaled, with an optional reply deadline — and
puts the sender's task in ``waiting``; a request that closes a cycle of agents waiting on each
other is reported at once. A reply closes the request (only its target may reply).

A reply to a request that closed without an answer (timed out, cancelled) is delivered as late
content (marked ``late`` to the asker; its receipt's ``request_state`` says how the request
had closed) and changes nothing. A second reply to a request that was already answered is
refused (``invalid_transition``, naming the request and its answer): the asker has its answer
and has moved on, and a second one arriving as a reply could be taken for the answer to a
newer question; the replier can still send it as a plain message. The same reply seen again
(a redelivery, same message id) gets the same accepted receipt and is not forwarded twice.
Mixed into :class:`BrokerActor`, whose state it uses.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec

from actors.broker_state import BrokerState
from actors.messages import (
    CloseRequest,
    Deliver,
    DeliveryFailed,
    OpenRequest,
    RequestTimeout,
    WatchdogInstruction,
)
from actors.runtime import tell_quietly
from protocol import api
from protocol.envelopes import MessageEnvelope, ReplyEnvelope, TaskEnvelope
from protocol.errors import ForbiddenSender, InvalidArgument, InvalidHandle, InvalidTransition
from protocol.ids import PARENT_ID, IdKind
from protocol.notifications import AgentMessage, Notice, WaitCycle
from protocol.requests import RequestRecord, RequestState, resolve
from protocol.tasks import TaskEvent
from protocol.waits import find_cycle

__all__ = ["RoutingMixin"]


class RoutingMixin(BrokerState):
    # ------------------------------------------------------------------ messages

    def _parent_message(self, args: api.MessageArgs) -> api.MessageResult:
        if not args.message.strip():
            raise InvalidArgument("message text is empty")
        now = self.clock.now()
        common: dict[str, Any] = {
            "message_id": self.runtime.ids.new(IdKind.MESSAGE),
            "session_id": self.session_id,
            "sender_id": PARENT_ID,
            "target_id": args.target,
            "created_at": now,
            "content": args.message,
            "task_id": args.task_id,
            "thread_id": args.thread_id,
            "delivery": "steer" if args.steer else "follow_up",
        }
        env: MessageEnvelope | ReplyEnvelope
        if args.reply_to is not None:
            env = ReplyEnvelope(reply_to=args.reply_to, **common)
        else:
            env = MessageEnvelope(
                expects_reply=args.expects_reply, reply_timeout_s=args.reply_timeout_s, **common
            )
        self._seen[env.message_id] = None
        return self._route(PARENT_ID, env)

    def _route(self, sender_id: str, env: MessageEnvelope | ReplyEnvelope) -> api.MessageResult:
        sender_name = PARENT_ID if sender_id == PARENT_ID else self.agents[sender_id].name
        if isinstance(env, ReplyEnvelope):
            return self._route_reply(sender_id, sender_name, env)
        target_id = self._resolve_target(env.target_id)
        if target_id == sender_id:
            raise InvalidArgument("an agent cannot message itself")
        task_id = env.task_id
        if task_id is not None:
            owner = self.tasks.get(task_id)
            if owner is None:
                raise InvalidHandle(f"no task {task_id} in this session")
            if sender_id not in (PARENT_ID, owner.agent_id):
                raise ForbiddenSender(f"task {task_id} belongs to another agent")
        elif sender_id != PARENT_ID:
            task_id = self.agents[sender_id].active_task
        if sender_id != PARENT_ID and self.agents[sender_id].closed and env.expects_reply:
            # sent before its sender was closed: the content still goes, but no request opens
            # (no reply could ever reach a closed agent)
            env = msgspec.structs.replace(env, expects_reply=False)
        if target_id != PARENT_ID and not self.agents[target_id].ref.is_alive():
            raise InvalidHandle(f"agent {self._name(target_id)} has exited")
        forwarded = msgspec.structs.replace(
            env, target_id=target_id, task_id=task_id, sender_name=sender_name, capability=""
        )
        if target_id != PARENT_ID:
            self._check_fits(forwarded, "the message")  # before anything is opened or sent
        request_id: str | None = None
        if env.expects_reply and env.message_id in self.requests:
            request_id = env.message_id  # seen before a parent restart: already open
        elif env.expects_reply:
            request_id = self._open_request(sender_id, target_id, env, task_id)
        if not self._forward(target_id, forwarded):
            if request_id is not None:
                self._close_request(request_id, RequestState.CANCELLED)
            raise InvalidHandle(f"agent {self._name(target_id)} has exited")
        return api.MessageResult(message_id=env.message_id, accepted=True, request_id=request_id)

    def _resolve_target(self, target: str) -> str:
        if target == PARENT_ID:
            return PARENT_ID
        return self._agent(target, live=True).agent_id

    def _route_reply(
        self, sender_id: str, sender_name: str, env: ReplyEnvelope
    ) -> api.MessageResult:
        request = self.requests.get(env.reply_to)
        if request is None:
            raise InvalidHandle(
                f"no request {env.reply_to} in this session (or it closed long ago: only the "
                f"last {self.settings.closed_requests_kept} closed requests are kept)"
            )
        if request.target_id != sender_id:
            raise ForbiddenSender(
                f"request {env.reply_to} was sent to {self._name(request.target_id)}; "
                f"only it can reply"
            )
        given = (
            self._resolve_target(env.target_id)
            if env.target_id != request.sender_id
            else request.sender_id
        )
        if given != request.sender_id:
            raise InvalidArgument(
                f"request {env.reply_to} came from {self._name(request.sender_id)}; "
                "a reply goes back to its sender"
            )
        asker = self.agents.get(request.sender_id)
        if asker is not None and (asker.closed or not asker.ref.is_alive()):
            raise InvalidHandle(
                f"{self._name(request.sender_id)} is closed; the reply cannot be delivered"
            )
        if request.state is RequestState.REPLIED:
            if request.reply_id == env.message_id:  # this very reply, seen again
                return api.MessageResult(
                    message_id=env.message_id,
                    accepted=True,
                    request_id=request.request_id,
                    request_state=RequestState.PENDING.value,
                )
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
            self._check_fits(forwarded, "the reply")  # before the request is closed
        if not late:
            self._close_request(request.request_id, RequestState.REPLIED, reply_id=env.message_id)
        if not self._forward(request.sender_id, forwarded):
            raise InvalidHandle(
                f"{self._name(request.sender_id)} has exited; the reply cannot be delivered"
            )
        return api.MessageResult(
            message_id=env.message_id,
            accepted=True,
            request_id=request.request_id,
            request_state=state_before.value,
        )

    def _name(self, agent_id: str) -> str:
        entry = self.agents.get(agent_id)
        return entry.name if entry else agent_id

    def _forward(self, target_id: str, env: MessageEnvelope | ReplyEnvelope) -> bool:
        """Hand ``env`` to its target; False if the target's actor is already gone."""
        if target_id == PARENT_ID:
            self._sink(
                AgentMessage(
                    created_at=self.clock.now(),
                    message_id=env.message_id,
                    sender_id=env.sender_id,
                    sender_name=env.sender_name,
                    content=env.content,
                    task_id=env.task_id,
                    thread_id=env.thread_id,
                    expects_reply=isinstance(env, MessageEnvelope) and env.expects_reply,
                    reply_to=env.reply_to if isinstance(env, ReplyEnvelope) else None,
                )
            )
            return True
        if not tell_quietly(self.agents[target_id].ref, Deliver(envelope=env)):
            return False
        self._observe(
            WatchdogInstruction(
                agent_id=target_id,
                kind="reply" if isinstance(env, ReplyEnvelope) else "message",
                text=env.content,
                task_id=self.agents[target_id].active_task,
                at=self.clock.now(),
            )
        )
        return True

    # ------------------------------------------------------------------ requests

    def _open_request(
        self, sender_id: str, target_id: str, env: MessageEnvelope, task_id: str | None
    ) -> str:
        cycle = find_cycle(self.requests.wait_edges(), (sender_id, target_id))
        now = self.clock.now()
        timeout = (
            env.reply_timeout_s
            if env.reply_timeout_s is not None
            else self.settings.default_reply_timeout_s
        )
        record = RequestRecord(
            request_id=env.message_id,
            sender_id=sender_id,
            target_id=target_id,
            created_at=now,
            question=env.content,
            task_id=task_id,
            thread_id=env.thread_id,
            deadline_at=now + timeout if timeout is not None else None,
        )
        self.requests.put(record)
        self._journal.append(record)
        if task_id is not None and self._notes is not None:
            with contextlib.suppress(OSError):
                self._notes.append(
                    task_id, f"asked {self._name(target_id)} ({record.request_id}): {env.content}"
                )
        if cycle is not None:
            self._report_cycle(record.request_id, cycle)
        self._story(
            f"{self._name(sender_id)} asks {self._name(target_id)} (request {record.request_id})"
        )
        if timeout is not None:
            request_id = record.request_id
            self._request_timers[request_id] = self.clock.call_later(
                timeout, lambda: tell_quietly(self.actor_ref, RequestTimeout(request_id=request_id))
            )
        if task_id is not None and task_id not in self.results:
            ref = self._task_refs.get(task_id)
            if ref is not None:
                tell_quietly(ref, OpenRequest(request_id=record.request_id))
        return record.request_id

    def _report_cycle(self, request_id: str, cycle: list[str]) -> None:
        names = tuple(self._name(a) for a in cycle)
        self._story(f"wait cycle: {' -> '.join(names)}")
        self._sink(
            WaitCycle(
                created_at=self.clock.now(),
                request_id=request_id,
                cycle=names,
                agent_ids=tuple(cycle),
            )
        )
        if cycle[0] != PARENT_ID:
            self._send_notice(
                cycle[0],
                "wait_cycle",
                f"Your request {request_id} closes a wait cycle {' -> '.join(names)}: "
                "nobody in it can answer while waiting. Answer the pending question you hold, "
                "or report blocked.",
                request_id,
            )

    def _close_request(
        self,
        request_id: str,
        state: RequestState,
        *,
        notify_sender: bool = False,
        reply_id: str | None = None,
        why: str | None = None,
    ) -> None:
        record = self.requests.get(request_id)
        if record is None:
            return
        closed, changed = resolve(record, state, self.clock.now(), reply_id=reply_id)
        if not changed:
            return
        self.requests.put(closed)
        self._journal.append(closed)
        self._story(f"request {request_id} {state.value}")
        timer = self._request_timers.pop(request_id, None)
        if timer is not None:
            timer.cancel()
        if closed.task_id is not None:
            ref = self._task_refs.get(closed.task_id)
            if ref is not None:
                tell_quietly(ref, CloseRequest(request_id=request_id))
        if notify_sender and state is not RequestState.REPLIED:
            text = (
                f"Your request {request_id} to {self._name(closed.target_id)} was "
                f"{state.value.replace('_', ' ')}" + (f": {why}" if why else ".")
            )
            if closed.sender_id == PARENT_ID:
                self._sink(
                    Notice(
                        created_at=self.clock.now(),
                        code=f"request_{state.value}",
                        text=text,
                        refs=(request_id,),
                    )
                )
            else:
                self._send_notice(closed.sender_id, f"request_{state.value}", text, request_id)

    def _delivery_failed(self, msg: DeliveryFailed) -> None:
        env = msg.envelope
        if isinstance(env, TaskEnvelope):
            why = f"task could not be delivered: {msg.error.message}"
            self._settle_task_now(env.task_id, TaskEvent.FAIL, why)
            # the parent hears of it even if nobody watches the task
            self._sink(
                Notice(
                    created_at=self.clock.now(),
                    code="not_delivered",
                    text=f"task {env.task_id} to {self._name(env.target_id)} failed: {why}",
                    refs=(env.task_id,),
                )
            )
        elif isinstance(env, MessageEnvelope | ReplyEnvelope):
            if env.sender_id == PARENT_ID:
                self._sink(
                    Notice(
                        created_at=self.clock.now(),
                        code="not_delivered",
                        text=f"message {env.message_id} to {self._name(env.target_id)} "
                        f"could not be delivered: {msg.error.message}",
                        refs=(env.message_id,),
                    )
                )
            else:
                self._send_notice(
                    env.sender_id,
                    "not_delivered",
                    f"message {env.message_id} could not be delivered: {msg.error.message}",
                    env.message_id,
                )
            if isinstance(env, MessageEnvelope) and env.expects_reply:
                self._close_request(env.message_id, RequestState.CANCELLED, notify_sender=False)
