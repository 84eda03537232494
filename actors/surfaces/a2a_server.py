"""An A2A front door: ``shepherd a2a --listen HOST:PORT`` serves a running session over the
A2A protocol (v1.0, JSON-RPC binding), so any A2A client can give its agents tasks.

The protocol is the ``a2a-sdk`` package's (the ``a2a`` extra): its JSON-RPC dispatcher, its
Server-Sent Events, its types and its typed errors. What is written here is the mapping of
each A2A method onto the session's operations (:class:`ShepherdHandler`, an a2a-sdk
``RequestHandler``), the Agent Card, and the guard in front of both (the bearer token and the
body bound). The session stays the only record of every task: nothing here keeps a task
store, so a task delegated from the command line is as visible as one sent over A2A, and a
restarted front door loses nothing but the client messages it kept for ``history``.

Rules:

1. **One card, one skill per agent.** The Agent Card (``/.well-known/agent-card.json``) is the
   session's; each live (not closed) agent is one skill whose id is the agent's name. A
   message names its agent by ``metadata.agent`` (name or id), else by its ``contextId``: the
   context of a task is its agent's id, so a client continues with the same agent by reusing
   the context. A message that names no agent, or an unknown one, is refused with
   ``InvalidParamsError`` (its data says ``agent_required`` / ``invalid_handle``).
2. **The methods.** ``SendMessage`` delegates (the message's text parts, joined, are the task;
   other parts are refused); it waits until the task is terminal or needs input, unless
   ``returnImmediately``. A message naming an open task is a follow-up to its agent; naming an
   ``INPUT_REQUIRED`` task it answers the question (:func:`protocol.a2a.question_to_answer`);
   naming a terminal task it is a NEW task for the same agent (or the one it names), whose
   message lists the old task in ``referenceTaskIds``: a terminal task never restarts.
   ``GetTask`` and ``ListTasks`` read ``status`` / ``result``; ``CancelTask`` is ``cancel``
   (a terminal task is ``TaskNotCancelableError``); ``SendStreamingMessage`` and
   ``SubscribeToTask`` stream the task (a ``Task`` first, then each change of its state) until
   it is terminal; subscribing to a terminal task is ``UnsupportedOperationError``, as the
   SDK's own handler says. Push notifications are not offered.
3. **States** are :mod:`protocol.a2a`'s. A completed task's summary is its artifact
   ``summary``; every settled task's summary or error is its status message; a failed or
   timed-out one says ``error.type`` in its metadata.
4. **Following a task** (streams and waiting sends): the tasks followed are watched (their
   completions reach the parent's notifications too: this front door is a parent of the
   session); one refresh loop asks the session for their state when the notifications file
   grows (a question to the parent, a completion) and at least every
   :data:`~protocol.limits.A2A_REFRESH_S`, and hands each change to each follower. A client
   that goes away ends its follow at once, a stream's or a waiting send's (the guard watches
   for the disconnect): no thread is kept for it (the session's calls run on the event
   loop's worker threads, each bounded by its own timeout). At most
   :data:`~protocol.limits.MAX_A2A_STREAMS` follow at once; one more is refused. A stop
   (SIGTERM, SIGINT) ends every follow at once with a typed error.
5. **Guard.** Every request, the card included, needs ``Authorization: Bearer TOKEN``: a
   token made at start, printed once and written (mode 0600) to ``a2a.token`` in the session
   directory, removed at a clean stop. Without it: HTTP 401. A body over
   :data:`~protocol.limits.MAX_A2A_REQUEST_BYTES` is refused before it is read whole (the
   SDK's ``InvalidRequestError``, "Payload too large"). The listening address must be a
   loopback one unless ``--allow-remote`` says otherwise.
6. **Errors.** A refusal of the session is an A2A error whose ``data`` holds the Shepherd
   ``code``: a refused argument ``InvalidParamsError``, a session that cannot be reached
   ``InternalError``; a task id the session does not know is ``TaskNotFoundError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import signal
import socket
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler, build_error_response
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import PROTOCOL_VERSION_1_0
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.applications import Starlette

from actors.records.session_info import SessionInfo
from actors.runtime.log import logger
from actors.surfaces.cli_ops import ANSWER_TIMEOUT_S
from actors.surfaces.client import Client
from protocol import a2a, ops
from protocol.envelopes import nested_deeper
from protocol.errors import InvalidArgument, SessionUnavailable, ShepherdError
from protocol.limits import (
    A2A_FILE_POLL_S,
    A2A_REFRESH_S,
    MAX_A2A_REQUEST_BYTES,
    MAX_A2A_STREAMS,
    MAX_NESTING,
)

__all__ = ["TOKEN_FILE", "FrontDoor", "ShepherdHandler", "build_app", "check_listen", "serve"]

#: the token's file in the session directory
TOKEN_FILE = "a2a.token"
#: client messages kept for ``history`` (the newest; the session keeps the task's text)
_KEPT_MESSAGES = 1000
_Asgi = Callable[[Any, Any, Any], Awaitable[None]]


# ---------------------------------------------------------------------- the session's view


@dataclass
class Seen:
    """One task as the session last told it."""

    task_id: str
    agent_id: str
    agent_name: str
    state: str
    pending: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    since: float | None = None

    @property
    def a2a_state(self) -> str:
        return a2a.a2a_state(self.state, self.pending, self.result)


def _a2a_error(exc: ShepherdError) -> A2AError:
    """Rule 6."""
    data = {"code": exc.code}
    if isinstance(exc, SessionUnavailable):
        return InternalError(exc.message, data)
    return InvalidParamsError(exc.message, data)


class FrontDoor:
    """The session's side: its calls (off the event loop), and the tasks' state."""

    def __init__(self, info: SessionInfo) -> None:
        self.info = info
        self._client = Client(info)

    async def call(self, op: str, fields: Mapping[str, Any]) -> Any:
        """Run ``op`` in the session, its arguments checked against its Args Struct first (the
        bounds of :mod:`protocol.limits`); a refusal is the A2A error of rule 6."""
        try:
            ops.parent_op(op).build(fields)
            return await asyncio.to_thread(
                self._client.call, op, dict(fields), timeout=ANSWER_TIMEOUT_S
            )
        except ShepherdError as exc:
            raise _a2a_error(exc) from None

    async def agents(self) -> list[dict[str, Any]]:
        """Every agent of the session (all of ``status``'s pages)."""
        found: list[dict[str, Any]] = []
        cursor: int | None = 0
        while cursor is not None:
            page = await self.call("status", {"cursor": cursor})
            found += page.get("agents", [])
            cursor = page.get("next_cursor")
        return found

    async def look(self, ids: list[str]) -> dict[str, Seen]:
        """The tasks named, as the session has them; an unknown id is left out. An open task
        is always its agent's active one, so ``status`` shows it; one it does not show is
        settled (``result``) or unknown."""
        wanted = set(ids)
        seen: dict[str, Seen] = {}
        for row in await self.agents():
            task = row.get("task")
            if not task or task["task_id"] not in wanted or task.get("result"):
                continue
            seen[task["task_id"]] = Seen(
                task_id=task["task_id"],
                agent_id=row["agent_id"],
                agent_name=row["name"],
                state=task["state"],
                pending=list(task.get("pending_requests", ())),
                since=task.get("waiting_since") or task.get("created_at"),
            )
        for task_id in ids:
            if task_id in seen:
                continue
            result = await self.call("result", {"task_id": task_id})
            if result is not None:
                seen[task_id] = Seen(
                    task_id=task_id,
                    agent_id=result["agent_id"],
                    agent_name=result.get("agent_name") or result["agent_id"],
                    state=result["status"],
                    result=result,
                    since=result.get("completed_at"),
                )
        return seen

    async def one(self, task_id: str) -> Seen:
        seen = (await self.look([task_id])).get(task_id)
        if seen is None:
            raise TaskNotFoundError(
                f"no task {task_id} in this session", {"code": "invalid_handle"}
            )
        return seen


# ---------------------------------------------------------------------- A2A objects


def _text_message(text: str, task: Seen, message_id: str) -> pb.Message:
    return pb.Message(
        message_id=message_id,
        context_id=task.agent_id,
        task_id=task.task_id,
        role=pb.Role.ROLE_AGENT,
        parts=[pb.Part(text=text)],
    )


def _status(task: Seen) -> pb.TaskStatus:
    status = pb.TaskStatus(state=pb.TaskState.Value(task.a2a_state))
    if task.since is not None:
        status.timestamp.FromNanoseconds(int(task.since * 1e9))
    result = task.result
    if result is not None:
        text = result.get("text") or result.get("error") or result["status"]
        status.message.CopyFrom(_text_message(str(text), task, f"{task.task_id}-result"))
    elif (question := a2a.question_to_answer(task.pending)) is not None:
        status.message.CopyFrom(
            _text_message(question.get("question", ""), task, question["request_id"])
        )
    return status


def _metadata(task: Seen) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "agent": task.agent_name,
        "agentId": task.agent_id,
        "shepherdState": task.state,
    }
    if task.result is not None:
        meta["returnCode"] = task.result.get("return_code")
        if (error := a2a.error_metadata(task.result)) is not None:
            meta["error"] = error
    pending = [r for r in task.pending if r.get("target_id") == "shepherd"]
    if pending:
        meta["pendingRequests"] = [
            {"requestId": r["request_id"], "kind": r.get("kind", "question")} for r in pending
        ]
    return meta


