"""What the child bridge publishes to the parent: in order, never dropped for back-pressure.

Rules:
- Every envelope goes to the ``parent`` inbox, in the order it was published.
- When the parent inbox is full (:class:`~protocol.errors.InboxFull`) the envelope and
  everything published after it wait in a backlog, retried on the bridge's loop on the
  producers' schedule (:mod:`actors.mailbox.backoff`: doubling, jittered, started over once
  one gets through): a ``done`` or a message is never dropped for that.
- The backlog holds at most :data:`BACKLOG_LIMIT` envelopes; beyond it a new one is dropped,
  with an ERROR in the log.
- Any other refusal of the mailbox drops that one envelope (a WARNING in the log) and the
  next is tried: one bad envelope never blocks the ones after it.
- At exit (:meth:`ParentOutbox.close`) the backlog gets a last try; what still finds no room
  is counted in the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from actors.mailbox.backoff import Backoff
from actors.runtime.clock import Clock
from actors.runtime.transport import PARENT_INBOX, Transport
from protocol.envelopes import AnyEnvelope
from protocol.errors import InboxFull, ShepherdError

if TYPE_CHECKING:
    from loguru import Logger

__all__ = ["BACKLOG_LIMIT", "ParentOutbox"]

#: envelopes that may wait for room in a full parent inbox before new ones are dropped
BACKLOG_LIMIT = 10_000


class ParentOutbox:
    """The bridge's way to the parent inbox (see the module rules). Runs on the bridge's core
    thread: a retry is posted back to it with ``post``."""

    def __init__(
        self,
        mailbox: Transport,
        clock: Clock,
        post: Callable[[Callable[[], None]], None],
        log: Logger,
    ) -> None:
        self._mailbox = mailbox
        self._clock = clock
        self._post = post
        self._log = log
        self._backlog: deque[AnyEnvelope] = deque()  # waiting for room in the parent inbox
        self._backoff = Backoff()
        self._retry_pending = False

    def publish(self, envelope: AnyEnvelope) -> None:
        """Publish to the parent, after everything that waits; or wait in the backlog."""
        if self._backlog:
            if len(self._backlog) >= BACKLOG_LIMIT:
                self._log.error(
                    "dropping {}: {} envelopes already wait for room in the parent inbox",
                    envelope.__struct_config__.tag,
                    len(self._backlog),
                )
                return
            self._backlog.append(envelope)
            return
        self._backlog.append(envelope)
        self._flush()

    def _flush(self) -> None:
        """Publish what waits, oldest first, until done or the parent inbox is full again."""
        self._retry_pending = False
        while self._backlog:
            envelope = self._backlog[0]
            try:
                self._mailbox.publish(PARENT_INBOX, envelope)
            except InboxFull:
                if not self._retry_pending:
                    self._retry_pending = True
                    self._clock.call_later(self._backoff.next(), lambda: self._post(self._flush))
                return
            except ShepherdError as exc:
                self._log.warning(
                    "cannot publish {} to the parent: {} ({})",
                    envelope.__struct_config__.tag,
                    exc.message,
                    exc.code,
                )
            self._backlog.popleft()
            self._backoff.reset()

    def close(self) -> None:
        """A last try at what waits (the loop that retried it is gone), then say what is lost."""
        self._flush()
        if self._backlog:
            self._log.error(
                "{} envelope(s) never found room in the parent inbox", len(self._backlog)
            )
