"""The broker's routes to the watcher actors (:mod:`actors.session.watcher`).

- ``SpawnWatcher`` starts a :class:`~actors.session.watcher.WatcherActor` from the state the
  rules gave (a ``wait``'s, with what had settled already, answers its caller); its address
  is kept with how many of its tasks' results are still to route to it (its subscriptions).
- ``HandOver`` gathers a settled result for it over the run; at the run's end each watcher
  gets what was gathered for it in ONE message (:meth:`WatcherRoutes.hand`), and is
  forgotten when the last result it was owed is routed (a watcher that is done tells
  nobody).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from actors.runtime.runtime import Runtime, tell_quietly
from actors.session.runs import Run
from actors.session.sinks import GuardedSink
from actors.session.watcher import Results, Waiting, WatcherActor
from protocol.records.tasks import TaskResult
from protocol.session import effects as fx

__all__ = ["WatcherRoutes"]


class WatcherRoutes:
    def __init__(
        self,
        runtime: Runtime,
        sink: GuardedSink,
        result_of: Callable[[str], TaskResult | None],
        log: Any,
    ) -> None:
        self._runtime = runtime
        self._sink = sink
        self._result_of = result_of
        self._log = log
        #: watcher id -> its actor, and how many results are still to route to it
        self._actors: dict[str, tuple[pykka.ActorRef[Any], int]] = {}

    def __contains__(self, watcher_id: object) -> bool:
        return watcher_id in self._actors

    def __len__(self) -> int:
        return len(self._actors)

    def spawn(self, effect: fx.SpawnWatcher, run: Run, coalesce_s: float) -> None:
        waiting = None
        if run.waiting is not None:  # a ``wait``: it answers with what settled already too
            ids, pending = effect.watcher.ids, effect.watcher.pending
            done = (self._result_of(t) for t in ids if t not in pending)
            completed = tuple(r for r in done if r is not None)
            waiting = Waiting(run.waiting.answer, completed, run.waiting.timeout_s)
        ref = self._runtime.spawn(WatcherActor, effect.watcher, self._sink, coalesce_s, waiting)
        self._actors[effect.watcher_id] = (ref, len(effect.watcher.pending))

    @staticmethod
    def gather(effect: fx.HandOver, run: Run) -> None:
        run.hands.setdefault(effect.watcher_id, []).append((effect.result, effect.opened))

    def hand(self, run: Run) -> None:
        """What the run gathered for each watcher: one message each."""
        for watcher_id, hands in run.hands.items():
            entry = self._actors.get(watcher_id)
            if entry is None:  # never expected: routed once per subscription
                self._log.error("no watcher {} for {} results", watcher_id, len(hands))
                continue
            ref, owed = entry
            tell_quietly(ref, Results(hands))  # a ``wait``'s may have stopped at its deadline
            if owed > len(hands):
                self._actors[watcher_id] = (ref, owed - len(hands))
            else:
                del self._actors[watcher_id]  # its last subscription: nothing more to route
