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
   the context. A message that names no agent goes to the session's one live agent; with
   none or several, and for an unknown one, it is refused with ``InvalidParamsError`` (its
   data says ``agent_required`` / ``invalid_handle``).
2. **The methods.** ``SendMessage`` delegates (the message's text parts, joined, are the task;
   other parts are refused); it waits until the task is terminal or needs input, unless
   ``returnImmediately``. A message naming an open task is a follow-up to its agent; naming an
   ``INPUT_REQUIRED`` task it answers the question (:func:`protocol.calls.a2a.question_to_answer`);
   naming a terminal task it is a NEW task for the same agent (or the one it names), whose
   message lists the old task in ``referenceTaskIds``: a terminal task never restarts.
   ``GetTask`` and ``ListTasks`` read ``status`` / ``result``; ``CancelTask`` is ``cancel``
   (a terminal task is ``TaskNotCancelableError``); ``SendStreamingMessage`` and
   ``SubscribeToTask`` stream the task (a ``Task`` first, then each change of its state) until
   it is terminal; subscribing to a terminal task is ``UnsupportedOperationError``, as the
   SDK's own handler says. Push notifications are not offered.
3. **States** are :mod:`protocol.calls.a2a`'s. A completed task's summary is its artifact
   ``summary``; every settled task's summary or error is its status message; a failed or
   timed-out one says ``error.type`` in its metadata.
4. **Following a task** (streams and waiting sends): the tasks followed are watched (their
   completions reach the parent's notifications too: this front door is a parent of the
   session); one refresh loop asks the session for their state when the notifications file
   grows (a question to the parent, a completion) and at least every
   :data:`~protocol.core.limits.A2A_REFRESH_S`, and hands each change to each follower. A client
   that goes away ends its follow at once, a stream's or a waiting send's (the guard watches
   for the disconnect): no thread is kept for it (the session's calls run on the event
   loop's worker threads, each bounded by its own timeout). At most
   :data:`~protocol.core.limits.MAX_A2A_STREAMS` follow at once; one more is refused. A stop
   (SIGTERM, SIGINT) ends every follow at once with a typed error.
5. **Guard.** Every request, the card included, needs ``Authorization: Bearer TOKEN``: a
   token made at start, printed once and written (mode 0600) to ``a2a.token`` in the session
   directory, removed at a clean stop. Without it: HTTP 401. A body over
   :data:`~protocol.core.limits.MAX_A2A_REQUEST_BYTES` is refused before it is read whole (the
   SDK's ``InvalidRequestError``, "Payload too large"). The listening address must be a
   loopback one unless ``--allow-remote`` says otherwise.
6. **Errors.** A refusal of the session is an A2A error whose ``data`` holds the Shepherd
   ``code``: a refused argument ``InvalidParamsError``, a session that cannot be reached
   ``InternalError``; a task id the session does not know is ``TaskNotFoundError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    UnsupportedOperationError,
)
from starlette.applications import Starlette

from actors.records.session_info import SessionInfo
from actors.runtime.log import logger
from actors.surfaces.a2a_follow import (
    FrontDoor,
    Monitor,
    Seen,
    _named_agent,
    _text_of,
    task_object,
)
from actors.surfaces.a2a_http import (
    TOKEN_FILE,
    Guard,
    _server_class,
    _write_token,
    agent_card,
)
from actors.surfaces.listening import check_listen, listening_socket, live_session
from protocol.calls import a2a

__all__ = ["TOKEN_FILE", "FrontDoor", "ShepherdHandler", "build_app", "check_listen", "serve"]

#: client messages kept for ``history`` (the newest; the session keeps the task's text)
_KEPT_MESSAGES = 1000


def _history_length(params: pb.GetTaskRequest | pb.ListTasksRequest) -> int | None:
    """The request's ``historyLength``, if it gives one; a negative one is refused."""
    if not params.HasField("history_length"):
        return None
    if params.history_length < 0:
        raise InvalidParamsError(
            f"historyLength must be 0 or more, not {params.history_length}",
            {"code": "invalid_argument"},
        )
    return params.history_length


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
            agent = await self._only_agent()
        return await self._delegate(agent, text, message), message

    async def _only_agent(self) -> str:
        """The agent of a message that names none: the session's one live agent (rule 1)."""
        live = [row for row in await self.door.agents() if not row.get("closed")]
        if len(live) == 1:
            return str(live[0]["agent_id"])
        raise InvalidParamsError(
            f"name the agent (the session has {len(live)}): metadata.agent (a skill id of the "
            "Agent Card), or the contextId of an earlier task of it",
            {"code": "agent_required"},
        )

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
        length = _history_length(params)
        task = await self.door.one(params.id)
        return task_object(task, self._history(task.task_id, length))

    async def on_list_tasks(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        """Each agent's task as ``status`` shows it (its active one, else its newest),
        newest first; filtered by ``contextId`` (the agent's id) and ``status``."""
        _history_length(params)
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


def serve(
    session: str | None, listen: str, *, allow_remote: bool = False, json_out: bool = False
) -> int:
    """``shepherd a2a``: serve until SIGTERM or SIGINT (uvicorn's own handlers stop it
    cleanly: the streams end, the monitor stops, the token file goes)."""
    import uvicorn

    host, port = check_listen(listen, allow_remote=allow_remote, what="a2a")
    level = os.environ.get("SHEPHERD_LOG_LEVEL", "WARNING").upper()
    logger.enable("actors")
    logger.remove()
    logger.add(sys.stderr, level=level)
    # the SDK logs every refused request (with a traceback for a malformed one): the client
    # was answered with its typed error, so only SHEPHERD_LOG_LEVEL=DEBUG or INFO shows them
    logging.getLogger("a2a").setLevel(level if level in ("DEBUG", "INFO") else "CRITICAL")

    info = live_session(session)
    sock, url = listening_socket("a2a", listen, host, port)
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
