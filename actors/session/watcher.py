"""WatcherActor: one watcher, from ``watch`` (or ``wait``) until it has delivered every id.

The actor owns its :class:`~protocol.session.state.WatcherState` (pending, buffered) and its
coalescing window's timer, and hands each notification to its caller (``watch``: the parent's
sink; ``wait``: the waiting caller's), exactly once and in the caller's order. What it does
with each message is a rule of :mod:`protocol.session.watcher`; this actor calls the rule and
does what it says:

- ``Results`` (from the broker, which routes each settled task's result to the watchers
  subscribed to it, one message per watcher per run of its effects): take each into the
  buffer; the first opens the window (a timer of the watcher's own, closing ``coalesce_s``
  after that task ended; its event comes back to this actor's mailbox, behind nothing but
  this watcher's own mail).
- ``Flush`` (the window closed): one notification to the caller; when nothing is pending,
  stop. (The broker forgot its address when it routed it the last result it was owed: a
  watcher that is done tells nobody.)

A ``wait`` is a watcher too, with no thread of its own waiting for it: its actor keeps what it
delivered (beside what the ``wait``'s answer carried at once) and, when nothing is pending or
at its deadline (its own second timer), answers its caller once with a ``WaitResult``
(:class:`Waiting`), then stops.

A result reaches a watcher only after the journal has it: the broker routes it as an effect
of the run that journaled it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from actors.runtime.clock import TimerHandle
from actors.runtime.log import logger
from actors.runtime.runtime import ShepherdActor, tell_quietly
from actors.session.sinks import GuardedSink
from protocol.calls import api
from protocol.records.tasks import TaskResult
from protocol.session import watcher as rules
from protocol.session.effects import Flush
from protocol.session.state import WatcherState

__all__ = ["Results", "Waiting", "WatcherActor"]


class Results:
    """Settled tasks' results for one watcher, in the order they settled (one message), each
    with when its task ended (its window counts from it)."""

    __slots__ = ("results",)

    def __init__(self, results: list[tuple[TaskResult, float]]) -> None:
        self.results = results


class Waiting:
    """What a ``wait``'s watcher answers with: ``answer(WaitResult)``, once; ``completed``:
    the results its call's answer carried at once; ``timeout_s``: its deadline (None: none)."""

    __slots__ = ("answer", "completed", "timeout_s")

    def __init__(
        self,
        answer: Callable[[api.WaitResult], object],
        completed: tuple[TaskResult, ...],
        timeout_s: float | None,
    ) -> None:
        self.answer = answer
        self.completed = completed
        self.timeout_s = timeout_s


class _Deadline:
    """A ``wait``'s deadline passed (its timer's event)."""


_DEADLINE = _Deadline()


class WatcherActor(ShepherdActor):
    def __init__(
        self,
        state: WatcherState,
        sink: GuardedSink,
        coalesce_s: float,
        waiting: Waiting | None = None,
    ) -> None:
        super().__init__()
        self.state = state
        self._sink = sink
        self._coalesce_s = coalesce_s
        self._timer: TimerHandle | None = None
        #: a ``wait``'s: how it answers, and what it delivered so far (its deadline's timer)
        self._waiting = waiting
        self._got: list[TaskResult] = list(waiting.completed) if waiting is not None else []
        self._deadline: TimerHandle | None = None

    def on_start(self) -> None:
        waiting = self._waiting
        if waiting is not None and waiting.timeout_s is not None:
            tell = functools.partial(tell_quietly, self.actor_ref, _DEADLINE)
            self._deadline = self.clock.call_later(waiting.timeout_s, tell)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Results):
            now = self.clock.now()
            for result, opened in message.results:
                self.state, opens = rules.take(self.state, result, opened, self._coalesce_s, now)
                if opens is not None:
                    self._timer = self.clock.call_later(
                        opens.delay, functools.partial(tell_quietly, self.actor_ref, opens.event)
                    )
            return None
        if isinstance(message, Flush):
            self._timer = None
            self.state, note = rules.flush(self.state, self.clock.now())
            if note is not None and self._waiting is not None:
                self._got += note.results
            elif note is not None:
                self._sink(note)  # guarded: a failing sink is logged, never raised
            if rules.done(self.state):
                self._finish()
            return None
        if message is _DEADLINE:
            self._got += self.state.buffer  # settled: delivered with the answer
            self._finish()
            return None
        return super().on_receive(message)

    def _finish(self) -> None:
        """Delivered everything (or a ``wait``'s deadline passed): a ``wait`` answers its
        caller once; the actor stops at once, so whatever is still in its mailbox (a window
        closing with a wait's deadline) is refused, not handled: no message to stop it."""
        waiting = self._waiting
        if waiting is not None:
            ids = self.state.ids
            got = {r.task_id: r for r in self._got}
            pending = tuple(t for t in ids if t not in got)
            result = api.WaitResult(
                ids=ids,
                completed=tuple(got[t] for t in ids if t in got),
                pending=pending,
                timed_out=bool(pending),
            )
            try:
                waiting.answer(result)
            except Exception:
                logger.opt(exception=True).error("the answer of a wait failed")
        self._stop()

    def on_stop(self) -> None:
        for timer in (self._timer, self._deadline):
            if timer is not None:
                timer.cancel()