def _summary(task: Seen) -> pb.Artifact | None:
    result = task.result
    if result is None or result["status"] != "completed" or not result.get("text"):
        return None
    return pb.Artifact(
        artifact_id=f"{task.task_id}-summary",
        name="summary",
        description="the agent's summary of its completed task",
        parts=[pb.Part(text=str(result["text"]))],
    )


def task_object(task: Seen, history: list[pb.Message] | None = None) -> pb.Task:
    """The A2A ``Task`` of a Shepherd task (rule 3)."""
    out = pb.Task(id=task.task_id, context_id=task.agent_id, status=_status(task))
    out.metadata.update(_metadata(task))
    if (artifact := _summary(task)) is not None:
        out.artifacts.append(artifact)
    if history:
        out.history.extend(history)
    return out


def _key(task: pb.Task) -> bytes:
    """What a follower is told again only when it changed (not the timestamp)."""
    same = pb.Task(
        status=pb.TaskStatus(state=task.status.state, message=task.status.message),
        metadata=task.metadata,
        artifacts=task.artifacts,
    )
    key: bytes = same.SerializeToString(deterministic=True)
    return key


# ---------------------------------------------------------------------- following tasks


class _Follower:
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.queue: asyncio.Queue[pb.Task | A2AError] = asyncio.Queue()
        self.told: bytes | None = None


