"""WatcherActor: one watcher, from ``watch`` (or ``wait``) until it has delivered every id.

The actor owns its :class:`~protocol.session.state.WatcherState` (pending, buffered) and its
coalescing window's timer, and hands each notification to its caller (``watch``: the parent's
sink; ``wait``: the waiting caller's), exactly once and in the caller's order. What it does
with each message is a rule of :mod:`protocol.session.watcher`; this actor calls the rule and
does what it says:

- ``Results`` (from the broker, which routes each settled task's result to the watchers
  subscribed to it, one message per watcher per run of its effects): take each into the
  buffer; the first opens the window (a timer of the watcher's own, whose event comes back to
  this actor's mailbox, behind nothing but this watcher's own mail).
- ``Flush`` (the window closed): one notification to the caller; when nothing is pending, tell
  the broker (``WatcherDone``: it forgets the watcher's address) and stop.

A result reaches a watcher only after the journal has it: the broker routes it as an effect
of the run that journaled it.
"""

from __future__ import annotations

import functools
from typing import Any

import pykka

from actors.runtime.clock import TimerHandle
from actors.runtime.runtime import ShepherdActor, tell_quietly
from actors.session.sinks import GuardedSink
from protocol.session import watcher as rules
from protocol.session.effects import Flush
from protocol.session.state import WatcherState
from protocol.tasks import TaskResult

__all__ = ["Results", "WatcherActor", "WatcherDone"]


class Results:
    """Settled tasks' results for one watcher, in the order they settled (one message)."""

    __slots__ = ("results",)

    def __init__(self, results: list[TaskResult]) -> None:
        self.results = results


class WatcherDone:
    """A watcher delivered everything it watched and stopped (told to the broker)."""

    __slots__ = ("watcher_id",)

    def __init__(self, watcher_id: str) -> None:
        self.watcher_id = watcher_id


class WatcherActor(ShepherdActor):
    def __init__(
        self,
        state: WatcherState,
        sink: GuardedSink,
        coalesce_s: float,
        broker: pykka.ActorRef[Any],
    ) -> None:
        super().__init__()
        self.state = state
        self._sink = sink
        self._coalesce_s = coalesce_s
        self._broker = broker
        self._timer: TimerHandle | None = None

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Results):
            for result in message.results:
                self.state, opens = rules.take(self.state, result, self._coalesce_s)
                if opens is not None:
                    self._timer = self.clock.call_later(
                        opens.delay, functools.partial(tell_quietly, self.actor_ref, opens.event)
                    )
            return None
        if isinstance(message, Flush):
            self._timer = None
            self.state, note = rules.flush(self.state, self.clock.now())
            if note is not None:
                self._sink(note)  # guarded: a failing sink is logged, never raised
            if rules.done(self.state):
                tell_quietly(self._broker, WatcherDone(self.state.watcher_id))
                self.stop()
            return None
        return super().on_receive(message)

    def on_stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
