"""The bridge's watch on its parent (so that no agent outlives it): notice the parent's death, then
wait a while for a restarted parent to take the session over.

Rules:
- :class:`ParentWatch` calls back once, from its own thread, when the parent pid exits; it
  holds a pidfd on the parent, so a reused pid can never look like a live parent.
- :class:`Reconnect` waits at most the reconnect window (:func:`reconnect_window_s`) for
  ``session.json`` to name a *different*, live parent pid; it calls back at most once, with
  that pid or on time-out, and stops polling when closed.
- Both only call back: the bridge posts the callbacks to its core thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path

from actors.runtime.procs import pid_alive

__all__ = ["ParentWatch", "Reconnect", "reconnect_window_s"]


class ParentWatch:
    """Calls ``on_gone`` (once, from its own thread) when process ``pid`` exits.

    Uses a pidfd (``os.pidfd_open``: Linux >= 5.3, race-free against pid reuse once open) in
    ``poll`` beside a stop pipe; without pidfd support it checks ``kill(pid, 0)`` every second.
    A parent that is already gone at :meth:`start` fires ``on_gone`` at once."""

    def __init__(self, pid: int, on_gone: Callable[[], None], *, poll_s: float = 1.0) -> None:
        self._pid = pid
        self._on_gone = on_gone
        self._poll_s = poll_s
        self._pidfd: int | None = None
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None

    def start(self) -> ParentWatch:
        try:
            self._pidfd = os.pidfd_open(self._pid)
        except ProcessLookupError:
            self._on_gone()
            return self
        except (OSError, AttributeError):
            self._pidfd = None  # no pidfd support: poll with kill(pid, 0)
        self._thread = threading.Thread(target=self._run, name="shepherd-parent-watch", daemon=True)
        self._thread.start()
        return self

    def _alive(self) -> bool:
        return pid_alive(self._pid)
        return True

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._stop_r, select.POLLIN)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        timeout_ms = None if self._pidfd is not None else int(self._poll_s * 1000)
        while True:
            fds = {fd for fd, _ in poller.poll(timeout_ms)}
            if self._stop_r in fds:
                return
            if (self._pidfd is not None and self._pidfd in fds) or (
                self._pidfd is None and not self._alive()
            ):
                self._on_gone()
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in (self._pidfd, self._stop_r, self._stop_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._pidfd = None


def reconnect_window_s() -> float:
    """How long an orphaned bridge waits for a restarted parent (``SHEPHERD_RECONNECT_S``)."""
    try:
        return float(os.environ.get("SHEPHERD_RECONNECT_S", "30"))
    except ValueError:
        return 30.0


class Reconnect:
    """Waits (on its own thread) for ``session.json`` to name a new, live parent pid.

    A file watch would add a dependency on the directory's watcher for a rare event; reading
    one small file every 100 ms for at most the reconnect window is cheaper and simpler."""

    def __init__(
        self,
        session_file: Path,
        gone_pid: int | None,
        window_s: float,
        *,
        on_back: Callable[[int], None],
        on_timeout: Callable[[], None],
        monotonic: Callable[[], float],
    ) -> None:
        self._monotonic = monotonic
        self._file = session_file
        self._gone = gone_pid
        self._window_s = window_s
        self._on_back = on_back
        self._on_timeout = on_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shepherd-reconnect", daemon=True)

    def start(self) -> Reconnect:
        self._thread.start()
        return self

    def _new_parent(self) -> int | None:
        try:
            pid = json.loads(self._file.read_bytes())["parent_pid"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(pid, int) or pid == self._gone:
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return None
        return pid

    def _run(self) -> None:
        deadline = self._monotonic() + self._window_s
        while not self._stop.is_set():
            pid = self._new_parent()
            if pid is not None:
                self._on_back(pid)
                return
            if self._monotonic() >= deadline:
                self._on_timeout()
                return
            self._stop.wait(0.1)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
