"""MCP tasks (specification revision 2025-11-25) for ``shepherd_delegate`` and
``shepherd_delegate_many``.

A ``tools/call`` of one of them whose params carry ``task`` delegates as the plain call does, and
answers at once with a ``CreateTaskResult`` instead of the tool result. The MCP task then follows
the Shepherd task(s) it started:

=========================================  ==================
Shepherd task                              MCP task status
=========================================  ==================
created, running, waiting (on a peer)      ``working``
a question or approval open to the parent  ``input_required``
completed                                  ``completed``
blocked, failed, timed_out                 ``failed``
cancelled                                  ``cancelled``
=========================================  ==================

``blocked`` and ``timed_out`` are terminal in Shepherd and are *not* successes: the agent said
it could not finish, or the session's deadline ended the task, so the tool result is an error
(``isError``, like every non-zero return code) and the spec's rule for tools holds — a tool
call whose result is an error is a ``failed`` task. ``cancelled`` is kept for a cancel (by
``tasks/cancel`` or ``shepherd_cancel``). With ``shepherd_delegate_many`` the MCP task ends when
every accepted item has settled: ``completed`` when all completed, ``cancelled`` when all were
cancelled, else ``failed``; it is ``input_required`` while any item has a question open to the
parent.

``tasks/result`` waits for the end and returns the tool result a blocking call would have: the
settled result (``shepherd result``'s, a list of them under ``results`` for ``delegate_many``).
``tasks/cancel`` cancels every Shepherd task of it that is still open. Every change of status is
sent as ``notifications/tasks/status`` to a client that declared the ``tasks`` capability;
``tasks/get`` always answers.

Bounds: a task id is only ever one this server made (anything else: ``-32602``); ``tasks/list``
gives :data:`PAGE` tasks a page; a finished record is kept for its ``ttl`` (what the client
asked, at most :data:`MAX_TTL_MS`, by default :data:`DEFAULT_TTL_MS`) counted from when it
finished, then forgotten; at most :data:`MAX_RECORDS` records are kept, the oldest finished
forgotten first, and a new task is refused while that many are still running.

The SDK (``mcp`` 2.x) implements no task store: the ``tasks/*`` methods are registered with
the low-level server's :meth:`~mcp.server.Server.add_request_handler`, and the task-augmented
``tools/call`` is answered by the server's own call-tool handler (:meth:`McpTasks.start`).
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
from mcp import types
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from actors.runtime.log import logger
from protocol.core.errors import ErrorInfo, ShepherdError
from protocol.core.ids import PARENT_ID

__all__ = [
    "DEFAULT_TTL_MS",
    "MAX_RECORDS",
    "MAX_TTL_MS",
    "PAGE",
    "TASK_TOOLS",
    "McpTasks",
    "mcp_status",
]

#: the tools that may be called as a task
TASK_TOOLS = frozenset({"shepherd_delegate", "shepherd_delegate_many"})
#: how long a finished task's record is kept when the client names no ttl
DEFAULT_TTL_MS = 3_600_000
#: the longest a finished task's record is kept, whatever the client asks
MAX_TTL_MS = 86_400_000
#: records kept at most (running and finished)
MAX_RECORDS = 1000
#: tasks in one ``tasks/list`` page
PAGE = 50
#: how often a running task's Shepherd state is looked at (and the poll interval suggested)
POLL_S = 0.2
#: a task id this server makes: the prefix and 32 hex digits
_PREFIX = "shepherd-mcptask-"
_ID_LEN = len(_PREFIX) + 32

McpStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
_TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
_RELATED = "io.modelcontextprotocol/related-task"

#: the server's handler of a task-augmented ``tools/call``
TaskCall = Callable[
    [ServerRequestContext[Any], types.CallToolRequestParams], Awaitable[types.CreateTaskResult]
]
#: runs a parent operation in the session (blocking; called on a worker thread)
RunOp = Callable[[str, dict[str, Any]], Any]


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def mcp_status(states: list[str], asks_parent: bool) -> McpStatus:
    """The MCP status of a task made of Shepherd tasks in ``states`` (the module's table)."""
    if all(s in ("completed", "blocked", "failed", "cancelled", "timed_out") for s in states):
        if all(s == "completed" for s in states):
            return "completed"
        if all(s == "cancelled" for s in states):
            return "cancelled"
        return "failed"
    return "input_required" if asks_parent else "working"


@dataclass
class _Record:
    task_id: str
    tool: str
    shepherd_ids: tuple[str, ...]
    ttl_ms: int
    created_at: float
    status: McpStatus = "working"
    message: str | None = None
    updated_at: float = 0.0
    finished_at: float | None = None
    result: types.CallToolResult | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def task(self) -> types.Task:
        return types.Task(
            task_id=self.task_id,
            status=self.status,
            status_message=self.message,
            created_at=_iso(self.created_at),
            last_updated_at=_iso(self.updated_at or self.created_at),
            ttl=self.ttl_ms,
            poll_interval=int(POLL_S * 1000),
        )


def _unknown(task_id: str) -> MCPError:
    shown = task_id if len(task_id) <= _ID_LEN else task_id[:_ID_LEN] + "…"
    return MCPError(types.INVALID_PARAMS, f"no task {shown!r} (unknown, or its record expired)")


class McpTasks:
    """The MCP task records of one ``shepherd mcp`` server, and their watchers."""

    def __init__(
        self,
        run_op: RunOp,
        to_result: Callable[[Any], types.CallToolResult],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._run_op = run_op
        self._to_result = to_result
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    # ------------------------------------------------------------------ wiring

    def register(self, server: Any, task_call: TaskCall) -> None:
        """Serve ``tasks/*``, and route a task-augmented ``tools/call`` to ``task_call``.

        The SDK's per-revision result check admits only a ``CallToolResult`` for
        ``tools/call`` (it has no tasks), so the task-augmented call is taken by a server
        middleware before that check, which the SDK lets own its result."""

        async def middleware(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
            params = ctx.params
            if ctx.method != "tools/call" or not isinstance(params, dict) or "task" not in params:
                return await call_next(ctx)
            try:
                typed = types.CallToolRequestParams.model_validate(params, by_name=False)
            except ValidationError:
                raise MCPError(
                    types.INVALID_PARAMS, "tools/call: invalid task-augmented params"
                ) from None
            result = await task_call(ctx, typed)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        server.middleware.append(middleware)
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)

    @staticmethod
    def capability() -> types.ServerTasksCapability:
        return types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )

    async def run(self) -> None:
        """Host the watchers until cancelled (with the server)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await anyio.sleep_forever()

    # ------------------------------------------------------------------ tools/call

    async def start(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        metadata: types.TaskMetadata,
        call: Callable[[], Any],
    ) -> types.CreateTaskResult:
        """Run the delegation (``call``: the tool's result or a ShepherdError) and make its
        MCP task. A refused delegation is a task that failed at once, with the tool error."""
        if name not in TASK_TOOLS:
            raise MCPError(
                types.METHOD_NOT_FOUND,
                f"{name!r} cannot be called as a task (only {', '.join(sorted(TASK_TOOLS))})",
            )
        self._expire()
        if len(self._records) >= MAX_RECORDS:
            raise MCPError(
                types.INTERNAL_ERROR, f"{MAX_RECORDS} tasks are still running: try again later"
            )
        ttl = DEFAULT_TTL_MS if metadata.ttl is None else max(0, min(metadata.ttl, MAX_TTL_MS))
        now = self._clock()
        record = _Record(
            task_id=_PREFIX + secrets.token_hex(16),
            tool=name,
            shepherd_ids=(),
            ttl_ms=ttl,
            created_at=now,
            updated_at=now,
        )
        self._records[record.task_id] = record
        result: types.CallToolResult = await call()
        if result.is_error:
            self._finish(record, "failed", result, "the delegation was refused")
        else:
            data = result.structured_content or {}
            ids = data.get("task_ids") if name == "shepherd_delegate_many" else [data["task_id"]]
            record.shepherd_ids = tuple(i for i in ids or () if i is not None)
            if not record.shepherd_ids:  # every item of a batch refused
                self._finish(record, "failed", result, "no item was accepted")
            else:
                notify = self._notifier(ctx)
                assert self._tg is not None
                self._tg.start_soon(self._watch, record, notify)
        return types.CreateTaskResult(task=record.task())

    def _notifier(self, ctx: ServerRequestContext[Any]) -> Callable[[_Record], Any] | None:
        caps = ctx.session.client_capabilities
        if caps is None or caps.tasks is None:  # the client said nothing of tasks: it polls
            return None
        session = ctx.session

        async def notify(record: _Record) -> None:
            task = record.task()
            note = types.TaskStatusNotification(
                params=types.TaskStatusNotificationParams(**dict(task))
            )
            try:
                # the SDK's union of server notifications leaves tasks out (it has none);
                # sending dumps the model, so this one goes out like any other
                await session.send_notification(note)  # type: ignore[arg-type]
            except Exception:  # the client went: polling is what is left, and nobody polls
                logger.opt(exception=True).debug("task status not sent")

        return notify

    # ------------------------------------------------------------------ watching

    def _look(self, record: _Record) -> tuple[McpStatus, str | None, list[Any]]:
        """One look at the session (blocking): the status, its message, the settled results."""
        settled = [self._run_op("result", {"task_id": tid}) for tid in record.shepherd_ids]
        if all(r is not None for r in settled):
            states = [r["status"] for r in settled]
            message = ", ".join(sorted(set(states)))
            return mcp_status(states, False), message, settled
        open_ids = {tid for tid, r in zip(record.shepherd_ids, settled, strict=True) if r is None}
        asks, waiting = False, False
        cursor: int | None = 0
        while cursor is not None:
            page = self._run_op("status", {"cursor": cursor})
            for agent in page["agents"]:
                task = agent.get("task")
                if not task or task["task_id"] not in open_ids:
                    continue
                waiting = waiting or task["state"] == "waiting"
                asks = asks or any(
                    r["target_id"] == PARENT_ID and r.get("state", "pending") == "pending"
                    for r in task.get("pending_requests", ())
                )
            cursor = page.get("next_cursor")
        if asks:
            return "input_required", "a question or approval waits for the parent", []
        return "working", "waiting on a peer" if waiting else None, []

    async def _watch(self, record: _Record, notify: Callable[[_Record], Any] | None) -> None:
        while record.status not in _TERMINAL:
            try:
                status, message, settled = await anyio.to_thread.run_sync(
                    functools.partial(self._look, record)
                )
            except ShepherdError as exc:  # the session is gone, say: the task cannot end
                self._finish(record, "failed", self._to_result(exc), f"{exc.code}: {exc.message}")
            except Exception as exc:  # a bug ends this task, never the server's other work
                logger.opt(exception=True).error("task {tid}: watching failed", tid=record.task_id)
                info = ErrorInfo(code="internal_error", message=repr(exc))
                self._finish(record, "failed", self._to_result(info), None)
            else:
                if status in _TERMINAL:
                    many = record.tool == "shepherd_delegate_many"
                    data = {"results": settled} if many else settled[0]
                    self._finish(record, status, self._to_result(data), message)
                elif (status, message) != (record.status, record.message):
                    record.status, record.message = status, message
                    record.updated_at = self._clock()
                else:
                    await anyio.sleep(POLL_S)
                    continue
            if notify is not None:
                await notify(record)

    def _finish(
        self, record: _Record, status: McpStatus, result: types.CallToolResult, message: str | None
    ) -> None:
        if status == "completed" and result.is_error:
            status = "failed"  # a tool error is a failed task (the spec's rule for tools)
        if status != "completed" and not result.is_error:  # like its non-zero return code
            result = result.model_copy(update={"is_error": True})
        record.status, record.message, record.result = status, message, result
        record.updated_at = record.finished_at = self._clock()
        record.done.set()

    def _expire(self) -> None:
        now = self._clock()
        for tid in [
            tid
            for tid, r in self._records.items()
            if r.finished_at is not None and now - r.finished_at > r.ttl_ms / 1000
        ]:
            del self._records[tid]
        finished = sorted(
            (r for r in self._records.values() if r.finished_at is not None),
            key=lambda r: r.finished_at or 0.0,
        )
        while len(self._records) >= MAX_RECORDS and finished:
            del self._records[finished.pop(0).task_id]

    def _record(self, task_id: str) -> _Record:
        self._expire()
        record = self._records.get(task_id)
        if record is None:
            raise _unknown(task_id)
        return record

    # ------------------------------------------------------------------ tasks/*

    async def _get(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams
    ) -> types.GetTaskResult:
        return types.GetTaskResult(**dict(self._record(params.task_id).task()))

    async def _result(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        record = self._record(params.task_id)
        await record.done.wait()
        assert record.result is not None
        data = record.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        data.setdefault("_meta", {})[_RELATED] = {"taskId": record.task_id}
        return data

    async def _list(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams
    ) -> types.ListTasksResult:
        self._expire()
        start = 0
        if params.cursor is not None:
            if not params.cursor.isdigit() or len(params.cursor) > 9:
                raise MCPError(types.INVALID_PARAMS, "tasks/list: a cursor this server never gave")
            start = int(params.cursor)
        records = sorted(self._records.values(), key=lambda r: (r.created_at, r.task_id))
        page = records[start : start + PAGE]
        more = start + PAGE < len(records)
        return types.ListTasksResult(
            tasks=[r.task() for r in page], next_cursor=str(start + PAGE) if more else None
        )

    async def _cancel(
        self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams
    ) -> types.CancelTaskResult:
        record = self._record(params.task_id)
        if record.status in _TERMINAL:
            raise MCPError(
                types.INVALID_PARAMS, f"task {record.task_id} has already ended ({record.status})"
            )

        def cancel_all() -> None:
            for tid in record.shepherd_ids:
                try:
                    self._run_op("cancel", {"task_id": tid, "reason": "cancelled by tasks/cancel"})
                except ShepherdError as exc:  # settled meanwhile: its own end stands
                    logger.info("tasks/cancel: {tid}: {msg}", tid=tid, msg=exc.message)

        await anyio.to_thread.run_sync(cancel_all)
        # the watcher ends the record from the settled results (cancelled, or what won the race)
        await record.done.wait()
        return types.CancelTaskResult(**dict(record.task()))
