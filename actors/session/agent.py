"""AgentActor: the parent's side of one agent — its process, its inbox, its output.

It starts (or, after a parent restart, adopts) the agent's process through the injected
:class:`Launcher` (an in-process simulated agent, a ``shepherd-child`` process), publishes what
the broker routes to the agent into the agent's inbox, stamped with the agent's session and
capability, keeps the agent's recent output for ``read``, and reports the process's exit. The
agent's *process state* (starting / working / idle / exited) is the session's
(:mod:`protocol.session.agents`); this actor only knows whether its process is gone.

Rules:
- An exit the parent did not ask for (no ``close`` first) is reported with its reason: the
  start-up error it sent, else the last error in its log (a handle may offer ``log_tail()``:
  a bridge that dies at start, before its mailbox is open, has said nothing anywhere else),
  else what it said in its exit event, else the signal that killed it, else its log's last
  line, else why the launch failed. The log's tail goes into the agent's output,
  so ``read`` shows it, and the broker turns the reason into a notification.
- The actor outlives its process: once the process has exited it stays as the read model of
  the agent's last output (``read`` after an exit shows why), and refuses every delivery
  with ``DeliveryFailed`` (nobody would ever read the agent's inbox again).
"""

from __future__ import annotations

import contextlib
import itertools
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import msgspec
import pykka

from actors.runtime.crashpoints import crashpoint
from actors.runtime.log import logger
from actors.runtime.runtime import Runtime, ShepherdActor
from actors.runtime.transport import Transport
from actors.session.messages import (
    AgentExited,
    CloseAgent,
    Deliver,
    DeliveryFailed,
    Drain,
    ProcessExited,
    ReadOutput,
)
from protocol.calls import api
from protocol.core.errors import InvalidHandle, ShepherdError
from protocol.core.ids import PARENT_ID, IdKind
from protocol.wire.envelopes import ControlEnvelope, RuntimeEnvelope

__all__ = [
    "GONE_AT_RESTART",
    "AgentActor",
    "AgentHandle",
    "AgentSpec",
    "Launcher",
    "OutputBuffer",
    "OutputPage",
    "error_from_log",
    "last_words_in_log",
]

#: why an agent whose bridge did not outlive the old parent is gone (its exit status unknown)
GONE_AT_RESTART = "its bridge was not running when the parent restarted"

#: Lines of the agent's log quoted in its output when it exits unasked.
LOG_TAIL_LINES = 20
#: A reason (for a notification) is cut to this many characters.
REASON_CHARS = 500


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_from_log(lines: list[str]) -> str | None:
    """The last ERROR line of a bridge's log (loguru's ``time LEVEL agent | message``)."""
    for line in reversed(lines):
        head, sep, rest = line.partition(" | ")
        if sep and (" ERROR " in head or " CRITICAL " in head):
            return rest.removeprefix("fatal: ").strip() or None
    return None


def last_words_in_log(lines: list[str]) -> str | None:
    """The last line of a log that is not the bridge's own closing ``exit N (...)`` line (a
    Python traceback, for one, ends with its exception)."""
    for line in reversed(lines):
        _, sep, rest = line.partition(" | ")
        text = (rest if sep else line).strip()
        if text and not (sep and text.startswith("exit ")):
            return text
    return None


def _signal_name(code: int | None) -> str | None:
    """``SIGKILL`` for a status of 128 + 9 (how an exit by a signal is reported)."""
    try:
        return signal.Signals(code - 128).name if code is not None and code > 128 else None
    except ValueError:
        return None


class AgentSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a launcher needs to start an agent (the capability stays in-process)."""

    agent_id: str
    name: str
    session_id: str
    capability: str
    adapter: str
    options: dict[str, Any] = {}


class AgentHandle(Protocol):
    def stop(self) -> None:
        """Make the agent process exit (the launcher reports the exit through on_exit)."""

    # optional: ``log_tail(lines) -> list[str]``, the end of the agent's own log; and
    # ``exit_reason: str | None``, why it is gone when the launcher knows better than its log


class Launcher(Protocol):
    def spawn_options(
        self, name: str, adapter: str, script: Any, options: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """The adapter and options a spawn of ``name`` sends, given the ``script`` the caller
        of :meth:`Session.spawn` passed (what a script is depends on the launcher)."""

    def launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        """Start the agent. ``on_exit(code)`` must be called exactly once when it is gone."""

    def adopt(
        self, spec: AgentSpec, pid: int | None, on_exit: Callable[[int], None]
    ) -> AgentHandle:
        """Take over a still-running agent after a parent restart (its bridge reconnects).
        Raise :class:`~protocol.core.errors.ShepherdError` if ``pid`` is not this agent's bridge."""


