"""Matching Pi's RPC responses to the commands waiting for them (measured with Pi 0.73.1).

Rules:
- Every command gets an ``id`` (``shepherd-<n>``, unless the caller gave one); the response
  carrying that id resolves its caller. Pi answers a few errors (unknown command, parse error)
  without an id; such a response resolves the oldest caller waiting on the same command name.
- A response nobody waits for (its caller timed out and left) is ignored.
- Once Pi has exited (:meth:`PendingCalls.fail_all`, by the reader that reaped it) no command
  is accepted and every caller still waiting fails with :class:`PiExitedError`. Both happen
  under one lock, so a command is either failed there or refused: it never waits for an
  answer that cannot come.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from actors.child.pi.errors import PiError, PiExitedError

__all__ = ["PendingCalls", "Waiter"]


class Waiter:
    """One command waiting for its response (``done`` is set with ``response`` or ``error``)."""

    __slots__ = ("command", "done", "error", "response")

    def __init__(self, command: str) -> None:
        self.command = command
        self.done = threading.Event()
        self.response: dict[str, Any] | None = None
        self.error: PiError | None = None


class PendingCalls:
    """The commands sent to one Pi process and not answered yet (thread-safe). ``exited`` is
    the process's "has exited" flag: this table sets it, see the module rules."""

    def __init__(self, pid: int, exited: threading.Event) -> None:
        self._pid = pid
        self._exited = exited
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _waiting and the setting of _exited
        self._waiting: dict[str, Waiter] = {}

    def new_id(self) -> str:
        return f"shepherd-{next(self._ids)}"

    def expect(self, cmd_id: str, command: str) -> Waiter:
        """Wait for the response to ``cmd_id`` (a ``command`` about to be sent); raises
        :class:`PiExitedError` once Pi has exited."""
        waiter = Waiter(command)
        with self._lock:
            if self._exited.is_set():
                raise PiExitedError(f"pi (pid {self._pid}) has exited")
            self._waiting[cmd_id] = waiter
        return waiter

    def forget(self, cmd_id: str) -> None:
        """The caller of ``cmd_id`` stopped waiting (answered, timed out or failed to send)."""
        with self._lock:
            self._waiting.pop(cmd_id, None)

    def resolve(self, msg: dict[str, Any]) -> bool:
        """Hand a response to its caller; False if nobody waits for it."""
        with self._lock:
            waiter = None
            if "id" in msg:
                waiter = self._waiting.get(str(msg["id"]))
            else:
                # Parse errors and unknown commands come back without an id.
                waiter = next(
                    (w for w in self._waiting.values() if w.command == msg.get("command")), None
                )
        if waiter is None:
            return False
        waiter.response = msg
        waiter.done.set()
        return True

    def fail_all(self, returncode: int) -> None:
        """Pi exited with ``returncode``: refuse commands from now on, fail every caller."""
        with self._lock:
            self._exited.set()
            waiting = list(self._waiting.values())
        for waiter in waiting:
            waiter.error = PiExitedError(
                f"pi (pid {self._pid}) exited with {returncode} before answering {waiter.command!r}"
            )
            waiter.done.set()
