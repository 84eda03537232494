"""WatcherActor: owns one watcher — which of its tasks are pending, delivered, buffered.

Each task is reported once (a delivered set guards even against a duplicate hand-off).
Results arriving within the coalescing window go out as ONE notification, sorted into the
order the caller gave the ids. When nothing is pending the watcher stops itself.
"""

from __future__ import annotations

from typing import Any

import pykka

from actors.clock import TimerHandle
from actors.messages import Flush, WatchDeliver, WatcherFinished
from actors.runtime import ShepherdActor
from actors.sinks import GuardedSink
from protocol.notifications import TaskCompletion
from protocol.tasks import TaskResult

__all__ = ["WatcherActor"]


class WatcherActor(ShepherdActor):
    def __init__(
        self,
        watcher_id: str,
        ids: tuple[str, ...],
        pending: tuple[str, ...],
        sink: GuardedSink,
        broker: pykka.ActorRef[Any],
        coalesce_s: float,
    ) -> None:
        super().__init__()
        self.watcher_id = watcher_id
        self.ids = ids
        self._order = {task_id: i for i, task_id in enumerate(ids)}
        self.pending = set(pending)
        self.delivered: set[str] = set()
        self._buffer: dict[str, TaskResult] = {}
        self._sink = sink
        self._broker = broker
        self._coalesce_s = coalesce_s
        self._timer: TimerHandle | None = None

    def on_receive(self, message: Any) -> Any:
        match message:
            case WatchDeliver(result=result):
                task_id = result.task_id
                if task_id not in self.pending or task_id in self._buffer:
                    return None  # already delivered or buffered: exactly once per watcher
                self._buffer[task_id] = result
                if self._timer is None:
                    self._timer = self.clock.call_later(self._coalesce_s, self._flush_due)
            case Flush():
                self._flush()
            case _:
                return super().on_receive(message)
        return None

    def _flush_due(self) -> None:
        if self.actor_ref.is_alive():
            self.actor_ref.tell(Flush())

    def _flush(self) -> None:
        self._timer = None
        if not self._buffer:
            return
        results = tuple(sorted(self._buffer.values(), key=lambda r: self._order[r.task_id]))
        self._buffer.clear()
        for r in results:
            self.pending.discard(r.task_id)
            self.delivered.add(r.task_id)
        remaining = tuple(t for t in self.ids if t in self.pending)
        self._sink(
            TaskCompletion(
                created_at=self.clock.now(),
                watcher_id=self.watcher_id,
                ids=self.ids,
                results=results,
                pending=remaining,
            )
        )
        if not self.pending:
            self._broker.tell(WatcherFinished(watcher_id=self.watcher_id))
            self.stop()
