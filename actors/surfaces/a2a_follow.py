"""The A2A front door's view of the session: what each followed task was last seen as, and the
one loop that follows them (:mod:`actors.surfaces.a2a_server`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
)

from actors.records.session_info import SessionInfo
from actors.runtime.log import logger
from actors.surfaces.cli_ops import ANSWER_TIMEOUT_S
from actors.surfaces.client import Client
from protocol import ops
from protocol.calls import a2a
from protocol.core.errors import SessionUnavailable, ShepherdError
from protocol.core.limits import (
    A2A_FILE_POLL_S,
    A2A_REFRESH_S,
    MAX_A2A_STREAMS,
)


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
        bounds of :mod:`protocol.core.limits`); a refusal is the A2A error of rule 6."""
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
