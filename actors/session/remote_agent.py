"""The handle of an agent placed on a node (:mod:`actors.session.placement`): what the session's
agent actor holds, as it holds a local bridge's :class:`~actors.session.launcher.ChildProcess`.
Its exit is reported once, whatever says it first (the node's report, a beat, a lost node)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from actors.runtime.log import logger
from actors.session.agent import AgentSpec
from protocol.wire import nodes

__all__ = ["RemoteAgent", "Stopper"]


class Stopper(Protocol):
    """What sends a stop to the node (:class:`actors.session.placement.NodeLauncher`)."""

    def send_stop(self, handle: RemoteAgent, how: str) -> None: ...


class RemoteAgent:
    """The :class:`~actors.session.agent.AgentHandle` of an agent on a node."""

    def __init__(self, launcher: Stopper, spec: AgentSpec, node: str, on_exit: Any) -> None:
        self._launcher = launcher
        self.session_id = spec.session_id
        self.agent_id = spec.agent_id
        self.name = spec.name
        self.node = node
        self.pid: int | None = None
        self.boot: str | None = None
        self.seq = 0
        #: why it is gone, when its node says nothing more (lost)
        self.exit_reason: str | None = None
        self.done = False
        self._killed = False
        self._tail: tuple[str, ...] = ()
        self._on_exit: Callable[[int], None] = on_exit
        self._lock = threading.Lock()

    def started(self, reply: nodes.NodeReply) -> None:
        self.pid, self.boot, self.seq = reply.pid, reply.boot, reply.seq

    def exited(self, code: int, tail: tuple[str, ...] = (), reason: str | None = None) -> None:
        """Report the exit, once."""
        with self._lock:
            if self.done:
                return
            self.done = True
            self._tail, self.exit_reason = tail, reason
        try:
            self._on_exit(code)
        except Exception:
            logger.opt(exception=True).error("on_exit callback failed")

    def log_tail(self, lines: int) -> list[str]:
        return list(self._tail[-lines:]) if lines > 0 else []

    def running(self) -> bool:
        return not self.done

    def stop(self) -> None:
        self._launcher.send_stop(self, "stop")

    def terminate(self) -> None:
        self.stop()

    def kill(self) -> None:
        self._launcher.send_stop(self, "kill")

    def kill_once(self) -> None:
        """Kill what a node still runs of an agent counted as gone (at most once)."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
        self.kill()
