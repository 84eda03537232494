"""Injected time: every actor reads the time and starts its timers through a :class:`Clock`,
so the simulation decides when anything happens. Only the edges that wait on the world read
the system's clock themselves (a child's outbox pacing its retries, the mailbox's doorbell
and rescan, the NATS connection's outage waits and claim lease, a server's start, the node
launcher's asking again, the demo's pacing, log time stamps); none of them is an actor's rule.

:class:`Clock` is the whole protocol, and everything that takes a clock types it so:
``now`` (wall time, for records), ``monotonic`` (for durations and deadlines), ``call_later``
(a timer, cancellable) and ``close`` (cancels every timer; later ones never fire).
:class:`SystemClock` runs every timer of a process on ONE thread (a heap and a condition),
not one thread per timer; callbacks only ``tell`` actors, so they are short.
:class:`VirtualClock` moves only when the simulation advances it, and never backwards
(:meth:`VirtualClock.jump` to an earlier time raises).

Because one thread serves every timer of a process, nothing may stop it: a callback that
raises is logged and the loop goes on; a delay that is not a number is refused at the caller
(``ValueError``), never put in the heap; a delay beyond :data:`MAX_DELAY_S` is held at that
(it cannot come due while the process lives), and the thread never waits longer than
:data:`_MAX_WAIT_S` at a time (a wait of 1e300 s once raised ``OverflowError`` in the thread and
silently stopped every deadline of the session).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from actors.runtime.log import logger

__all__ = ["MAX_DELAY_S", "Clock", "SystemClock", "TimerHandle", "VirtualClock"]

#: the longest delay a timer keeps (ten years); longer ones (and +inf) are held at this
MAX_DELAY_S = 10 * 365 * 86_400.0
#: the timer thread re-checks its heap at least this often
_MAX_WAIT_S = 3600.0


def _delay(delay: float) -> float:
    """A timer's delay, made safe for the heap: ``ValueError`` for NaN (a bug at the caller,
    reported there), negative → 0, too long → :data:`MAX_DELAY_S`."""
    if math.isnan(delay):
        raise ValueError("a timer delay must be a number, not NaN")
    return min(max(0.0, delay), MAX_DELAY_S)


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall time for records; timers use their own base)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, deadlines); its zero is
        arbitrary."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        """Run ``callback`` once after ``delay`` seconds, unless cancelled first."""

    def close(self) -> None:
        """Cancel every pending timer; a timer set afterwards is cancelled at once."""


class _Timer:
    __slots__ = ("callback", "cancelled", "deadline", "owner", "seq")

    def __init__(
        self,
        deadline: float,
        seq: int,
        callback: Callable[[], object],
        owner: SystemClock | None = None,
    ) -> None:
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.cancelled = False
        #: the clock whose heap holds this timer (None once it left the heap)
        self.owner = owner

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self.callback = _noop
        owner = self.owner
        if owner is not None:
            owner._forget(self)

    def __lt__(self, other: _Timer) -> bool:
        # (deadline, seq) order, without making two tuples at each of the heap's comparisons
        if self.deadline != other.deadline:
            return self.deadline < other.deadline
        return self.seq < other.seq


def _noop() -> None:
    return None


def _fire(timer: _Timer) -> None:
    try:
        timer.callback()
    except BaseException as exc:  # an observer must never take the timer thread down
        if isinstance(exc, KeyboardInterrupt | SystemExit) and (
            threading.current_thread() is threading.main_thread()
        ):
            raise  # the simulation fires timers on the caller's thread: let those through
        logger.opt(exception=True).error("timer callback failed")


#: a heap is compacted once it holds more cancelled timers than this and than live ones
_COMPACT_AFTER = 256


class SystemClock:
    """Real time; one daemon timer thread per clock, started on first use.

    Setting a timer takes no lock unless the timer thread must wake for it: a new timer goes
    into an incoming queue (``deque.append``: atomic), which the thread moves into its heap
    whenever it is awake, and it is woken (under the lock) only for a timer due before the
    one it sleeps until. Taking the lock on every timer made a burst of them (a thousand
    watchers opening their windows at once) a convoy with the timer thread: a worker that
    found the lock held gave up the interpreter lock to wait for it, and each hand-over cost
    tens of microseconds.

    A cancelled timer stays in the heap (cheap: its callback is dropped at once) until it
    reaches the top, or until cancelled timers outnumber the live ones (and
    :data:`_COMPACT_AFTER`): then the heap is rebuilt without them, so a busy session that
    cancels most of its timers (stale-wait, reply and task deadlines) holds memory for the
    timers that can still fire, not for every one it ever set."""

    def __init__(self) -> None:
        self._heap: list[_Timer] = []
        #: timers set and not yet in the heap (the timer thread moves them, under the lock)
        self._incoming: deque[_Timer] = deque()
        #: the deadline the timer thread sleeps until: a timer due before it wakes the thread;
        #: -inf while the thread is awake (it looks at the incoming timers before it sleeps)
        self._wake_at = -math.inf
        #: cancelled timers in the heap or incoming
        self._cancelled = 0
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        timer = _Timer(time.monotonic() + _delay(delay), next(self._seq), callback, self)
        self._incoming.append(timer)
        # read after the append: a thread that went to sleep before it saw the timer had set
        # the deadline it sleeps until first (under the lock it holds until it waits)
        if timer.deadline < self._wake_at or self._thread is None:
            with self._cond:
                if self._thread is None and not self._closed:
                    self._thread = threading.Thread(
                        target=self._run, name="shepherd-timer", daemon=True
                    )
                    self._thread.start()
                self._cond.notify()
        if self._closed:  # closed meanwhile: what close did not see is cancelled here
            timer.cancel()
        return timer

    def _forget(self, timer: _Timer) -> None:
        """``timer`` (in this heap, or incoming) was cancelled; compact the heap if they pile
        up."""
        with self._cond:
            if timer.owner is None:  # popped meanwhile
                return
            self._cancelled += 1
            held = len(self._heap) + len(self._incoming)
            if self._cancelled > _COMPACT_AFTER and 2 * self._cancelled > held:
                live = []
                for each in self._take_incoming():
                    self._heap.append(each)
                for each in self._heap:
                    if each.cancelled:
                        each.owner = None
                    else:
                        live.append(each)
                heapq.heapify(live)
                self._heap = live
                self._cancelled = 0

    def _take_incoming(self) -> list[_Timer]:
        """The timers set since the last look (under the lock)."""
        incoming = self._incoming
        return [incoming.popleft() for _ in range(len(incoming))]

    def _pop(self) -> _Timer:
        timer = heapq.heappop(self._heap)
        timer.owner = None
        if timer.cancelled:
            self._cancelled -= 1
        return timer

    def _run(self) -> None:
        while True:
            try:
                due = self._next_due()
            except Exception:  # nothing may stop the one timer thread: log, go on
                logger.opt(exception=True).error("timer thread error; continuing")
                continue
            if due is None:
                return
            for timer in due:  # in deadline order
                _fire(timer)

    def _next_due(self) -> list[_Timer] | None:
        """Block until the earliest timer is due, and pop every timer due by then (a burst of
        timers due together costs one wake-up and one hold of the lock, not one each); None
        once closed."""
        with self._cond:
            while not self._closed:
                self._wake_at = -math.inf  # awake: a timer set now is seen before it sleeps
                for timer in self._take_incoming():
                    heapq.heappush(self._heap, timer)
                while self._heap and self._heap[0].cancelled:
                    self._pop()
                now = time.monotonic()
                if self._heap and self._heap[0].deadline <= now:
                    due = []
                    while self._heap and self._heap[0].deadline <= now:
                        timer = self._pop()
                        if not timer.cancelled:
                            due.append(timer)
                    return due
                # the deadline it sleeps until, THEN a last look at what came meanwhile: a
                # timer set after that look reads this deadline, and wakes it if due before
                self._wake_at = self._heap[0].deadline if self._heap else math.inf
                if self._incoming:
                    continue
                if not self._heap:
                    self._cond.wait()
                else:
                    self._cond.wait(min(self._heap[0].deadline - now, _MAX_WAIT_S))
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for timer in [*self._heap, *self._take_incoming()]:
                timer.owner = None
                timer.cancel()
            self._heap.clear()
            self._cancelled = 0
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class VirtualClock:
    """Simulated time: :meth:`fire_next` jumps to the next timer and fires it; :meth:`jump`
    moves forward. ``now`` and ``monotonic`` read the same virtual seconds."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self._now = start
        self._heap: list[_Timer] = []
        self._seq = itertools.count()
        self._closed = False

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        timer = _Timer(self._now + _delay(delay), next(self._seq), callback)
        if self._closed:
            timer.cancel()
            return timer
        heapq.heappush(self._heap, timer)
        return timer

    def close(self) -> None:
        for timer in self._heap:
            timer.cancel()
        self._heap.clear()
        self._closed = True

    def next_deadline(self) -> float | None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].deadline if self._heap else None

    def fire_next(self, limit: float) -> bool:
        """Jump to the earliest timer due at or before ``limit`` and fire it."""
        deadline = self.next_deadline()
        if deadline is None or deadline > limit:
            return False
        timer = heapq.heappop(self._heap)
        self._now = max(self._now, timer.deadline)
        _fire(timer)
        return True

    def jump(self, to: float) -> None:
        """Move time forward to ``to`` without firing anything (the caller fires what is due).
        Time can't go backwards: an earlier ``to`` is a bug at the caller, and raises."""
        if math.isnan(to):
            raise ValueError("a time must be a number, not NaN")
        if to < self._now:
            raise ValueError(f"time can't go backwards (from {self._now} to {to})")
        self._now = to

    def jitter_timers(self, pick: Callable[[float], float]) -> None:
        """Fault hook: move every pending deadline by ``pick(deadline)`` (early or late)."""
        for timer in self._heap:
            timer.deadline = max(self._now, pick(timer.deadline))
        heapq.heapify(self._heap)
