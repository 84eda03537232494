"""The open coalescing windows of a session, for its broker: when each closes, which is due.

Every watcher that took a result has one window open (``protocol.session.watchers``: results
reaching a watcher within ``coalesce_ms`` go out as one notification). The broker keeps them
here, in the order they close, and holds ONE timer for the earliest, not one per window: a
burst of settlements then costs no timer each (set, cancel, fire, a message back). And the
broker closes every due window before its next message, so a window closes on time even when
thousands of messages wait before the timer's own (see :mod:`actors.session.broker`).
"""

from __future__ import annotations

import heapq
import itertools

from protocol.session.effects import Flush

__all__ = ["Windows"]


class Windows:
    """Open windows: (closing time, order, event) in a heap; the live event per watcher."""

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Flush]] = []
        self._live: dict[str, Flush] = {}  # watcher id -> the event of its open window
        self._seq = itertools.count()

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