class AgentActor(ShepherdActor):
    def __init__(
        self,
        spec: AgentSpec,
        launcher: Launcher,
        transport: Transport,
        broker: pykka.ActorRef[Any],
        output_lines: int,
        adopt: bool = False,
        adopt_pid: int | None = None,
        already_exited: bool = False,
    ) -> None:
        super().__init__()
        self.spec = spec
        self._adopt = adopt
        self._adopt_pid = adopt_pid
        self._already_exited = already_exited
        #: the process is gone (reported once; deliveries are refused from then on)
        self.exited = False
        self.exit_code: int | None = None
        self.output = OutputBuffer(output_lines)
        self.events: deque[RuntimeEnvelope] = deque(maxlen=200)
        self._launcher = launcher
        self._transport = transport
        self._broker = broker
        self._handle: AgentHandle | None = None
        self._closing = False
        self._ready = False
        self._last_error: str | None = None
        self._exit_text: str | None = None
        self._launch_error: str | None = None
        self._log = logger.bind(agent=spec.name, agent_id=spec.agent_id)

    def on_start(self) -> None:
        if self._already_exited:
            self.exited = True
            self.stop()
            return
        if self._adopt:
            self._adopt_bridge()
        else:
            self._launch()

    def _launch(self) -> None:
        crashpoint("spawn.before_launch")
        try:
            self._handle = self._launcher.launch(self.spec, self._exited)
        except Exception as exc:
            self._log.opt(exception=True).error("launch failed")
            self._launch_error = f"launch failed: {exc}"
            self.output.append(f"[shepherd] {self._launch_error}")
            self.actor_ref.tell(ProcessExited(exit_code=127))

    def _adopt_bridge(self) -> None:
        """After a parent restart: take over the bridge that outlived the old parent. A bridge
        that is gone is no crash of ours and has no exit status anyone could read: say so once,
        and let the broker fail its task with that reason."""
        self._ready = True  # it was running before the parent restarted, as far as we know
        try:
            self._handle = self._launcher.adopt(self.spec, self._adopt_pid, self._adopted_exited)
        except Exception as exc:
            if self._adopt_pid is None and isinstance(exc, InvalidHandle):
                # It never said ready and no process of it runs: the old parent died between
                # accepting the spawn and starting the bridge. The spawn was accepted, so it is
                # carried out now (still one process: none is running).
                self._ready = False
                self._log.info(
                    "{name}: never started before the restart; starting it now", name=self.spec.name
                )
                self._launch()
                return
            why = GONE_AT_RESTART
            if isinstance(exc, ShepherdError):
                self._log.warning(
                    "agent {name} ({id}): {why} ({detail})",
                    name=self.spec.name,
                    id=self.spec.agent_id,
                    why=why,
                    detail=exc.message,
                )
            else:  # a bug, not a missing bridge: keep its traceback
                self._log.opt(exception=True).error("adopting the bridge failed")
                why = f"its bridge could not be adopted after the parent restarted: {exc}"
            self._gone_at_restart(why)
            return
        self.output.append("[shepherd] adopted the running bridge after a parent restart")

    def _gone_at_restart(self, why: str) -> None:
        self.output.append(f"[shepherd] {why}")
        self.actor_ref.tell(ProcessExited(exit_code=None, reason=why))

    def _exited(self, code: int) -> None:
        if self.actor_ref.is_alive():
            self.actor_ref.tell(ProcessExited(exit_code=code))

    def _adopted_exited(self, _code: int) -> None:
        # an adopted bridge is not our child: its exit is seen, its status cannot be read
        if self.actor_ref.is_alive():
            self.actor_ref.tell(ProcessExited(exit_code=None))

    def on_receive(self, message: Any) -> Any:
        match message:
            case Deliver(envelope=env):
                self._deliver(env)
            case RuntimeEnvelope():
                self._runtime_event(message)
            case ProcessExited(exit_code=code, reason=reason):
                self._process_exited(code, reason)
            case CloseAgent(reason=reason):
                self._close(reason)
            case Drain():  # the session stops: what was told before is handled (FIFO)
                return None
            case ReadOutput(lines=n, before=before):
                page = self.output.page(n, before)
                return api.ReadResult(
                    agent_id=self.spec.agent_id,
                    lines=page.lines,
                    first=page.first,
                    next_cursor=page.first if page.first > page.oldest else None,
                )
            case _:
                return super().on_receive(message)
        return None

    def _process_exited(self, code: int | None, known: str | None = None) -> None:
        if self.exited:
            return
        before_ready = not self._ready
        reason = None if self._closing else known or self._exit_reason(code, before_ready)
        self.exited = True
        self.exit_code = code
        self._broker.tell(
            AgentExited(
                agent_id=self.spec.agent_id,
                exit_code=code,
                closing=self._closing,
                reason=reason,
                before_ready=before_ready,
            )
        )
        # not stopped: the actor stays as the read model of the agent's last output

    def _exit_reason(self, code: int | None, before_ready: bool) -> str | None:
        """Why the process is gone (it was not asked to go); its log's tail goes to output."""
        tail: list[str] = []
        log_tail = getattr(self._handle, "log_tail", None)
        if log_tail is not None:
            try:
                tail = list(log_tail(LOG_TAIL_LINES))
            except OSError as exc:
                self._log.warning("cannot read the agent's log: {}", exc)
        when = "before it was ready" if before_ready else "without being closed"
        status = f"with status {code}" if code is not None else "(its status unknown)"
        if tail:
            self.output.append(
                f"[shepherd] the agent process exited {status} {when}; its log ends:"
            )
            self.output.extend(tail)
        else:
            self.output.append(f"[shepherd] the agent process exited {status} {when}")
        # the most specific first: a start-up failure says so in its last error; later, the
        # bridge logs what went wrong, or says why it stopped in its exit event
        killed = _signal_name(code)
        candidates = (
            getattr(self._handle, "exit_reason", None),  # the launcher knows (a node lost)
            self._last_error if before_ready else None,
            error_from_log(tail),
            self._exit_text,
            f"killed by {killed}" if killed else None,
            last_words_in_log(tail),
            self._launch_error,
        )
        reason = next((c for c in candidates if c), None)
        return _cut(reason, REASON_CHARS) if reason else None

    def _deliver(self, env: Any) -> None:
        if self.exited:
            # nobody will read this agent's inbox again: say so instead of publishing
            self._broker.tell(
                DeliveryFailed(
                    envelope=env,
                    error=InvalidHandle(f"agent {self.spec.name} has exited").info(),
                )
            )
            return
        stamped = msgspec.structs.replace(
            env, session_id=self.spec.session_id, capability=self.spec.capability
        )
        try:
            self._transport.publish(self.spec.agent_id, stamped)
        except ShepherdError as exc:
            self._log.warning("delivery failed: {error}", error=exc.message)
            self._broker.tell(DeliveryFailed(envelope=env, error=exc.info()))

    def _runtime_event(self, env: RuntimeEnvelope) -> None:
        """What the agent's runtime events say about its output (its process state and its
        turns are the session's: the broker saw the same event first)."""
        match env.event:
            case "ready":
                self._ready = True
            case "output" | "error":
                if env.event == "error" and env.text:
                    self._last_error = env.text
                if env.text:
                    self.output.extend(env.text.splitlines() or [""])
            case "tool_call" | "tool_result":
                self.events.append(env)
                line = env.command if env.event == "tool_call" else env.output
                prefix = "$ " if env.event == "tool_call" else ""
                if line:
                    self.output.extend(f"{prefix}{x}" for x in line.splitlines()[-20:])
            case "exit":
                # the launcher observes the real exit; this is only the child's last word
                self._exit_text = env.text

    def _close(self, reason: str | None) -> None:
        if self._closing or self.exited:
            return
        self._closing = True
        control = ControlEnvelope(
            message_id=self.runtime.ids.new(IdKind.MESSAGE),
            session_id=self.spec.session_id,
            sender_id=PARENT_ID,
            target_id=self.spec.agent_id,
            created_at=self.clock.now(),
            action="close",
            reason=reason,
        )
        self._deliver(control)
        if self._handle is not None:
            try:
                self._handle.stop()
            except Exception:
                self._log.opt(exception=True).error("stopping the agent failed")
        else:
            self.actor_ref.tell(ProcessExited(exit_code=0))


