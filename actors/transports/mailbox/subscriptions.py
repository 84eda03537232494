"""The mailbox's subscriptions: which inboxes this process reads, with which handler.

Rules:
- Subscribing starts with whatever is already in the inbox's ``new/``; subscribing again
  replaces the handler. Only an inbox that exists can be subscribed: its directory, ``new/`` and
  ``cur/`` must be real directories (a symlink planted for an inbox is refused, not followed).
- Cancelling a subscription leaves the files in ``new/`` for the next subscriber; cancelling one
  that a later subscribe replaced does nothing.
- A drain only runs for an inbox that is still subscribed; once closed, nothing subscribes.
- ``wait_drained`` from a handler raises ``RuntimeError`` (it would wait for itself).

Theory of operation: one :class:`~actors.transports.mailbox.watch.Receiver` thread serves every
subscribed inbox of one :class:`~actors.transports.mailbox.mailbox.Mailbox` (one per process) and
decides *when* an inbox is drained; the :class:`~actors.transports.mailbox.drain.Drainer` decides
*what* draining does.
:class:`Subscriptions` owns both and the table of subscribed inboxes between them.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from actors.runtime.transport import BatchHandler, Handler, Refusals, Subscription
from actors.transports.mailbox.drain import (
    BATCH_MAX,
    DeliveryFailed,
    Drainer,
    RejectCallback,
    SubscribedInbox,
    Validator,
)
from actors.transports.mailbox.files import describe, inbox_name
from actors.transports.mailbox.wakers import ModeCallback, WakerFactory
from actors.transports.mailbox.watch import Receiver
from protocol.core.errors import InvalidHandle
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope

__all__ = ["Subscriptions"]


def _one_at_a_time(handler: Handler) -> BatchHandler:
    """``handler`` as a batch handler (its batches hold one envelope): what it raises refuses
    that envelope alone, as :class:`~actors.transports.mailbox.drain.DeliveryFailed`."""

    def handle(envelopes: Sequence[AnyEnvelope]) -> Refusals | None:
        refused: dict[str, DeliveryFailed] | None = None
        for envelope in envelopes:
            try:
                handler(envelope)
            except Exception as exc:
                refused = refused or {}
                refused[envelope.message_id] = DeliveryFailed(f"handler raised {exc!r}")
        return refused

    return handle


class _InboxSubscription:
    def __init__(self, subscriptions: Subscriptions, inbox: str, token: object) -> None:
        self._subscriptions = subscriptions
        self._inbox = inbox
        self._token = token

    def cancel(self) -> None:
        self._subscriptions._unsubscribe(self._inbox, self._token)


class Subscriptions:
    """The subscribed inboxes under ``inbox_root``, their receiver thread and their drainer."""

    def __init__(
        self,
        inbox_root: Path,
        quarantine_dir: Path,
        session_id: str,
        settings: Settings,
        *,
        validate: Validator | None,
        on_reject: RejectCallback | None,
        waker_factory: WakerFactory,
        now_ns: Callable[[], int],
        on_wake_mode: ModeCallback | None,
    ) -> None:
        self._inbox_root = inbox_root
        self._drainer = Drainer(
            session_id=session_id,
            settings=settings,
            quarantine_dir=quarantine_dir,
            validate=validate,
            on_reject=on_reject,
            now_ns=now_ns,
            stopping=lambda: self._receiver.stopping,
        )
        self._receiver = Receiver(
            self._drain, waker_factory, settings.fallback_poll_s, on_mode=on_wake_mode
        )
        self._lock = threading.Lock()
        self._closed = False
        self._inboxes: dict[str, SubscribedInbox] = {}

    @property
    def drainer(self) -> Drainer:
        """The drainer (its counters are the mailbox's delivery statistics)."""
        return self._drainer

    def holds(self, inbox: str) -> bool:
        """True while ``inbox`` is subscribed here."""
        with self._lock:
            return inbox in self._inboxes

    def wake_mode(self, inbox: str) -> str | None:
        """How the receiver is woken for ``inbox``; None if it has not watched it yet."""
        return self._receiver.mode_of(inbox)

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler`` on the receiver thread, one at a time
        (each acknowledged once its call returned), starting with whatever is already in
        ``new/``. Subscribing again replaces the handler."""
        return self.subscribe_batch(inbox, _one_at_a_time(handler), batch_max=1)

    def subscribe_batch(
        self, inbox: str, handler: BatchHandler, *, batch_max: int = BATCH_MAX
    ) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler`` on the receiver thread, up to
        ``batch_max`` per call (each batch acknowledged once its call returned)."""
        inbox_name(inbox)
        box_dir = os.path.join(self._inbox_root, inbox)
        for directory in (box_dir, os.path.join(box_dir, "new"), os.path.join(box_dir, "cur")):
            try:
                st = os.lstat(directory)
            except FileNotFoundError:
                raise InvalidHandle(f"no inbox {inbox!r} in this session") from None
            if not stat.S_ISDIR(st.st_mode):  # a symlink planted for an inbox is not followed
                kind = describe(st.st_mode)
                raise InvalidHandle(f"inbox {inbox!r} is a {kind}; refusing to read it")
        token = object()
        with self._lock:
            if self._closed:
                raise InvalidHandle("mailbox is closed")
            box = self._inboxes.get(inbox)
            if box is None:
                box = SubscribedInbox(
                    name=inbox,
                    new_dir=os.path.join(box_dir, "new"),
                    cur_dir=os.path.join(box_dir, "cur"),
                    handler=handler,
                    token=token,
                    batch_max=batch_max,
                )
                self._inboxes[inbox] = box
            else:
                box.handler = handler
                box.token = token
                box.batch_max = batch_max
            self._receiver.watch(inbox, box.new_dir)
        return _InboxSubscription(self, inbox, token)

    def _unsubscribe(self, inbox: str, token: object) -> None:
        with self._lock:
            box = self._inboxes.get(inbox)
            if box is None or box.token is not token:
                return
            del self._inboxes[inbox]
            box.active = False  # files left in new/ stay there for the next subscriber
            self._receiver.unwatch(inbox)

    def wait_drained(self, timeout_s: float) -> bool:
        """Block until every file that was in a subscribed ``new/`` when called has been
        handled. False on timeout or close; ``RuntimeError`` from a handler."""
        return self._receiver.wait_drained(timeout_s)

    def close(self) -> None:
        """Refuse later subscriptions and stop the receiver (within one watcher step)."""
        with self._lock:
            self._closed = True
        self._receiver.close()

    def _drain(self, inbox: str) -> bool:
        """The receiver's ``drain(inbox)``: :meth:`Drainer.drain
        <actors.transports.mailbox.drain.Drainer.drain>` if ``inbox`` is still subscribed."""
        with self._lock:
            box = self._inboxes.get(inbox)
        if box is None or not box.active:
            return True
        return self._drainer.drain(box)
