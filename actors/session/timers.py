"""The broker's timers: one per pending request timeout, stale check or budget check,
keyed as the rules key them (a watcher's coalescing window and a task's deadline are their
actors' own timers). Setting a key again cancels the timer it had; a timer's event goes back
to the broker, which hands it to the rules (they ignore an event that no longer applies)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from actors.runtime.clock import Clock, TimerHandle
from protocol.session import effects as fx

__all__ = ["Timers"]


class Timers:
    def __init__(self, clock: Clock, tell: Callable[[Any], object]) -> None:
        self._clock = clock
        self._tell = tell
        self._timers: dict[fx.TimerKey, tuple[fx.TimerEvent, TimerHandle]] = {}

    def start(self, delay: float, event: fx.TimerEvent) -> None:
        self.cancel(event.key)
        self._timers[event.key] = (
            event,
            self._clock.call_later(delay, functools.partial(self._tell, event)),
        )

    def cancel(self, key: fx.TimerKey) -> None:
        entry = self._timers.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def __iter__(self) -> Iterator[fx.TimerKey]:
        """The keys of the pending timers."""
        return iter(list(self._timers))

    def fired(self, event: fx.TimerEvent) -> None:
        """``event``'s timer fired: it is no longer pending (unless set again since)."""
        entry = self._timers.get(event.key)
        if entry is not None and entry[0] is event:
            del self._timers[event.key]
