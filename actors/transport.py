"""The transport seam: how envelopes move between the parent and its agents.

Everything above this interface (broker, tasks, agents) speaks in envelopes and inbox names;
everything below it (an in-memory queue, the simulation's faulty network, the filesystem
mailbox, one day a socket) decides how bytes move. Inbox names are ``parent``, an agent id,
or a client inbox for CLI answers.

A handler is called once per accepted envelope, in the order the transport received them
from one sender. ``publish`` either accepts the envelope (it will be delivered or quarantined
with a reason, never silently lost) or raises a :class:`~protocol.errors.ShepherdError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from protocol.envelopes import AnyEnvelope
from protocol.errors import InvalidHandle

__all__ = ["PARENT_INBOX", "Handler", "InMemoryTransport", "Subscription", "Transport"]

PARENT_INBOX = "parent"

Handler = Callable[[AnyEnvelope], object]


class Subscription(Protocol):
    def cancel(self) -> None: ...


class Transport(Protocol):
    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        """Accept ``envelope`` for ``inbox`` or raise a typed error; never drop silently."""

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver every envelope published to ``inbox`` to ``handler``."""

    def close(self) -> None:
        """Stop delivering; later publishes raise."""


class _Sub:
    def __init__(self, owner: InMemoryTransport, inbox: str) -> None:
        self._owner = owner
        self._inbox = inbox

    def cancel(self) -> None:
        self._owner._unsubscribe(self._inbox)


class InMemoryTransport:
    """Direct hand-off inside one process: the handler runs in the publisher's thread.

    Handlers only ``tell`` actors, so running them inline is cheap and keeps order.
    Publishing to an inbox nobody subscribed to is refused with ``invalid_handle`` rather
    than creating it (an unknown recipient must never swallow messages).
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._closed = False

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        with self._lock:
            if self._closed:
                raise InvalidHandle("transport is closed")
            handler = self._handlers.get(inbox)
        if handler is None:
            raise InvalidHandle(f"no inbox {inbox!r} in this session")
        handler(envelope)

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        with self._lock:
            self._handlers[inbox] = handler
        return _Sub(self, inbox)

    def _unsubscribe(self, inbox: str) -> None:
        with self._lock:
            self._handlers.pop(inbox, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._handlers.clear()
