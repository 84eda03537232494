"""The open coalescing windows of a session, for its broker: when each closes, which is due.

Every watcher that took a result has one window open (``protocol.session.watchers``: results
reaching a watcher within ``coalesce_ms`` go out as one notification). The broker keeps them
here, in the order they close, and holds ONE timer for the earliest, not one per window: a
burst of settlements then costs no timer each (set, cancel, fire, a message back). And the
broker closes every due window before its next message, so a window closes on time even when
thousands of messages wait before the timer's own (see :mod:`actors.session.broker`).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable
from typing import Any

from actors.runtime.clock import Clock, TimerHandle
from protocol.session.effects import Flush

__all__ = ["Windows", "WindowsDue"]


class WindowsDue:
    """The windows' one timer fired: the windows closing by ``at`` are due (a message the
    timer hands to the broker)."""

    __slots__ = ("at", "handle")

    def __init__(self, at: float) -> None:
        self.at = at
        self.handle: TimerHandle | None = None


class Windows:
    """Open windows: (closing time, order, event) in a heap; the live event per watcher; and
    the one timer, set for the earliest (``tell`` hands its :class:`WindowsDue` to the broker).
    Times are the clock's monotonic seconds."""

    __slots__ = ("_clock", "_heap", "_live", "_seq", "_tell", "_timer")

    def __init__(
        self, clock: Clock | None = None, tell: Callable[[Any], object] | None = None
    ) -> None:
        self._clock = clock
        self._tell = tell
        self._timer: WindowsDue | None = None  # the one timer, when set
        self._heap: list[tuple[float, int, Flush]] = []
        self._live: dict[str, Flush] = {}  # watcher id -> the event of its open window
        self._seq = itertools.count()

    def start(self, event: Flush, delay: float) -> None:
        """A window opens ``delay`` seconds from now; the one timer is set for it if it is the
        earliest."""
        assert self._clock is not None
        self.open(event, self._clock.monotonic() + delay)
        self.arm()

    def fired(self, due: WindowsDue) -> list[Flush]:
        """The one timer fired: the windows it was set for are due, as a window's own timer's
        were, even if the simulation fired it early; the timer is set again for the next. A
        timer replaced by an earlier one closes nothing."""
        assert self._clock is not None
        if due is not self._timer:
            return []
        self._timer = None
        closed = self.pop_due(max(due.at, self._clock.monotonic()))
        self.arm()
        return closed

    def arm(self) -> None:
        """Keep the one timer set for the earliest open window."""
        assert self._clock is not None
        assert self._tell is not None
        at = self.next_at()
        armed = self._timer
        if at is None or (armed is not None and armed.at <= at):
            return
        if armed is not None and armed.handle is not None:
            armed.handle.cancel()  # set for a later window than this one
        due = self._timer = WindowsDue(at)
        due.handle = self._clock.call_later(
            at - self._clock.monotonic(), functools.partial(self._tell, due)
        )

    def __len__(self) -> int:
        return len(self._live)

    def open(self, event: Flush, closes_at: float) -> None:
        """A window opens (replacing the watcher's open one, if any)."""
        self._live[event.watcher_id] = event
        heapq.heappush(self._heap, (closes_at, next(self._seq), event))

    def cancel(self, watcher_id: str) -> None:
        self._live.pop(watcher_id, None)  # its heap entry is skipped when it comes up

    def next_at(self) -> float | None:
        """When the earliest open window closes (None: none is open)."""
        heap = self._heap
        while heap and self._live.get(heap[0][2].watcher_id) is not heap[0][2]:
            heapq.heappop(heap)  # cancelled or replaced
        return heap[0][0] if heap else None

    def due(self, now: float) -> bool:
        at = self.next_at()
        return at is not None and at <= now

    def pop_due(self, now: float) -> list[Flush]:
        """The windows closed by ``now``, in the order they close; forgotten here."""
        out: list[Flush] = []
        while (at := self.next_at()) is not None and at <= now:
            _, _, event = heapq.heappop(self._heap)
            del self._live[event.watcher_id]
            out.append(event)
        return out
