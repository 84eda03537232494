"""Wakers: how the mailbox receiver is woken, behind one small :class:`Waker` protocol.

Rules:
- A wake-up is only a hint: a waker says which watched directories had files added, that its
  timeout passed, or that it was interrupted; it never says what arrived, so the receiver
  (:class:`~actors.transports.mailbox.watch.Receiver`) always rescans after one. A spurious wake, or
  a missed or merged event, costs latency, never a message.
- A waker watches its directories non-recursively (``new/`` only, never ``tmp/`` or
  ``cur/``), and its watch exists once it is *constructed* (the receiver drains after that).
- ``wait`` returns promptly when the interrupt event is set (close, a subscription change, a
  drain request); :class:`InterruptEvent` is also a descriptor, so a waker blocked in
  ``poll`` wakes at once.
- A waker says how it wakes each directory (a ``WAKE_*`` name), so a degraded inbox can be
  reported; one that cannot watch raises ``OSError`` from its factory, and the receiver polls.

This module holds the protocol and the portable wakers (watchfiles, polling); the Linux ones
are :mod:`actors.transports.mailbox.inotify` and :mod:`actors.transports.mailbox.bell`, which also
chooses each process's waker (:func:`~actors.transports.mailbox.bell.default_waker`).

:class:`WatchfilesWaker` drives watchfiles' ``RustNotify`` (the
object ``watchfiles.watch`` itself wraps) directly instead of the ``watchfiles.watch``
generator, for one reason: the inotify watches are registered when ``RustNotify`` is
*constructed*, so the receiver can construct it, then drain ``new/``, then wait — a file renamed
into ``new/`` between the drain and the watch can therefore never wait for the fallback poll.
The generator registers lazily inside its first ``next()``, which leaves exactly that window.
Its loop sleeps ``step_ms``, returns once the change set stopped growing for one step, or after
``debounce_ms`` under a continuous stream. Measured on a 2-core host, waking a reader in
another process: debounce 10 / step 1 gives 2.1 ms p50 / 2.7 ms p99 and 0.5 CPU-s per 30 s
idle over 100 inboxes; watchfiles' defaults (1600 / 50) give 78 ms p50. The Linux wakers
replace it behind the same :class:`Waker` protocol without touching the receiver.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from watchfiles._rust_notify import RustNotify

__all__ = [
    "DEFAULT_DEBOUNCE_MS",
    "DEFAULT_STEP_MS",
    "WAKE_BELL",
    "WAKE_INOTIFY",
    "WAKE_POLLING",
    "WAKE_WATCHFILES",
    "InterruptEvent",
    "ModeCallback",
    "PollingWaker",
    "Wake",
    "Waker",
    "WakerFactory",
    "WatchfilesWaker",
    "polling_waker",
    "watchfiles_waker",
]

#: Longest a burst of events is grouped before the receiver is woken (a stream denser than one
#: event per step waits this long, so it is kept short).
DEFAULT_DEBOUNCE_MS = 10
#: How often the watcher looks at its change set (idle wake latency is ~1.5 x step).
DEFAULT_STEP_MS = 1
#: How an inbox is woken (``Mailbox.wake_mode``, and ``status``): by an inotify watch, by its
#: doorbell (:mod:`actors.transports.mailbox.bell`), by watchfiles, or only by the fallback rescan.
WAKE_INOTIFY = "inotify"
WAKE_BELL = "bell"
WAKE_WATCHFILES = "watchfiles"
WAKE_POLLING = "polling"


@dataclass(frozen=True, slots=True)
class Wake:
    """Why :meth:`Waker.wait` returned.

    ``dirs``: watched directories that had files added (may be empty for a spurious wake);
    ``timed_out``: nothing happened for the whole timeout (the receiver then rescans all);
    ``interrupted``: the interrupt event was set.
    """

    dirs: frozenset[str] = field(default_factory=frozenset)
    timed_out: bool = False
    interrupted: bool = False


class InterruptEvent(threading.Event):
    """A ``threading.Event`` that is also a file descriptor: ``set`` writes a byte to a pipe,
    so a waker blocked in ``poll`` (the inotify one) wakes at once instead of polling the flag."""

    def __init__(self) -> None:
        super().__init__()
        self._fds_lock = threading.Lock()
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def fileno(self) -> int:
        return self._r

    def set(self) -> None:
        super().set()
        with self._fds_lock, contextlib.suppress(OSError):  # full (already readable) or closed
            if self._w >= 0:
                os.write(self._w, b"x")

    def clear(self) -> None:
        super().clear()
        with self._fds_lock, contextlib.suppress(OSError):
            while self._r >= 0 and os.read(self._r, 4096):
                pass

    def close(self) -> None:
        """Release the pipe (once: a closed descriptor number may already be someone else's)."""
        with self._fds_lock:
            fds, self._r, self._w = (self._r, self._w), -1, -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


class Waker(Protocol):
    """Wakes the receiver. A waker may also say how it wakes each directory: ``modes`` (a
    mapping from directory to one of the ``WAKE_*`` names) and ``problems`` (directory → why
    it is not woken the preferred way), or one ``mode`` for all; the receiver reads them with
    ``getattr`` so that a minimal waker needs neither."""

    def wait(self, timeout_ms: int) -> Wake:
        """Block until files are added to a watched directory, ``timeout_ms`` passes, or the
        interrupt event is set."""

    def close(self) -> None:
        """Release the watch. Idempotent."""


#: Builds a waker for these directories, returning early whenever the event is set.
#: Raises ``OSError`` if a directory cannot be watched (the receiver then polls).
WakerFactory = Callable[[Sequence[str], threading.Event], Waker]
#: Told (on the receiver thread) each key whose way of waking changed, with the new mode.
ModeCallback = Callable[[str, str], None]


class WatchfilesWaker:
    """Wake on files renamed (or created) into the watched directories, via watchfiles."""

    mode = WAKE_WATCHFILES

    def __init__(
        self,
        dirs: Sequence[str],
        interrupt: threading.Event,
        *,
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
        step_ms: int = DEFAULT_STEP_MS,
    ) -> None:
        if debounce_ms < 1 or step_ms < 1:
            # step 0 busy-polls (measured: a whole core); debounce 0 would return on the first event
            raise ValueError("debounce_ms and step_ms must be at least 1 ms")
        # imported here, not with the module: only a process that watches with watchfiles pays
        # for it (a short-lived command wakes its one inbox with a doorbell).
        # RustNotify is a private name, for the one reason the module docstring gives (the watch
        # must exist before the first drain, and watchfiles.watch() only makes it inside its
        # first next()). Checked against watchfiles 1.0.0, 1.1.x, 1.2.0 and 1.3.0 (the range
        # pyproject.toml allows): the constructor (watch_paths, debug, force_polling,
        # poll_delay_ms, recursive, ignore_permission_denied) and watch(debounce_ms, step_ms,
        # timeout_ms, stop_event) are the same in each, and are exactly how watchfiles.watch()
        # itself calls them.
        from watchfiles import Change
        from watchfiles._rust_notify import RustNotify

        self._added = Change.added
        self._interrupt = interrupt
        self._debounce_ms = debounce_ms
        self._step_ms = step_ms
        # Registration happens here, synchronously (see the module docstring).
        self._notify: RustNotify | None = RustNotify(
            list(dirs),
            False,  # debug
            False,  # force_polling
            300,  # poll_delay_ms, unused without force_polling
            False,  # recursive: only new/ itself, never tmp/ or cur/
            False,  # ignore_permission_denied
        )

    def wait(self, timeout_ms: int) -> Wake:
        notify = self._notify
        if notify is None:
            raise RuntimeError("waker is closed")
        raw = notify.watch(self._debounce_ms, self._step_ms, max(timeout_ms, 1), self._interrupt)
        if raw == "stop":
            return Wake(interrupted=True)
        if raw in ("timeout", "signal"):
            # 'signal' only happens on the main thread; treat it like a timeout (rescan all)
            return Wake(timed_out=True)
        assert not isinstance(raw, str)
        # Our own acknowledgements (rename out of new/) show up as deletions: filtered out.
        return Wake(
            dirs=frozenset(os.path.dirname(path) for change, path in raw if change == self._added)
        )

    def close(self) -> None:
        notify, self._notify = self._notify, None
        if notify is not None:
            notify.close()


class PollingWaker:
    """No watch at all: every wait is a timeout, so the receiver rescans on the fallback
    interval. Used when a watch cannot be set up, and by tests of the fallback path."""

    mode = WAKE_POLLING

    def __init__(self, dirs: Sequence[str], interrupt: threading.Event) -> None:
        del dirs
        self._interrupt = interrupt

    def wait(self, timeout_ms: int) -> Wake:
        if self._interrupt.wait(timeout_ms / 1000):
            return Wake(interrupted=True)
        return Wake(timed_out=True)

    def close(self) -> None:
        pass


def watchfiles_waker(
    *, debounce_ms: int = DEFAULT_DEBOUNCE_MS, step_ms: int = DEFAULT_STEP_MS
) -> WakerFactory:
    """A factory for :class:`WatchfilesWaker` with these timings."""

    def make(dirs: Sequence[str], interrupt: threading.Event) -> Waker:
        return WatchfilesWaker(dirs, interrupt, debounce_ms=debounce_ms, step_ms=step_ms)

    return make


def polling_waker() -> WakerFactory:
    """A factory for :class:`PollingWaker` (fallback rescans only)."""
    return PollingWaker
