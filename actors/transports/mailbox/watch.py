"""The mailbox receiver thread: *when* to rescan an inbox, never *what* a rescan does.

Rules:
- A wake-up is only a hint. The receiver always rescans ``new/`` in name
  order after one, and rescans every inbox on a timeout, so a missed or merged event costs
  latency (at most the fallback interval), never a message.
- One waker watches every ``new/`` directory of one process, non-recursively. It is rebuilt
  (not extended) when the set of subscribed inboxes changes, which is rare: a process owns one
  inbox, plus one per CLI call in a client.
- ``wait`` returns promptly when the receiver's interrupt event is set (close, a subscription
  change, a drain request): the event is checked every ``step`` milliseconds.

Theory of operation: :class:`Receiver` owns one thread. It builds one waker over all the watched
directories, calls ``drain(key)`` for every one of them (recovery, and anything that arrived
before the watch existed), then loops: wait → drain the keys whose directory saw files added;
on a timeout, an interrupt, or every ``fallback_s`` under a steady stream, drain them all, in
case an event was missed. If the watch cannot be built or breaks, it polls on the fallback
interval, and tries to build a real one again every :data:`REBUILD_DEGRADED_S`. ``close``
sets the stop event the waker polls, and joins.

How each key is woken (a ``WAKE_*`` name: the waker's ``modes``, or ``polling`` when no waker
could be built) is kept for :meth:`Receiver.mode_of`; each change is logged (a warning when a
key is only polled) and told to the ``on_mode`` callback, so a degraded inbox is reported,
not only logged. The wakers themselves, and the :class:`~actors.transports.mailbox.wakers.Waker`
protocol they share, are :mod:`actors.transports.mailbox.wakers`; which waker each process uses is
:func:`actors.transports.mailbox.bell.default_waker`'s choice.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping

from actors.runtime.log import logger
from actors.transports.mailbox.wakers import (
    WAKE_POLLING,
    InterruptEvent,
    ModeCallback,
    PollingWaker,
    Waker,
    WakerFactory,
)

__all__ = ["REBUILD_DEGRADED_S", "Receiver"]

#: How often a receiver that polls some inbox tries to build a real waker again (an inotify
#: instance may have been freed, a refused doorbell repaired).
REBUILD_DEGRADED_S = 10.0


class Receiver:
    """One background thread that calls ``drain(key)`` whenever ``key``'s directory may have
    new files. Keys are added with :meth:`watch` and removed with :meth:`unwatch`.

    ``drain(key)`` returns False when it stopped with files left (its turn's budget ran out, so
    other keys get a turn): the receiver then runs another full pass at once instead of waiting
    for an event. A drain request is answered by the first full pass in which every drain
    returned True.
    """

    def __init__(
        self,
        drain: Callable[[str], bool],
        waker_factory: WakerFactory,
        fallback_s: float,
        *,
        thread_name: str = "shepherd-mailbox-receiver",
        on_mode: ModeCallback | None = None,
        rebuild_degraded_s: float = REBUILD_DEGRADED_S,
    ) -> None:
        self._drain = drain
        self._rebuild_degraded_s = rebuild_degraded_s
        self._on_mode = on_mode
        self._modes: dict[str, str] = {}  # key -> how its directory is woken now
        self._waker_factory = waker_factory
        self._fallback_s = max(fallback_s, 0.01)
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._interrupt = InterruptEvent()  # close, a change of keys, or a drain request
        self._dirs: dict[str, str] = {}
        self._generation = 0
        self._drain_requested = 0
        self._drain_done = 0
        self._finished = False
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        """True once :meth:`close` was called: a long drain should return early."""
        return self._stop.is_set()

    def on_thread(self) -> bool:
        """True when called from the receiver thread (a handler)."""
        return self._thread is threading.current_thread()

    def watch(self, key: str, directory: str) -> None:
        """Watch ``directory`` for ``key`` (starting the thread if needed) and drain it soon."""
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("receiver is closed")
            if self._dirs.get(key) != directory:
                self._dirs[key] = directory
                self._generation += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=self._thread_name, daemon=True
                )
                self._thread.start()
        self._interrupt.set()

    def mode_of(self, key: str) -> str | None:
        """How ``key``'s directory is woken now (a ``WAKE_*`` name); None until the receiver
        built its first waker over it."""
        with self._lock:
            return self._modes.get(key)

    def unwatch(self, key: str) -> None:
        with self._lock:
            if self._dirs.pop(key, None) is None:
                return
            self._generation += 1
        self._interrupt.set()

    def wait_drained(self, timeout_s: float) -> bool:
        """Block until every watched key was drained after this call. False on timeout/close."""
        with self._cond:
            if self.on_thread():
                raise RuntimeError("waiting for a drain from the receiver thread would deadlock")
            if self._thread is None:
                return not self._stop.is_set()
            self._drain_requested += 1
            target = self._drain_requested
            self._interrupt.set()
            self._cond.wait_for(
                lambda: self._drain_done >= target or self._stop.is_set() or self._finished,
                timeout_s,
            )
            return self._drain_done >= target

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread within about one waker step (or after the running ``drain`` call)."""
        with self._cond:
            thread = self._thread
            self._stop.set()
            self._cond.notify_all()
        self._interrupt.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                logger.error("mailbox: receiver thread did not stop (a handler is blocked)")
                return
        if thread is None or not thread.is_alive():
            self._interrupt.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._interrupt.clear()  # before reading the keys: a later change re-sets it
                with self._lock:
                    generation = self._generation
                    dirs = dict(self._dirs)
                if dirs:
                    self._watch(generation, dirs)
                else:
                    self._drain_all()  # answers drain requests while nothing is watched
                    self._interrupt.wait()
        except Exception:
            logger.exception("mailbox: receiver thread failed")
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _watch(self, generation: int, dirs: dict[str, str]) -> None:
        """One waker over ``dirs`` until the set of keys changes or we stop (or, when some
        directory is only polled, until :data:`REBUILD_DEGRADED_S` passed: then try again)."""
        waker: Waker
        problem = None
        try:
            waker = self._waker_factory(list(dirs.values()), self._interrupt)
        except (OSError, RuntimeError) as exc:  # watchfiles' internal error is a RuntimeError
            problem = str(exc)
            waker = PollingWaker(list(dirs.values()), self._interrupt)
        degraded = self._record_modes(waker, dirs, problem)
        built = time.monotonic()
        keys_by_dir = {os.path.normpath(d): key for key, d in dirs.items()}
        timeout_ms = max(int(self._fallback_s * 1000), 1)
        try:
            self._drain_all()  # after the watch exists: nothing can slip in between
            last_full = time.monotonic()
            while not self._stop.is_set():
                try:
                    wake = waker.wait(timeout_ms)
                except Exception as exc:
                    logger.warning("mailbox: watcher failed ({}); rebuilding it", exc)
                    self._drain_all()  # what the broken waker may have missed
                    self._stop.wait(self._fallback_s)
                    return
                if wake.interrupted:
                    self._interrupt.clear()
                    with self._lock:
                        if self._generation != generation:
                            return
                keys = {keys_by_dir.get(os.path.normpath(d)) for d in wake.dirs}
                if (
                    wake.interrupted
                    or wake.timed_out
                    or None in keys
                    or time.monotonic() - last_full >= self._fallback_s
                ):
                    self._drain_all()
                    last_full = time.monotonic()
                    if degraded and last_full - built >= self._rebuild_degraded_s:
                        return  # try a real waker again
                else:
                    for key in sorted(k for k in keys if k is not None):
                        if not self._drain_one(key):
                            self._interrupt.set()  # files left: come straight back
        finally:
            waker.close()

    def _record_modes(self, waker: Waker, dirs: dict[str, str], problem: str | None) -> bool:
        """Remember how each key is woken now; log and report each change. True if some
        directory is only polled."""
        modes: Mapping[str, str] | None = getattr(waker, "modes", None)
        problems: Mapping[str, str] = getattr(waker, "problems", None) or {}
        default = getattr(waker, "mode", WAKE_POLLING if problem else "unknown")
        changed: list[tuple[str, str]] = []
        degraded = False
        with self._lock:
            for key, directory in dirs.items():
                mode = modes.get(directory, WAKE_POLLING) if modes is not None else default
                degraded = degraded or mode == WAKE_POLLING
                if self._modes.get(key) != mode:
                    self._modes[key] = mode
                    changed.append((key, mode))
            for key in set(self._modes) - set(dirs):
                del self._modes[key]
        for key, mode in changed:
            why = problem or problems.get(dirs[key])
            if mode == WAKE_POLLING:
                logger.warning(
                    "mailbox: inbox {} is only polled, every {} s ({})",
                    key,
                    self._fallback_s,
                    why or "no waker",
                )
            else:
                logger.debug("mailbox: inbox {} is woken by {}", key, mode)
            if self._on_mode is not None:
                try:
                    self._on_mode(key, mode)
                except Exception:
                    logger.exception("mailbox: the wake-mode callback failed")
        return degraded

    def _drain_all(self) -> None:
        with self._lock:
            target = self._drain_requested
            keys = list(self._dirs)
        complete = True
        for key in keys:
            if self._stop.is_set():
                return
            complete = self._drain_one(key) and complete
        if not complete:
            self._interrupt.set()  # files left: another pass right away, fair to every key
            return
        with self._cond:
            self._drain_done = max(self._drain_done, target)
            self._cond.notify_all()

    def _drain_one(self, key: str) -> bool:
        try:
            return self._drain(key)
        except Exception:
            logger.exception("mailbox: draining {!r} failed", key)
            return True  # logged; retried on the next wake or fallback pass
