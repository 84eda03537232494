"""WatcherActor: one watcher's delivery end, alive while any of its tasks is pending.

What a watcher has pending, has delivered and holds in its coalescing buffer has one owner:
the session's state, changed only by the rules (:mod:`protocol.session.watchers`: exactly
once, coalesced). This actor owns what the rules cannot hold: where the notifications go (the
parent's sink for a ``watch``, the waiting caller's for a ``wait``), and it hands them there
itself, off the broker's thread (a caller's sink may be slow). It is spawned by the
``SpawnWatcher`` effect and stops itself after the notification that leaves nothing pending.
"""

from __future__ import annotations

from typing import Any

from actors.runtime.runtime import ShepherdActor
from actors.session.messages import Hand
from actors.session.sinks import GuardedSink

__all__ = ["WatcherActor"]


class WatcherActor(ShepherdActor):
    def __init__(self, watcher_id: str, sink: GuardedSink) -> None:
        super().__init__()
        self.watcher_id = watcher_id
        self._sink = sink

    def on_receive(self, message: Any) -> Any:
        match message:
            case Hand(note=note):
                self._sink(note)  # guarded: a failing sink is logged, never raised
                if not note.pending:
                    self.stop()
            case _:
                return super().on_receive(message)
        return None
