"""The transport seam: how envelopes move between the parent and its agents.

Everything above this interface (broker, tasks, agents) speaks in envelopes and inbox names;
everything below it (an in-memory queue, the simulation's faulty network, the filesystem
mailbox, one day a socket) decides how bytes move. Inbox names are ``parent``, an agent id,
or a client inbox for CLI answers.

A handler is called once per accepted envelope, in the order the transport received them
from one sender. A transport that can hand over several at once (:class:`BatchTransport`: the
filesystem mailbox) takes a :data:`BatchHandler` too: it gets the envelopes one receiving pass
accepted, in order, and answers which of them it refused (:data:`Refusals`); the transport
acknowledges the batch only after the handler returned. ``publish`` either accepts the envelope
(it will be delivered or quarantined with a reason, never silently lost) or raises a
:class:`~protocol.core.errors.ShepherdError`.

**Authentication and de-duplication are the transport's, and only the transport's.** What it
hands to the parent's inbox handler comes from a sender that proved its id (its capability
matched, for this session) and was not handed over before (a window of message ids per
inbox); the capability itself never leaves the transport. Everything above it trusts the
sender id. The filesystem mailbox does this in its drainer (with the supervisor's validator);
the in-process transports here (and the simulation's) through :class:`SenderGate`. Whoever
starts an agent admits its id and capability (:meth:`SenderGate.admit`) before it can publish.
"""

from __future__ import annotations

import hmac
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from actors.runtime.log import logger
from protocol.core.errors import ForbiddenSender, InvalidHandle, SessionUnavailable, ShepherdError
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, Envelope

__all__ = [
    "PARENT_INBOX",
    "BatchHandler",
    "BatchTransport",
    "DeliveryFailed",
    "GatedTransport",
    "Handler",
    "InMemoryTransport",
    "NotHandled",
    "Refusals",
    "SenderGate",
    "Subscription",
    "Transport",
]

PARENT_INBOX = "parent"

Handler = Callable[[AnyEnvelope], object]
#: message id -> why the handler refused that envelope of its batch (it is quarantined with
#: this reason, and its proven sender told); None or empty: every one was handled
Refusals = Mapping[str, ShepherdError]
BatchHandler = Callable[[Sequence[AnyEnvelope]], Refusals | None]


class DeliveryFailed(ShepherdError):
    """The receiving side failed on a valid envelope (its handler or validator raised)."""

    code = "delivery_failed"


class NotHandled(SessionUnavailable):
    """The receiver took none of what it was handed and takes nothing more (its session
    stopped: its journal could not be written). The transport leaves the envelopes where they
    are, neither acknowledged nor quarantined, for the parent started next."""


class Subscription(Protocol):
    def cancel(self) -> None: ...


class Transport(Protocol):
    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        """Accept ``envelope`` for ``inbox`` or raise a typed error; never drop silently."""

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver every envelope published to ``inbox`` to ``handler``."""

    def close(self) -> None:
        """Stop delivering; later publishes raise."""


@runtime_checkable
class BatchTransport(Transport, Protocol):
    """A transport that can hand an inbox's envelopes over in batches (the module rules)."""

    def subscribe_batch(self, inbox: str, handler: BatchHandler) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler``, several at a time."""


class GatedTransport(Transport, Protocol):
    """A transport that authenticates with a :class:`SenderGate` (told who may publish)."""

    def admit(self, sender_id: str, session_id: str, capability: str) -> None: ...


class SenderGate:
    """What an in-process transport checks before it hands an envelope over (module rules).

    An envelope for the parent's inbox must come from an admitted sender, for the session it
    was admitted in, with its capability (compared in constant time); a forgery is logged and
    counted (``refused``), and nobody is told (a forger must not disturb the agent whose id it
    claims). An envelope handed over before, to the same inbox, is counted (``duplicates``)
    and not handed over again. Thread-safe.
    """

    def __init__(self, dedup_window: int = Settings().dedup_window) -> None:
        self._window = max(dedup_window, 1)
        self._senders: dict[str, tuple[str, str]] = {}  # sender id -> (session id, capability)
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self.duplicates: Counter[str] = Counter()  # per inbox
        self.refused = 0

    def admit(self, sender_id: str, session_id: str, capability: str) -> None:
        with self._lock:
            self._senders[sender_id] = (session_id, capability)

    def __len__(self) -> int:
        """Message ids the window holds (at most ``dedup_window``)."""
        return len(self._seen)

    def seen(self, inbox: str) -> set[str]:
        """The message ids handed over to ``inbox`` that the window still holds."""
        with self._lock:
            return {message_id for box, message_id in self._seen if box == inbox}

    def check(self, inbox: str, env: AnyEnvelope) -> AnyEnvelope | None:
        """The envelope to hand over (its capability stripped), or None."""
        verdict = self.judge(inbox, env)
        return verdict if isinstance(verdict, Envelope) else None

    def judge(self, inbox: str, env: AnyEnvelope) -> AnyEnvelope | ForbiddenSender | None:
        """:meth:`check`, telling a forgery (the error, logged and counted) from a duplicate
        (None), for a transport that keeps a record of what it refused."""
        if inbox == PARENT_INBOX:
            try:
                self._authenticate(env)
            except ForbiddenSender as exc:
                with self._lock:
                    self.refused += 1
                logger.warning("refused envelope {}: {}", env.message_id, exc.message)
                return exc
        return self.fresh(inbox, env)

    def fresh(self, inbox: str, env: AnyEnvelope) -> AnyEnvelope | None:
        """De-duplication alone, for a transport whose owner authenticates with a validator of
        its own: the envelope to hand over (its capability stripped), or None if it was."""
        key = (inbox, env.message_id)
        with self._lock:
            if key in self._seen:
                self.duplicates[inbox] += 1
                return None
            self._seen[key] = None
            if len(self._seen) > self._window:
                self._seen.popitem(last=False)
        if not env.capability:
            return env
        return msgspec.structs.replace(env, capability="")

    def forget(self, inbox: str, message_id: str) -> None:
        """Not handed over after all (:class:`NotHandled`): its next delivery is not a repeat."""
        with self._lock:
            self._seen.pop((inbox, message_id), None)

    def _authenticate(self, env: AnyEnvelope) -> None:
        with self._lock:
            admitted = self._senders.get(env.sender_id)
        if admitted is None:
            raise ForbiddenSender(f"unknown sender {env.sender_id!r}")
        session_id, capability = admitted
        if env.session_id != session_id:
            raise ForbiddenSender(f"envelope belongs to session {env.session_id}, not this one")
        if not hmac.compare_digest(env.capability.encode(), capability.encode()):
            raise ForbiddenSender(f"capability does not match sender {env.sender_id}")


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
    than creating it (an unknown recipient must never swallow messages). Its
    :class:`SenderGate` authenticates and de-duplicates (the module rules).
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.gate = SenderGate((settings or Settings()).dedup_window)

    def admit(self, sender_id: str, session_id: str, capability: str) -> None:
        self.gate.admit(sender_id, session_id, capability)

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        with self._lock:
            if self._closed:
                raise InvalidHandle("transport is closed")
            handler = self._handlers.get(inbox)
        if handler is None:
            raise InvalidHandle(f"no inbox {inbox!r} in this session")
        checked = self.gate.check(inbox, envelope)
        if checked is not None:
            handler(checked)

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
