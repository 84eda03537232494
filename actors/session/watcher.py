"""Courier: hands every watcher's notifications to its caller, off the broker's thread.

What a watcher has pending, has delivered and holds in its coalescing buffer has one owner:
the session's state, changed only by the rules (:mod:`protocol.session.watchers`: exactly
once, coalesced). What the rules cannot hold is where a watcher's notifications go (the
parent's sink for a ``watch``, the waiting caller's for a ``wait``): the broker keeps that per
watcher, and hands each notification, with its sink, to this actor, which calls the sink. A
caller's sink may be slow, and the broker must not wait for it.

One courier for the session, not one actor per watcher: a watcher then costs no actor to
start and stop (10,000 watchers were 10,000 spawns and stops), and the notifications of one
run of the broker's effects travel in one message, in order (one actor's mail is handled in
order, so a watcher's notifications reach its sink in the order the rules made them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.runtime.runtime import ShepherdActor
from actors.session.sinks import GuardedSink
from protocol.notifications import AnyNotification

__all__ = ["Courier", "Handed"]


class Handed:
    """Notifications to hand, each to its sink, in order (one message)."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[tuple[GuardedSink, AnyNotification]]) -> None:
        self.items = items


class Courier(ShepherdActor):
    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, Handed):
            return super().on_receive(message)
        for sink, note in message.items:
            sink(note)  # guarded: a failing sink is logged, never raised
        return None
