"""Wake-ups for the mailbox receiver: *when* to rescan, never *what* was delivered.

Rules:
- A wake-up is only a hint (STYLE convention 10). The receiver always rescans ``new/`` in name
  order after one, and rescans every inbox on a timeout, so a missed or merged event costs
  latency (at most the fallback interval), never a message.
- One waker watches every ``new/`` directory of one process, non-recursively. It is rebuilt
  (not extended) when the set of subscribed inboxes changes, which is rare: a process owns one
  inbox, plus one per CLI call in a client.
- ``wait`` returns promptly when the receiver's interrupt event is set (close, a subscription
  change, a drain request): the event is checked every ``step`` milliseconds.

Theory of operation for :class:`WatchfilesWaker`: it drives watchfiles' ``RustNotify`` (the
object ``watchfiles.watch`` itself wraps) directly instead of the ``watchfiles.watch``
generator, for one reason: the inotify watches are registered when ``RustNotify`` is
*constructed*, so the receiver can construct it, then drain ``new/``, then wait — a file renamed
into ``new/`` between the drain and the watch can therefore never wait for the fallback poll.
The generator registers lazily inside its first ``next()``, which leaves exactly that window.
Its loop sleeps ``step_ms``, returns once the change set stopped growing for one step, or after
``debounce_ms`` under a continuous stream (PERF.md: debounce 10 / step 1 gives ~2 ms p50 at
~0.5 CPU-s per 30 s idle). A Linux inotify waker can replace it behind the same
:class:`Waker` protocol (issue 7) without touching the receiver.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from watchfiles import Change
from watchfiles._rust_notify import RustNotify

__all__ = [
    "DEFAULT_DEBOUNCE_MS",
    "DEFAULT_STEP_MS",
    "PollingWaker",
    "Wake",
    "Waker",
    "WakerFactory",
    "WatchfilesWaker",
    "polling_waker",
    "watchfiles_waker",
]

#: Longest a burst of events is grouped before the receiver is woken (PERF.md).
DEFAULT_DEBOUNCE_MS = 10
#: How often the watcher looks at its change set (idle wake latency is ~1.5 x step).
DEFAULT_STEP_MS = 1


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


class Waker(Protocol):
    def wait(self, timeout_ms: int) -> Wake:
        """Block until files are added to a watched directory, ``timeout_ms`` passes, or the
        interrupt event is set."""

    def close(self) -> None:
        """Release the watch. Idempotent."""


#: Builds a waker for these directories, returning early whenever the event is set.
#: Raises ``OSError`` if a directory cannot be watched (the receiver then polls).
WakerFactory = Callable[[Sequence[str], threading.Event], Waker]


class WatchfilesWaker:
    """Wake on files renamed (or created) into the watched directories, via watchfiles."""

    def __init__(
        self,
        dirs: Sequence[str],
        interrupt: threading.Event,
        *,
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
        step_ms: int = DEFAULT_STEP_MS,
    ) -> None:
        if debounce_ms < 1 or step_ms < 1:
            # step 0 burns a whole core (PERF.md); debounce 0 would return on the first event
            raise ValueError("debounce_ms and step_ms must be at least 1 ms")
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
            dirs=frozenset(os.path.dirname(path) for change, path in raw if change == Change.added)
        )

    def close(self) -> None:
        notify, self._notify = self._notify, None
        if notify is not None:
            notify.close()


class PollingWaker:
    """No watch at all: every wait is a timeout, so the receiver rescans on the fallback
    interval. Used when a watch cannot be set up, and by tests of the fallback path."""

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