class OutputPage(msgspec.Struct, frozen=True, kw_only=True):
    lines: tuple[str, ...]
    #: the number of ``lines[0]``: lines are numbered from 0, in the order the agent printed them
    first: int
    #: the number of the oldest line still kept (older ones were dropped by the bound)
    oldest: int


class OutputBuffer:
    """The agent's last ``limit`` output lines, numbered, so a reader can page back through
    them with a cursor (``before``) even while new lines push old ones out."""

    __slots__ = ("_end", "_lines")

    def __init__(self, limit: int) -> None:
        self._lines: deque[str] = deque(maxlen=limit)
        self._end = 0  # lines ever appended: the number the next line gets

    def append(self, line: str) -> None:
        self._lines.append(line)
        self._end += 1

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.append(line)

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)

    def page(self, count: int, before: int | None = None) -> OutputPage:
        """Up to ``count`` lines, the newest of those numbered below ``before`` (default: all)."""
        oldest = self._end - len(self._lines)
        end = self._end if before is None else max(oldest, min(before, self._end))
        start = max(oldest, end - max(count, 0))
        lines = tuple(itertools.islice(self._lines, start - oldest, end - oldest))
        return OutputPage(lines=lines, first=start, oldest=oldest)


def drain_agents(runtime: Runtime, timeout_s: float) -> None:
    """Before the session stops: every agent's actor has handled what was told to it before
    (an exit the launcher reported, which it tells the broker), each asked ``Drain`` at once
    and waited for at most ``timeout_s``. The broker's own drain, after it, then runs those
    exits too (an agent's exit is journaled, never overtaken by the session's end)."""
    drained = []
    for actor in runtime.actors():
        if isinstance(actor, AgentActor):
            with contextlib.suppress(pykka.ActorDeadError):
                drained.append(actor.actor_ref.ask(Drain(), block=False))
    for future in drained:
        with contextlib.suppress(Exception):  # gone meanwhile, or stuck: the session stops
            future.get(timeout=timeout_s)
