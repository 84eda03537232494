"""An MCP server over stdio: any MCP-capable coding agent can be the parent of a session.

``shepherd mcp [--session DIR] [--client NAME]`` (or ``python -m actors.surfaces.mcp_server``)
serves the
parent tools of ``protocol/ops/tools.py`` — with exactly those JSON schemas — against a *running*
session started with ``shepherd serve``. The server does not own the session: it finds it like
the CLI does (``--session DIR``, else ``$SHEPHERD_SESSION``, else the one live session of this
user; with several live ones every tool call is refused with their list), lazily and again
whenever the session it used is gone, so an MCP client may start before the session does.

How a tool call maps:

- ``shepherd_spawn`` … ``shepherd_cancel``: the arguments are validated against the tool's
  schema (:func:`protocol.ops.tools.args_from_tool_call`), path fields are made absolute against
  this server's working directory, and the operation runs in the session through
  :class:`actors.surfaces.client.Client` (a ``call`` envelope over the session mailbox). The result
  is the operation's result as JSON text plus the same object as structured content.
- ``shepherd_notifications``: answered here, from the session's ``notifications.jsonl`` and a
  durable cursor per client (:mod:`actors.records.mcp_cursor`): each notification reaches a client
  name once, across restarts of this server (a new ``shepherd mcp`` continues where the last
  one stopped), and an answer holds at most a bounded batch (``more``: call again). With
  ``wait_seconds`` it waits for the file to grow by polling its size every
  :data:`WAIT_POLL_S` — no inotify instance, so the wait works when the user's inotify
  instances are used up; a stat per poll costs about what watchfiles' own polling step did.
  ``--client NAME`` names the cursor; without it every server of the session shares the
  cursor ``default`` (a session has one parent). The name the MCP client reports in
  ``initialize`` is not used: two copies of one program report the same name, and a parent
  that changes program (or version) would be handed every notification again.
- An agent's approval request is also put to the user at once as an MCP elicitation when the
  client supports them (:mod:`actors.surfaces.mcp_elicit`); else the notification path only.
- ``shepherd_delegate`` / ``shepherd_delegate_many`` called task-augmented (``task`` in the
  params) answer with an MCP task at once, served by :mod:`actors.surfaces.mcp_tasks`.
- Any :class:`~protocol.core.errors.ShepherdError` becomes an MCP tool error (``isError``) whose
  text and structured content are ``{"error": {"code", "message"}}`` — what ``--json`` prints.

Making a coding agent the parent (start a session first: ``shepherd serve``; it prints its
directory, DIR below; ``--session DIR`` may be left out while it is the only live session):

- Claude Code: ``claude mcp add shepherd -- shepherd mcp --session DIR`` (add ``-s user``
  before ``shepherd`` to have it in every project). Check with ``claude mcp list`` or ``/mcp``.
- Codex: ``codex mcp add shepherd -- shepherd mcp --session DIR``, or in
  ``~/.codex/config.toml``::

      [mcp_servers.shepherd]
      command = "shepherd"
      args = ["mcp", "--session", "DIR"]
      tool_timeout_sec = 120   # above the longest shepherd_notifications wait_seconds

- Pi: no MCP needed; the parent extension shipped with Shepherd is loaded with ``-e`` and
  turns every notification into a follow-up turn.

An MCP client is not woken by the server, so the parent delegates, calls ``shepherd_watch``,
and collects completions with ``shepherd_notifications`` (``wait_seconds`` to wait for one).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from actors.records.mcp_cursor import DEFAULT_CLIENT, Batch, CursorStore, check_client_name
from actors.records.session_info import SessionInfo
from actors.runtime.log import logger
from actors.surfaces.cli_ops import ANSWER_TIMEOUT_S, answer_timeout
from actors.surfaces.client import Client, find_session, session_alive
from actors.surfaces.mcp_elicit import ApprovalElicitor
from actors.surfaces.mcp_tasks import TASK_TOOLS, McpTasks
from actors.surfaces.mcp_wire import Drain, StdinLines
from protocol import ops
from protocol.core.errors import ErrorInfo, InvalidArgument, SessionUnavailable, ShepherdError
from protocol.ops.tools import (
    NOTIFICATIONS,
    NotificationsArgs,
    ToolSpec,
    args_from_tool_call,
    mcp_tools,
)

__all__ = ["ShepherdMcp", "main", "serve_stdio"]

INSTRUCTIONS = (
    "Shepherd supervises a team of agent processes for you. Start agents with shepherd_spawn, "
    "give one a task with shepherd_delegate (it returns a task id at once), then call "
    "shepherd_watch with the task ids. Completions, agents' messages to you and notices "
    "arrive as notifications: call shepherd_notifications (wait_seconds to wait for the next "
    "one) and act on each. A task ends only when its agent calls done; an idle agent has not "
    "finished. Check progress with shepherd_status and shepherd_read."
)

#: how often a ``shepherd_notifications`` wait looks at the file's size
WAIT_POLL_S = 0.025


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shepherd")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def _text(data: Any) -> str:
    return msgspec.json.encode(data).decode()


def _ok(data: Any) -> types.CallToolResult:
    structured = data if isinstance(data, dict) else {"result": data}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_text(data))],
        structured_content=structured,
    )


def _error(info: ErrorInfo) -> types.CallToolResult:
    body = {"error": {"code": info.code, "message": info.message}}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_text(body))],
        structured_content=body,
        is_error=True,
    )


class ShepherdMcp:
    """The server's state: which session, its client, and how far notifications were read."""

    def __init__(self, session_dir: str | None = None, client: str = DEFAULT_CLIENT) -> None:
        self._explicit = session_dir
        self.client_name = check_client_name(client)
        self._info: SessionInfo | None = None
        self._client: Client | None = None
        self._announced: str | None = None
        self._notes_lock: anyio.Lock | None = None
        self._lock = threading.Lock()
        self._tools: dict[str, ToolSpec] = {spec.name: spec for spec in mcp_tools()}
        #: approval requests put to the user as elicitations (a client that can answer them)
        self.elicitor = ApprovalElicitor(self)
        self.server: Server[Any] = Server(
            "shepherd",
            version=_version(),
            title="Shepherd",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        #: MCP tasks: ``shepherd_delegate(_many)`` called task-augmented (mcp_tasks.py)
        self.tasks = McpTasks(self._plain_op, self._settled_result)
        self.tasks.register(self.server, self._task_call)

    # ------------------------------------------------------------------ session

    def session(self) -> SessionInfo:
        """The session in use; looked up again when there is none yet or its supervisor died."""
        return self._session_and_client()[0]

    def _session_and_client(self) -> tuple[SessionInfo, Client]:
        with self._lock:  # tool calls run on worker threads
            info, client = self._info, self._client
            if info is None or client is None or not session_alive(info):
                fresh = find_session(self._explicit, announce=self._announce)
                if not session_alive(fresh):
                    raise SessionUnavailable(f"the session at {fresh.session_dir} has ended")
                if info is None or client is None or fresh.session_id != info.session_id:
                    client = Client(fresh)
                    logger.info(
                        "using session {id} at {dir}", id=fresh.session_id, dir=fresh.session_dir
                    )
                info = self._info = fresh
                self._client = client
            return info, client

    def _announce(self, text: str) -> None:
        """Name a session found without --session once, where the MCP client logs stderr."""
        if self._announced != text:
            self._announced = text
            logger.warning("{text}", text=text)

    def _run_op(self, spec: ToolSpec, args: msgspec.Struct) -> Any:
        _, client = self._session_and_client()
        fields: dict[str, Any] = msgspec.to_builtins(args)
        for name in spec.path_fields:
            if isinstance(fields.get(name), str):
                # the session runs elsewhere: a relative path means *our* directory
                fields[name] = str(Path(fields[name]).expanduser().absolute())
        op = next((o for o in ops.PARENT if o.name == spec.op), None)  # watchdog: at once
        return client.call(
            spec.op, fields, timeout=answer_timeout(op, fields) if op else ANSWER_TIMEOUT_S
        )

    def _plain_op(self, op: str, fields: dict[str, Any]) -> Any:
        """An operation the server makes itself (an MCP task's look at its Shepherd tasks)."""
        return self._session_and_client()[1].call(op, fields, timeout=ANSWER_TIMEOUT_S)

    @staticmethod
    def _settled_result(data: Any) -> types.CallToolResult:
        """An MCP task's tool result: a settled result, or the error that ended the task."""
        if isinstance(data, ShepherdError):
            data = data.info()
        return _error(data) if isinstance(data, ErrorInfo) else _ok(data)

    # ------------------------------------------------------------------ notifications

    async def _take(self, info: SessionInfo) -> Batch:
        store = CursorStore(info.session_dir, self.client_name)
        return await anyio.to_thread.run_sync(store.take, info)

    async def _wait_and_take(self, info: SessionInfo, batch: Batch, seconds: float) -> Batch:
        """Poll the file's size until a batch has something, ``seconds`` pass, or the session
        ends. A size change is only a hint: the batch is read from the cursor."""
        deadline = anyio.current_time() + seconds
        while (left := deadline - anyio.current_time()) > 0:
            await anyio.sleep(min(WAIT_POLL_S, left))
            try:
                size = os.stat(info.notifications).st_size
            except OSError:
                continue
            if size != batch.size:
                batch = await self._take(info)
                if batch.notifications or batch.more:
                    break
            if not session_alive(info):
                break
        return batch

    def _answer(self, info: SessionInfo, batch: Batch) -> dict[str, Any]:
        return {
            "session_id": info.session_id,
            "client": self.client_name,
            "notifications": batch.notifications,
            "more": batch.more,
        }

    async def notifications(self, args: NotificationsArgs) -> dict[str, Any]:
        if self._notes_lock is None:
            self._notes_lock = anyio.Lock()
        # this server's calls one at a time; the cursor's file lock orders other servers
        async with self._notes_lock:
            last = self._info
            try:
                info = self.session()
            except SessionUnavailable:
                # the session ended: what it wrote before it went is still owed to the client
                if last is None:
                    raise
                batch = await self._take(last)
                if not batch.notifications:
                    raise
                return {**self._answer(last, batch), "ended": True}
            batch = await self._take(info)
            if not batch.notifications and not batch.more and args.wait_seconds > 0:
                batch = await self._wait_and_take(info, batch, args.wait_seconds)
        return self._answer(info, batch)

    # ------------------------------------------------------------------ MCP handlers

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.elicitor.offer(ctx.session)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name,
                    title=spec.label,
                    description=spec.description,
                    input_schema=spec.parameters,
                    execution=types.ToolExecution(task_support="optional")
                    if spec.name in TASK_TOOLS
                    else None,
                )
                for spec in self._tools.values()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self.elicitor.offer(ctx.session)
        return await self.call(params.name, params.arguments)

    async def _task_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CreateTaskResult:
        """A task-augmented ``tools/call``: the delegation, and a task handle at once."""
        self.elicitor.offer(ctx.session)
        assert params.task is not None
        return await self.tasks.start(
            ctx, params.name, params.task, lambda: self.call(params.name, params.arguments)
        )

    async def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Run one tool call; every refusal is a tool error, never a protocol error."""
        try:
            spec = self._tools.get(name)
            if spec is None:
                raise InvalidArgument(f"no tool named {name!r}")
            args = args_from_tool_call(spec, arguments)
            if spec is NOTIFICATIONS:
                assert isinstance(args, NotificationsArgs)
                return _ok(await self.notifications(args))
            # the session call blocks (mailbox round trip): keep it off the event loop
            return _ok(await anyio.to_thread.run_sync(functools.partial(self._run_op, spec, args)))
        except ShepherdError as exc:
            return _error(exc.info())
        except Exception as exc:  # a bug must still answer the client, as an error
            logger.opt(exception=True).error("tool {name} failed", name=name)
            return _error(ErrorInfo(code="internal_error", message=repr(exc)))

    async def run_stdio(self) -> None:
        lines = StdinLines(sys.stdin.buffer).wrapped()  # mcp_wire's rules: bounded lines,
        async with (  # a bad frame answered, the end held until every request is answered
            stdio_server(stdin=lines) as (read_stream, write_stream),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self.elicitor.run)
            tg.start_soon(self.tasks.run)
            options = self.server.create_initialization_options()
            options.capabilities.tasks = McpTasks.capability()
            drain = Drain()
            reading = drain.reading(read_stream, answers=write_stream)
            await self.server.run(reading, drain.writing(write_stream), options)
            tg.cancel_scope.cancel()


def serve_stdio(session_dir: str | None, client: str | None = None) -> int:
    """``shepherd mcp [--session DIR] [--client NAME]``: serve until the client closes stdin
    and every request read from it is answered (:mod:`actors.surfaces.mcp_wire`). Logs go to
    stderr (stdout is the protocol); ``SHEPHERD_LOG_LEVEL`` sets the level (default WARNING).
    A bad ``--client`` is refused before serving (``invalid_argument``)."""
    app = ShepherdMcp(session_dir, DEFAULT_CLIENT if client is None else client)
    logger.enable("actors")
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("SHEPHERD_LOG_LEVEL", "WARNING"))
    try:
        app.session()
    except ShepherdError as exc:  # not fatal: the session may be started (or chosen) later
        logger.warning("{msg}; tools will report {code} until then", msg=exc.message, code=exc.code)
    try:
        anyio.run(app.run_stdio)
    except KeyboardInterrupt:
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m actors.surfaces.mcp_server",
        description="Shepherd's parent tools over MCP (stdio).",
    )
    parser.add_argument("--session", metavar="DIR", help="the session directory")
    parser.add_argument(
        "--client", metavar="NAME", help="whose notifications cursor to use (default: default)"
    )
    args = parser.parse_args(argv)
    try:
        return serve_stdio(args.session, args.client)
    except ShepherdError as exc:
        sys.stderr.write(f"shepherd mcp: {exc.code}: {exc.message}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
