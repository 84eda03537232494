"""AgentActor: the parent's side of one agent — its process, its inbox, its output.

It owns the agent's *process state* (starting / working / idle / exited), which is a
separate thing from its task's state and never feeds into it (DESIGN §2). It publishes what
the broker routes to the agent into the agent's inbox, stamped with the agent's session and
capability, keeps the agent's recent output for ``read``, and reports the process's exit.
How the agent is run (an in-process simulated agent, a ``shepherd-child`` process) is the
injected :class:`Launcher`'s business.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import msgspec
import pykka
from loguru import logger

from actors.messages import (
    AgentExited,
    AgentStateChanged,
    CloseAgent,
    Deliver,
    DeliveryFailed,
    ProcessExited,
    ReadOutput,
)
from actors.runtime import ShepherdActor
from actors.transport import Transport
from protocol.envelopes import ControlEnvelope, RuntimeEnvelope
from protocol.errors import ShepherdError
from protocol.ids import PARENT_ID, IdKind

__all__ = [
    "GONE_AT_RESTART",
    "AgentActor",
    "AgentHandle",
    "AgentSpec",
    "Launcher",
    "OutputBuffer",
    "OutputPage",
]

#: why an agent whose bridge did not outlive the old parent is gone (its exit status unknown)
GONE_AT_RESTART = "its bridge was not running when the parent restarted"


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


class Launcher(Protocol):
    def launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        """Start the agent. ``on_exit(code)`` must be called exactly once when it is gone."""

    def adopt(
        self, spec: AgentSpec, pid: int | None, on_exit: Callable[[int], None]
    ) -> AgentHandle:
        """Take over a still-running agent after a parent restart (its bridge reconnects).
        Raise :class:`~protocol.errors.ShepherdError` if ``pid`` is not this agent's bridge."""


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
        self.process_state = "starting"
        self.exit_code: int | None = None
        self.output = OutputBuffer(output_lines)
        self.events: deque[RuntimeEnvelope] = deque(maxlen=200)
        self._launcher = launcher
        self._transport = transport
        self._broker = broker
        self._handle: AgentHandle | None = None
        self._closing = False
        self._log = logger.bind(agent=spec.name, agent_id=spec.agent_id)

    def on_start(self) -> None:
        if self._already_exited:
            self.process_state = "exited"
            self.stop()
            return
        if self._adopt:
            self._adopt_bridge()
            return
        try:
            self._handle = self._launcher.launch(self.spec, self._exited)
        except Exception as exc:
            self._log.opt(exception=True).error("launch failed")
            self.output.append(f"[shepherd] launch failed: {exc}")
            self.actor_ref.tell(ProcessExited(exit_code=127))

    def _adopt_bridge(self) -> None:
        """After a parent restart: take over the bridge that outlived the old parent. A bridge
        that is gone is no crash of ours and has no exit status anyone could read: say so once,
        and let the broker fail its task with that reason."""
        try:
            self._handle = self._launcher.adopt(self.spec, self._adopt_pid, self._adopted_exited)
        except Exception as exc:
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
            self.output.append(f"[shepherd] {why}")
            self.actor_ref.tell(ProcessExited(exit_code=None, reason=why))
            return
        self.output.append("[shepherd] adopted the running bridge after a parent restart")

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
                self._set_state("exited", exit_code=code)
                self._broker.tell(
                    AgentExited(
                        agent_id=self.spec.agent_id,
                        exit_code=code,
                        closing=self._closing,
                        reason=reason,
                    )
                )
                self.stop()
            case CloseAgent(reason=reason):
                self._close(reason)
            case ReadOutput(lines=n, before=before):
                return self.output.page(n, before)
            case _:
                return super().on_receive(message)
        return None

    def _deliver(self, env: Any) -> None:
        stamped = msgspec.structs.replace(
            env, session_id=self.spec.session_id, capability=self.spec.capability
        )
        try:
            self._transport.publish(self.spec.agent_id, stamped)
        except ShepherdError as exc:
            self._log.warning("delivery failed: {error}", error=exc.message)
            self._broker.tell(DeliveryFailed(envelope=env, error=exc.info()))

    def _runtime_event(self, env: RuntimeEnvelope) -> None:
        match env.event:
            case "ready":
                if self.process_state == "starting":  # in_turn: re-adopted mid-turn
                    self._set_state("working" if env.in_turn else "idle")
            case "turn_start":
                self._set_state("working")
            case "turn_end":
                self._set_state("idle")  # a turn ending settles nothing (DESIGN §1.1)
            case "output" | "error":
                if env.text:
                    self.output.extend(env.text.splitlines() or [""])
            case "tool_call" | "tool_result":
                self.events.append(env)
                line = env.command if env.event == "tool_call" else env.output
                prefix = "$ " if env.event == "tool_call" else ""
                if line:
                    self.output.extend(f"{prefix}{x}" for x in line.splitlines()[-20:])
            case "exit":
                pass  # the launcher observes the real exit; this is only the child's last word

    def _set_state(self, state: str, *, exit_code: int | None = None) -> None:
        if self.process_state == "exited":
            return
        self.process_state = state
        if exit_code is not None:
            self.exit_code = exit_code
        self._broker.tell(
            AgentStateChanged(
                agent_id=self.spec.agent_id,
                process_state=state,
                at=self.clock.now(),
                exit_code=exit_code,
            )
        )

    def _close(self, reason: str) -> None:
        if self._closing:
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
