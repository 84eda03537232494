"""The ``acp`` adapter: any Agent Client Protocol agent as a child, driven over its stdio with
the ``agent-client-protocol`` package (client side).

Options (``acp_cmd``, ``cwd``, ``startup_timeout_s``) are described and checked in
:mod:`actors.child.acp_options`.

Rules:
- One ACP session per agent: ``initialize``, then ``session/new`` in the agent's working
  directory. Its id is kept in the agent's dir (``<session>/agents/<agent>/acp``); started again
  by ``serve --recover``, the adapter asks ``session/load`` for it when the agent says it can
  load sessions, so the model keeps its context (else a new session).
- A task is one prompt turn (:func:`~protocol.calls.render.render_task_context`); a message,
  reply or notice is a new prompt (:func:`~protocol.calls.render.render_delivery`), run after
  the running turn ends. Prompts go one at a time, in order; a ``steer`` delivery goes first
  and cancels the running turn (``session/cancel``) so it lands at once.
- ``control`` ``abort`` is ``session/cancel``. ``control`` ``cancel_task``: the prompts of that
  task still waiting are dropped and, if the agent was given that task, its turn is cancelled
  and the agent is told with its next prompt that the task ended.
- ``control hold`` / ``resume`` (:mod:`actors.child.holding`): while held no prompt starts;
  deliveries wait in order and ``resume`` releases them.
- A turn ending (any stop reason) is ``turn_end``, NEVER a task settlement: only
  ``shepherd_done`` settles a task, through the parent. The session gets the child tools
  (``shepherd_done`` / ``shepherd_message``) as a stdio MCP server
  (:mod:`actors.child.acp_tools`); ``shepherd-child done`` from the agent's shell works too.
- Session updates become runtime events: ``tool_call`` (a tool call starting: its title, and
  its raw input as compact JSON as the command), ``tool_result`` (its status ``completed`` or
  ``failed``: the command of its call, its text content's tail), ``output`` (the agent's
  message text of a turn, joined, published at the turn's end). The watchdog reads them as it
  reads Pi's. Everything published is bounded as :mod:`actors.child.pi.turns` bounds Pi's.
- Usage: a prompt response's ``usage.total_tokens`` and the growth of the session's reported
  cost (``usage_update``, US dollars only) become ``usage`` events, counted against budgets.
- ``session/request_permission`` is a Shepherd approval: ``shepherd-child approve-request``
  with the tool call's title (the task goes ``waiting``; the parent decides). Approved: the
  agent's ``allow_once`` option (else its first allowing one); denied: ``reject_once`` (else
  its first rejecting one, else ``cancelled``). A request while a cancel is under way, or still
  waiting when a cancel is sent, is answered ``cancelled`` at once, as ACP requires (the
  waiting approval is withdrawn).
- The agent exiting on its own (crash, or the connection lost to frames the SDK cannot read) is
  an error output, and the bridge exits with its status (1 if it said 0). Close: cancel the
  running turn, then the SDK's shutdown (end of input, SIGTERM, SIGKILL).

Theory of operation: the ACP connection lives on an asyncio loop in one thread of its own;
everything it learns is handed to the core thread with ``ctx.post``; the core hands work to the
loop with ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from acp import PROTOCOL_VERSION, connect_to_agent, spawn_stdio_transport, text_block
from acp.schema import (
    ClientCapabilities,
    EnvVariable,
    Implementation,
    McpServerStdio,
)

from actors.child.acp_events import TEXT_LIMIT, AgentClient, AgentSaid, head
from actors.child.acp_lines import BUFFER_LIMIT, BoundedLines
from actors.child.acp_options import AcpOptions, save_session, saved_session
from actors.child.adapters import AgentContext, control_reason, show_refusal
from actors.child.holding import Holding
from actors.runtime.log import logger
from actors.runtime.procs import exit_status
from protocol.calls.render import render_delivery, render_task_context, render_task_ended
from protocol.core.errors import SandboxUnavailable
from protocol.core.limits import MAX_BUDGET_TOKENS
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    RuntimeEvent,
    TaskEnvelope,
)

__all__ = ["AcpAdapter"]

#: How long the loop thread gets to shut the agent down at close.
CLOSE_TIMEOUT_S = 10.0
#: how long an agent whose output ended gets to exit, before it is failed as lost
EXIT_AFTER_EOF_S = 2.0
#: the directory holding ``actors/`` (the tools server is run from it)
_ROOT = str(Path(__file__).resolve().parents[2])


class _Prompt(NamedTuple):
    text: str
    what: str
    task_id: str | None = None
    gives_task: bool = False


class AcpAdapter(AgentSaid):
    name: ClassVar[str] = "acp"

    @staticmethod
    def check_options(options: Mapping[str, Any], cwd: str) -> AcpOptions:
        """The options, checked (the parent runs this before starting the bridge)."""
        return AcpOptions(cwd, options)

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None:
        self._ctx = ctx
        self._opts = self.check_options(options, ctx.cwd)
        self._recovered = bool(options.get("recovered"))
        self._log = logger.bind(agent=ctx.env.name or ctx.env.agent_id)
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._main: asyncio.Task[None] | None = None
        self._conn: Any = None
        self._session_id: str | None = None
        self._agent_dir: Path | None = None
        self._own_dir = False
        self._environ: dict[str, str] = {}
        # --- loop thread state
        self._prompts: collections.deque[_Prompt] = collections.deque()
        #: set when a prompt is queued (made here: deliveries may come before the loop runs)
        self._wake = asyncio.Event()
        self._turn_open = False
        self._held = False  # the parent's hold (set on the loop, from the core's Holding)
        self._cancelling = False
        self._approval: asyncio.subprocess.Process | None = None
        self._approval_cancelled = asyncio.Event()
        self._commands: dict[str, str] = {}
        self._titles: dict[str, str] = {}
        self._said: list[str] = []
        self._cost_seen = 0.0
        # --- core thread state
        self._task_id: str | None = None
        self._ended: list[str] = []
        self._holding: Holding[None] = Holding(ctx.runtime)

    # ------------------------------------------------------------------ adapter (core thread)

    def start(self) -> None:
        env = self._ctx.env
        if env.session_dir:
            self._agent_dir = Path(env.session_dir) / "agents" / env.agent_id / "acp"
            self._agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            self._agent_dir, self._own_dir = Path(tempfile.mkdtemp(prefix="shepherd-acp-")), True
        environ = self._ctx.child_environ()
        path = environ.get("PYTHONPATH")  # so `python -m actors...` works from any directory
        environ["PYTHONPATH"] = f"{_ROOT}{os.pathsep}{path}" if path else _ROOT
        self._environ = environ
        # made here, not in the thread: a delivery that comes before the thread runs is
        # scheduled on it and runs once it does (never dropped)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_loop, args=(environ,), name="shepherd-acp", daemon=True
        )
        self._thread.start()

    def deliver(self, envelope: AnyEnvelope) -> None:
        if self._closing:
            return
        match envelope:
            case TaskEnvelope():
                text = render_task_context(envelope)
                self._queue(_Prompt(text, f"task {envelope.task_id}", envelope.task_id, True))
            case MessageEnvelope() | ReplyEnvelope():
                kind = "reply" if isinstance(envelope, ReplyEnvelope) else "message"
                who = envelope.sender_name or envelope.sender_id
                prompt = _Prompt(
                    render_delivery(envelope),
                    f"{kind} {envelope.message_id} from {who}",
                    envelope.task_id,
                )
                self._queue(prompt, steer=envelope.delivery == "steer")
            case NoticeEnvelope():
                self._queue(_Prompt(render_delivery(envelope), f"notice {envelope.code}"))
            case AckEnvelope():
                show_refusal(self._ctx, envelope)
            case ControlEnvelope(action="cancel_task", task_id=task_id) if task_id is not None:
                self._cancel_task(task_id, envelope)
            case ControlEnvelope(action="cancel_task" | "abort"):
                self._call(self._cancel_turn(control_reason(envelope)))
            case ControlEnvelope(action="hold"):
                self._holding.hold(envelope)
                self._call(self._hold(True))
            case ControlEnvelope(action="resume"):
                self._holding.resume()
                self._call(self._hold(False))
            case _:
                self._log.debug("ignored {}", envelope.__struct_config__.tag)

    def close(self) -> None:
        """Cancel the running turn, then stop the agent (called once)."""
        self._closing = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
                with contextlib.suppress(Exception):
                    future.result(timeout=CLOSE_TIMEOUT_S)
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_TIMEOUT_S)
        if self._own_dir and self._agent_dir is not None:
            shutil.rmtree(self._agent_dir, ignore_errors=True)

    def _queue(self, prompt: _Prompt, *, steer: bool = False) -> None:
        if prompt.gives_task:
            self._task_id = prompt.task_id
        if self._ended:
            prompt = prompt._replace(text="\n\n".join([*self._ended, prompt.text]))
            self._ended.clear()
        self._call(self._enqueue(prompt, steer))

    def _cancel_task(self, task_id: str, envelope: ControlEnvelope) -> None:
        why = control_reason(envelope)
        given = self._task_id == task_id
        if given:
            self._task_id = None
            self._ended.append(render_task_ended(task_id, envelope.reason))
        self._call(self._drop_task(task_id, why, cancel=given))

    def _call(self, coro: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            return
        try:
            asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop stopped meanwhile
            coro.close()

    def _publish(self, event: RuntimeEvent, **fields: Any) -> None:
        """Loop thread: a runtime event, published from the core thread."""
        if not self._closing:
            self._ctx.post(lambda: None if self._closing else self._ctx.runtime(event, **fields))

    # ------------------------------------------------------------------ the loop thread

    def _run_loop(self, environ: dict[str, str]) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            self._main = loop.create_task(self._session(environ))
            loop.run_until_complete(self._main)
        except asyncio.CancelledError:
            pass
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _session(self, environ: dict[str, str]) -> None:
        try:  # in the agent's sandbox, if it has one; the ACP state directory kept writable
            argv, environ = self._ctx.sandboxed(self._opts.argv, environ, (str(self._agent_dir),))
            async with spawn_stdio_transport(
                argv[0], *argv[1:], env=environ, cwd=self._opts.cwd, limit=BUFFER_LIMIT
            ) as (reader, writer, process):
                lines = BoundedLines(reader)
                client = AgentClient(self)  # structurally the SDK's Client
                conn = connect_to_agent(client, writer, lines)  # type: ignore[arg-type]
                async with conn:  # closed before the transport is
                    await self._serve(conn, process, lines)
        except (OSError, SandboxUnavailable) as exc:
            self._failed(f"it could not start: {exc}", 127)

    async def _serve(self, conn: Any, process: Any, lines: BoundedLines) -> None:
        self._conn = conn
        exited = asyncio.create_task(process.wait())
        started = asyncio.create_task(self._open_session(conn))
        done, _ = await asyncio.wait(
            {exited, started},
            timeout=self._opts.startup_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if started not in done:
            started.cancel()
            if exited in done:
                self._gone(process.returncode, "before its session was open")
            else:
                exited.cancel()
                self._failed(f"no session within {self._opts.startup_timeout_s:g} s", 1)
            return
        if started.exception() is not None:
            exited.cancel()
            self._failed(f"its session could not open: {started.exception()}", 1)
            return
        turns = asyncio.create_task(self._turns(conn))
        unread = asyncio.create_task(lines.stopped.wait())
        await asyncio.wait({exited, turns, unread}, return_when=asyncio.FIRST_COMPLETED)
        turns.cancel()
        unread.cancel()
        if lines.output_ended and not exited.done():  # an exit closes the output first
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(exited), EXIT_AFTER_EOF_S)
        if exited.done():
            self._gone(process.returncode, "")
        else:  # the connection ended (frames it could not read): the agent is lost
            exited.cancel()
            why = f": {lines.broken}" if lines.broken else ""
            self._failed(f"the connection to it was lost{why}", 1)

    async def _open_session(self, conn: Any) -> None:
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="shepherd", version="1"),
        )
        caps = init.agent_capabilities
        saved = saved_session(self._agent_dir)
        if self._recovered and saved and caps is not None and caps.load_session:
            await conn.load_session(
                cwd=self._opts.cwd, session_id=saved, mcp_servers=[self._tools_server()]
            )
            self._session_id = saved
            how = f"session {saved} loaded again"
        else:
            answer = await conn.new_session(cwd=self._opts.cwd, mcp_servers=[self._tools_server()])
            self._session_id = answer.session_id
            if not self._own_dir:
                save_session(self._agent_dir, answer.session_id)
            how = f"session {answer.session_id}"
        info = init.agent_info
        name = f"{info.name} {info.version}" if info is not None else self._opts.argv[0]
        self._log.info("acp agent ready: {} ({})", name, how)
        self._publish("output", text=f"[shepherd] acp agent ready: {name}, {how}")

    def _tools_server(self) -> McpServerStdio:
        """The child tools (:mod:`actors.child.acp_tools`) as a stdio MCP server, with the
        variables that make its commands publish as this agent."""
        env = self._ctx.sandboxed((), self._environ)[1]  # sandboxed: no capability in it
        keep = {k: v for k, v in env.items() if k.startswith("SHEPHERD_")}
        keep["PYTHONPATH"] = env["PYTHONPATH"]
        keep["PATH"] = env.get("PATH", os.defpath)
        return McpServerStdio(
            name="shepherd",
            command=sys.executable,
            args=["-m", "actors.child.acp_tools"],
            env=[EnvVariable(name=k, value=v) for k, v in sorted(keep.items())],
        )

    async def _turns(self, conn: Any) -> None:
        """One prompt turn at a time, in order, until the connection ends."""
        while True:
            while not self._prompts or self._held:
                self._wake.clear()
                await self._wake.wait()
            prompt = self._prompts.popleft()
            self._turn_open, self._cancelling = True, False
            self._said = []
            self._publish("turn_start")
            self._log.info("prompt: {}", prompt.what)
            try:
                answer = await conn.prompt(
                    session_id=self._session_id, prompt=[text_block(prompt.text)]
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the agent answered the prompt with an error
                self._turn_open = False
                self._flush_said()
                self._publish("turn_end", is_error=True, text=head(str(exc), TEXT_LIMIT))
                continue
            self._turn_open = False
            self._flush_said()
            usage = answer.usage
            if usage is not None and usage.total_tokens > 0:
                self._publish("usage", tokens=min(usage.total_tokens, MAX_BUDGET_TOKENS), cost=0.0)
            reason = answer.stop_reason
            self._log.info("turn ended ({})", reason)
            self._publish("turn_end", is_error=reason == "refusal", text=reason)

    async def _enqueue(self, prompt: _Prompt, steer: bool) -> None:
        if steer:
            self._prompts.appendleft(prompt)
            if self._turn_open:
                await self._cancel_turn(f"{prompt.what} steers")
        else:
            self._prompts.append(prompt)
            if self._turn_open or self._held:
                lands = "no new turn until resume" if self._held else "lands after this turn"
                self._publish("output", text=f"[shepherd] {prompt.what} queued: {lands}")
        self._wake.set()

    async def _hold(self, held: bool) -> None:
        self._held = held
        self._wake.set()

    async def _drop_task(self, task_id: str, why: str, *, cancel: bool) -> None:
        before = len(self._prompts)
        self._prompts = collections.deque(p for p in self._prompts if p.task_id != task_id)
        dropped = before - len(self._prompts)
        if dropped:
            self._publish("output", text=f"[shepherd] {why}; {dropped} waiting prompts dropped")
        if cancel:
            await self._cancel_turn(why)

    async def _cancel_turn(self, why: str) -> None:
        if not self._turn_open or self._conn is None or self._session_id is None:
            return
        self._cancelling = True
        self._publish("output", text=f"[shepherd] {why}: cancelling the running turn")
        self._approval_cancelled.set()
        with contextlib.suppress(Exception):
            await self._conn.cancel(session_id=self._session_id)

    async def _shutdown(self) -> None:
        await self._cancel_turn("closing")
        if self._main is not None:
            self._main.cancel()

    # ------------------------------------------------------------------ ending

    def _gone(self, returncode: int | None, when: str) -> None:
        status = exit_status(returncode if returncode is not None else 1)
        self._failed(f"it exited with status {status}{' ' + when if when else ''}", status or 1)

    def _failed(self, why: str, code: int) -> None:
        if self._closing:
            return
        self._log.error("acp agent: {}", why)

        def report() -> None:
            if self._closing:
                return
            self._ctx.runtime("output", text=f"[shepherd] the ACP agent: {why}", is_error=True)
            self._ctx.finish(code)

        self._ctx.post(report)