def _stopping() -> A2AError:
    return InternalError(
        "shepherd a2a is stopping; the task goes on in the session (GetTask it later)",
        {"code": "session_unavailable"},
    )


class Monitor:
    """Rule 4: one refresh loop for every task followed."""

    def __init__(self, door: FrontDoor) -> None:
        self._door = door
        self._followers: list[_Follower] = []
        self._watched: set[str] = set()
        self._kick = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    def stop_soon(self) -> None:
        """The front door is stopping (called from a signal handler): every follow ends now
        with a typed error, and none starts, so no client waits out the server's grace."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._end_all)

    def _end_all(self) -> None:
        self._stopping = True
        for f in self._followers:
            f.queue.put_nowait(_stopping())

    async def run(self) -> None:
        size = -1
        last = 0.0
        loop = self._loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), A2A_FILE_POLL_S)
            kicked = self._kick.is_set()
            self._kick.clear()
            if not self._followers:
                continue
            try:
                now_size = os.stat(self._door.info.notifications).st_size
            except OSError:
                now_size = size
            if kicked or now_size != size or loop.time() - last >= A2A_REFRESH_S:
                size, last = now_size, loop.time()
                await self._refresh()

    async def _refresh(self) -> None:
        followers = list(self._followers)
        ids = list(dict.fromkeys(f.task_id for f in followers))
        failed: dict[str, A2AError] = {}
        try:
            for task_id in ids:
                if task_id not in self._watched:
                    try:
                        await self._door.call("watch", {"ids": [task_id]})
                    except InvalidParamsError as exc:  # this task's alone
                        failed[task_id] = exc
                        continue
                    self._watched.add(task_id)
            seen = await self._door.look([t for t in ids if t not in failed])
        except Exception as exc:  # the session's (or a bug): every follower is told
            if not isinstance(exc, A2AError):
                logger.opt(exception=True).error("refreshing the followed tasks failed")
                exc = InternalError(f"refreshing the task failed: {exc!r}")
            for f in followers:
                f.queue.put_nowait(exc)
            return
        for f in followers:
            task = seen.get(f.task_id)
            if task is None:
                f.queue.put_nowait(
                    failed.get(f.task_id)
                    or TaskNotFoundError(f"no task {f.task_id} in this session")
                )
                continue
            obj = task_object(task)
            if task.a2a_state in a2a.TERMINAL:
                self._watched.discard(task.task_id)  # its watcher is used up
            key = _key(obj)
            if key != f.told:
                f.told = key
                f.queue.put_nowait(obj)

    def kick(self) -> None:
        """Refresh now (a change this front door made)."""
        self._kick.set()

    async def follow(self, task_id: str) -> AsyncIterator[pb.Task]:
        """The task now, then each change of it, until it is terminal (ends the iteration)."""
        if self._stopping:
            raise _stopping()
        if len(self._followers) >= MAX_A2A_STREAMS:
            raise InvalidRequestError(
                f"{MAX_A2A_STREAMS} requests already follow tasks here; poll with GetTask",
                {"code": "limit_exceeded"},
            )
        follower = _Follower(task_id)
        self._followers.append(follower)
        self._kick.set()
        try:
            while True:
                item = await follower.queue.get()
                if isinstance(item, A2AError):
                    raise item
                yield item
                if pb.TaskState.Name(item.status.state) in a2a.TERMINAL:
                    return
        finally:
            self._followers.remove(follower)


# ---------------------------------------------------------------------- the handler


def _text_of(message: pb.Message) -> str:
    texts: list[str] = []
    for part in message.parts:
        if part.WhichOneof("content") != "text":
            raise InvalidParamsError(
                "only text parts are taken: the task is their text", {"code": "invalid_argument"}
            )
        texts.append(part.text)
    text = "\n".join(texts)
    if not text.strip():
        raise InvalidParamsError("the message has no text", {"code": "invalid_argument"})
    return text


def _named_agent(message: pb.Message) -> str | None:
    value = message.metadata.fields.get("agent")
    if value is not None and value.WhichOneof("kind") != "string_value":
        raise InvalidParamsError("metadata.agent must be a string", {"code": "invalid_argument"})
    return (value.string_value if value is not None else "") or message.context_id or None


class ShepherdHandler(RequestHandler):
    """The A2A methods over the session (rules 1-3 and 6)."""

    def __init__(self, door: FrontDoor, monitor: Monitor) -> None:
        self.door = door
        self.monitor = monitor
        self._sent: OrderedDict[str, pb.Message] = OrderedDict()

    # --------------------------------------------------------------- sending

    async def _send(self, params: pb.SendMessageRequest) -> tuple[Seen, pb.Message]:
        """Deliver the message: a new task, a follow-up, or an answer (rule 2); the task it
        concerns, and the message as the task's history keeps it."""
        message = pb.Message()
        message.CopyFrom(params.message)
        text = _text_of(message)
        if not message.message_id:
            message.message_id = uuid.uuid4().hex
        message.role = pb.Role.ROLE_USER
        agent = _named_agent(message)
        if message.task_id:
            task = await self.door.one(message.task_id)
            if task.a2a_state in a2a.TERMINAL:  # never restarted: a new task refers to it
                references = [task.task_id, *message.reference_task_ids]
                del message.reference_task_ids[:]
                message.reference_task_ids.extend(dict.fromkeys(references))
                return await self._delegate(agent or task.agent_id, text, message), message
            if agent is not None and agent not in (task.agent_id, task.agent_name):
                raise InvalidParamsError(
                    f"task {task.task_id} is {task.agent_name}'s, not {agent}'s",
                    {"code": "invalid_argument"},
                )
            question = a2a.question_to_answer(task.pending)
            fields: dict[str, Any] = {
                "target": task.agent_id,
                "message": text,
                "task_id": task.task_id,
            }
            if question is not None:
                fields["reply_to"] = question["request_id"]
                message.metadata.update({"replyTo": question["request_id"]})
            elif task.a2a_state == a2a.INPUT_REQUIRED:
                raise InvalidParamsError(
                    f"task {task.task_id} waits for an approval: answer it with shepherd "
                    "approve or deny",
                    {"code": "invalid_argument"},
                )
            await self.door.call("message", fields)
            message.context_id = task.agent_id
            return task, message
        if agent is None:
            raise InvalidParamsError(
                "name the agent: metadata.agent (a skill id of the Agent Card), or the "
                "contextId of an earlier task of it",
                {"code": "agent_required"},
            )
        return await self._delegate(agent, text, message), message

    async def _delegate(self, agent: str, text: str, message: pb.Message) -> Seen:
        given = await self.door.call("delegate", {"target": agent, "task": text})
        task_id = given["task_id"]
        message.task_id = task_id
        message.context_id = given["agent_id"]
        self._sent[task_id] = message
        while len(self._sent) > _KEPT_MESSAGES:
            self._sent.popitem(last=False)
        return await self.door.one(task_id)

    def _history(self, task_id: str, length: int | None = None) -> list[pb.Message]:
        kept = self._sent.get(task_id)
        if kept is None or length == 0:
            return []
        return [kept]

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task | pb.Message:
        task, message = await self._send(params)
        history = [message]
        if params.configuration.return_immediately:
            return task_object(await self.door.one(task.task_id), history)
        # the question this message answered is not one to stop at (a snapshot taken as the
        # answer arrived may still show it)
        answered = message.metadata.fields.get("replyTo")
        last: pb.Task | None = None
        async for last in self.monitor.follow(task.task_id):
            state = pb.TaskState.Name(last.status.state)
            if state == a2a.INPUT_REQUIRED and (
                answered is None or last.status.message.message_id != answered.string_value
            ):
                break
        assert last is not None
        last.history.extend(history)
        return last

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        task, message = await self._send(params)
        async for event in self._stream(task.task_id, [message]):
            yield event

    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        task = await self.door.one(params.id)
        if task.a2a_state in a2a.TERMINAL:
            raise UnsupportedOperationError(
                f"task {task.task_id} is in a terminal state ({task.state}): nothing more to "
                "stream; GetTask has its result"
            )
        async for event in self._stream(task.task_id, self._history(task.task_id)):
            yield event

    async def _stream(self, task_id: str, history: list[pb.Message]) -> AsyncIterator[Any]:
        """A ``Task`` first, then a status update per change; a completed task's summary as
        an artifact update before its final status."""
        first = True
        async for obj in self.monitor.follow(task_id):
            if first:
                first = False
                obj.history.extend(history)
                yield obj
                continue
            for artifact in obj.artifacts:
                yield pb.TaskArtifactUpdateEvent(
                    task_id=obj.id, context_id=obj.context_id, artifact=artifact, last_chunk=True
                )
            yield pb.TaskStatusUpdateEvent(
                task_id=obj.id, context_id=obj.context_id, status=obj.status, metadata=obj.metadata
            )

    # --------------------------------------------------------------- reading, cancelling

    async def on_get_task(self, params: pb.GetTaskRequest, context: ServerCallContext) -> pb.Task:
        task = await self.door.one(params.id)
        length = params.history_length if params.HasField("history_length") else None
        return task_object(task, self._history(task.task_id, length))

    async def on_list_tasks(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        """Each agent's task as ``status`` shows it (its active one, else its newest),
        newest first; filtered by ``contextId`` (the agent's id) and ``status``."""
        rows = [r for r in await self.door.agents() if r.get("task")]
        if params.context_id:
            rows = [r for r in rows if r["agent_id"] == params.context_id]
        tasks: list[pb.Task] = []
        for row in rows:
            task = row["task"]
            seen = Seen(
                task_id=task["task_id"],
                agent_id=row["agent_id"],
                agent_name=row["name"],
                state=task["state"],
                pending=list(task.get("pending_requests", ())),
                result=task.get("result"),
                since=task.get("waiting_since") or task.get("created_at"),
            )
            obj = task_object(seen)
            if params.status and obj.status.state != params.status:
                continue
            if not params.include_artifacts:
                del obj.artifacts[:]
            tasks.append(obj)
        tasks.sort(key=lambda t: t.status.timestamp.ToNanoseconds(), reverse=True)
        size = params.page_size if params.HasField("page_size") else 50
        try:
            start = int(params.page_token or 0)
        except ValueError:
            raise InvalidParamsError(
                f"pageToken {params.page_token!r} is not one this server gave",
                {"code": "invalid_argument"},
            ) from None
        if not 1 <= size <= 100 or start < 0:
            raise InvalidParamsError(
                "pageSize must be 1 to 100, pageToken one this server gave",
                {"code": "invalid_argument"},
            )
        page = tasks[start : start + size]
        more = start + size < len(tasks)
        return pb.ListTasksResponse(
            tasks=page,
            next_page_token=str(start + size) if more else "",
            page_size=size,
            total_size=len(tasks),
        )

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task:
        task = await self.door.one(params.id)
        if task.a2a_state in a2a.TERMINAL:
            raise TaskNotCancelableError(
                f"task {task.task_id} is already {task.state}", {"code": "already_settled"}
            )
        answer = await self.door.call(
            "cancel", {"task_id": task.task_id, "reason": "cancelled by an A2A client"}
        )
        if answer.get("already_settled"):
            raise TaskNotCancelableError(
                f"task {task.task_id} settled first: {answer.get('status')}",
                {"code": "already_settled"},
            )
        self.monitor.kick()
        return task_object(await self.door.one(task.task_id), self._history(task.task_id))

    # --------------------------------------------------------------- not offered

    async def on_create_task_push_notification_config(
        self, params: pb.TaskPushNotificationConfig, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: pb.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: pb.ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: pb.DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: pb.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> pb.AgentCard:
        raise ExtendedAgentCardNotConfiguredError


# ---------------------------------------------------------------------- the card


def agent_card(url: str, info: SessionInfo, agents: list[dict[str, Any]]) -> pb.AgentCard:
    """Rule 1: the session's card, a skill per live agent."""
    card = pb.AgentCard(
        name=f"Shepherd session {info.session_id}",
        description=(
            "A team of agent processes supervised by Shepherd. Each skill is one agent: name "
            "it in the message's metadata.agent (or continue in the contextId of its earlier "
            "task). A task ends only when its agent says done."
        ),
        version=_version(),
        supported_interfaces=[
            pb.AgentInterface(
                url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(
        pb.HTTPAuthSecurityScheme(
            scheme="Bearer", description=f"the token in the session directory's {TOKEN_FILE}"
        )
    )
    requirement = card.security_requirements.add()
    requirement.schemes["bearer"].SetInParent()
    for row in agents:
        if row.get("closed"):
            continue
        card.skills.append(
            pb.AgentSkill(
                id=row["name"],
                name=row["name"],
                description=(
                    f"Shepherd agent {row['name']} ({row['adapter']} adapter, agent id "
                    f"{row['agent_id']}): give it a task by naming it in metadata.agent"
                ),
                tags=["shepherd", row["adapter"]],
            )
        )
    return card


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shepherd")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


# ---------------------------------------------------------------------- the guard


def _answer(status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> list[Any]:
    return [
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        },
        {"type": "http.response.body", "body": body},
    ]


class Guard:
    """Rule 5, as ASGI middleware in front of every route: the token, then the request's
    bounds, all in this one place: a body is read up to :data:`MAX_A2A_REQUEST_BYTES` (a
    longer one, or one that says it is, is refused unread) and its JSON may nest
    :data:`~protocol.limits.MAX_NESTING` levels (the SDK's parser would otherwise recurse
    until Python's limit). Refusals of a frame are the SDK's JSON-RPC ``InvalidRequestError``;
    a body that is not JSON is left to the SDK, which says so (``JSONParseError``)."""

    def __init__(self, app: _Asgi, token: str) -> None:
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
            body = json.dumps(
                {
                    "error": {
                        "code": "unauthorized",
                        "message": "every request needs Authorization: Bearer TOKEN (the "
                        f"token is in the session directory's {TOKEN_FILE})",
                    }
                }
            ).encode()
            for part in _answer(401, body, ((b"www-authenticate", b'Bearer realm="shepherd"'),)):
                await send(part)
            return
        if scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        body_or_why = await self._read(headers.get(b"content-length"), receive)
        if isinstance(body_or_why, str):
            refusal = build_error_response(None, InvalidRequestError(message=body_or_why))
            for part in _answer(200, json.dumps(refusal).encode()):
                await send(part)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:  # the body was given whole: what follows is the client leaving
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body_or_why, "more_body": False}

        # a client that leaves ends what it waits on: a stream's own listener sees it too,
        # but a waiting SendMessage reads nothing more of its request, so it is watched here
        async with anyio.create_task_group() as group:

            async def until_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(until_gone)
            await self._app(scope, replay, send)
            group.cancel_scope.cancel()

    @staticmethod
    async def _read(declared: bytes | None, receive: Any) -> bytes | str:
        """The body, or why it is refused."""
        too_big = f"Payload too large: a request body is at most {MAX_A2A_REQUEST_BYTES} bytes"
        if declared is not None and (
            not declared.isdigit() or int(declared) > MAX_A2A_REQUEST_BYTES
        ):
            return too_big
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return "the client left before its request was read"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_A2A_REQUEST_BYTES:
                return too_big
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            frame = msgspec.json.decode(body)
        except RecursionError:
            return f"the request nests more than {MAX_NESTING} levels deep"
        except msgspec.DecodeError:
            return body  # the SDK answers it with its parse error
        if nested_deeper(frame, MAX_NESTING):
            return f"the request nests more than {MAX_NESTING} levels deep"
        return body


# ---------------------------------------------------------------------- the app


def build_app(info: SessionInfo, token: str, url: str) -> tuple[Guard, Monitor]:
    """The front door's ASGI app (the SDK's routes behind :class:`Guard`) and its monitor."""
    door = FrontDoor(info)
    monitor = Monitor(door)
    handler = ShepherdHandler(door, monitor)
    base = agent_card(url, info, [])

    async def current(card: pb.AgentCard) -> pb.AgentCard:
        try:
            return agent_card(url, info, await door.agents())
        except A2AError:  # the session is gone or not answering: a card without skills
            return card

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        running = asyncio.create_task(monitor.run(), name="a2a-monitor")
        try:
            yield
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    routes = [
        *create_agent_card_routes(base, card_modifier=current),
        *create_jsonrpc_routes(handler, rpc_url="/"),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), token), monitor


def check_listen(listen: str, *, allow_remote: bool) -> tuple[str, int]:
    """``--listen HOST:PORT``: a loopback address (IPv4, ``[IPv6]`` or ``localhost``) unless
    ``allow_remote``; port 0 picks a free one. ``invalid_argument`` naming what is wrong."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidArgument(f"a2a: --listen must be HOST:PORT (port 0-65535), got {listen!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host == "localhost":
        loopback = True
    else:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            if not allow_remote:
                raise InvalidArgument(
                    f"a2a: --listen {host!r} is not an IP address: give a loopback one "
                    "(127.0.0.1), or --allow-remote to listen elsewhere"
                ) from None
            loopback = False
    if not loopback and not allow_remote:
        raise InvalidArgument(
            f"a2a: --listen {host} is not a loopback address: only this host could reach the "
            "session safely; --allow-remote listens there anyway (the token still guards it)"
        )
    return host, int(port_text)


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, whose stop also ends the follows at once (rule 4)."""

        def __init__(self, config: uvicorn.Config, monitor: Monitor) -> None:
            super().__init__(config)
            self._monitor = monitor

        def handle_exit(self, sig: int, frame: Any) -> None:
            self._monitor.stop_soon()
            super().handle_exit(sig, frame)

    return Server


def _write_token(session_dir: Path, token: str) -> Path:
    """The token, mode 0600 from its creation (never readable by others for a moment)."""
    path = session_dir / TOKEN_FILE
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return path


def serve(
    session: str | None, listen: str, *, allow_remote: bool = False, json_out: bool = False
) -> int:
    """``shepherd a2a``: serve until SIGTERM or SIGINT (uvicorn's own handlers stop it
    cleanly: the streams end, the monitor stops, the token file goes)."""
    import uvicorn

    from actors.surfaces.client import find_session, session_alive

    host, port = check_listen(listen, allow_remote=allow_remote)
    level = os.environ.get("SHEPHERD_LOG_LEVEL", "WARNING").upper()
    logger.enable("actors")
    logger.remove()
    logger.add(sys.stderr, level=level)
    # the SDK logs every refused request (with a traceback for a malformed one): the client
    # was answered with its typed error, so only SHEPHERD_LOG_LEVEL=DEBUG or INFO shows them
    logging.getLogger("a2a").setLevel(level if level in ("DEBUG", "INFO") else "CRITICAL")

    def announce(text: str) -> None:
        sys.stderr.write(f"shepherd: {text}\n")

    info = find_session(session, announce=announce)
    if not session_alive(info):
        raise SessionUnavailable(f"the session at {info.session_dir} has ended")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgument(f"a2a: cannot listen on {listen}: {exc.strerror or exc}") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}/"
    token = secrets.token_urlsafe(32)
    token_path = _write_token(Path(info.session_dir), token)
    try:
        app, monitor = build_app(info, token, url)
        header = {
            "url": url,
            "token": token,
            "token_file": str(token_path),
            "session_dir": str(info.session_dir),
            "pid": os.getpid(),
        }
        if json_out:
            sys.stdout.write(msgspec.json.encode({"a2a": header}).decode() + "\n")
        else:
            sys.stdout.write(f"a2a {url}\ntoken {token}\ntoken file {token_path}\n")
        sys.stdout.flush()
        config = uvicorn.Config(
            app,
            log_level=level.lower(),
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        # uvicorn stops on SIGTERM and SIGINT, then raises the signal again for the handler
        # it found: this one takes it, so a signal is a clean stop (status 0, the token
        # file removed), not a death
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        _server_class()(config, monitor).run(sockets=[sock])
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            if token_path.read_text().strip() == token:  # not a later front door's
                token_path.unlink()
    return 0
