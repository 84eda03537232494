"""What the child bridge publishes to the parent: in order, never dropped for a passing failure.

Rules:
- Every envelope goes to the ``parent`` inbox, in the order it was published.
- When the parent inbox is full (:class:`~protocol.core.errors.InboxFull`), or the session cannot be
  reached for a moment (:class:`~protocol.core.errors.Unreachable`: a NATS stream electing its
  leader, a server restarting, no file descriptor free), or its disk is full for a moment
  (:class:`~protocol.core.errors.DiskFull`), the envelope and everything published
  after it wait in a backlog, retried on the bridge's loop
  (:mod:`actors.transports.mailbox.backoff`: doubling, jittered, started over once one gets through;
  a full inbox on the producers' schedule, an outage on an outage's longer one), as the same
  envelope (the same message id: a transport that got an earlier try keeps one). A ``done`` or a
  message is never dropped for that.
- A full inbox is waited for as long as it takes. An unreachable session (or a full disk) is
  waited out for at most ``give_up_s`` (:data:`~actors.transports.wire.NATS_OUTAGE_S`, as the
  parent waits one out) from the first failed try of the envelope at the head; past it that
  envelope is given up, with an ERROR in the log, and the parent is told as soon as it can be
  reached again: a ``not_sent`` runtime event naming what was given up comes first once a
  publish gets through (it becomes a ``not_sent`` notice to the parent).
- The backlog holds at most :data:`BACKLOG_LIMIT` envelopes; beyond it a new one is dropped,
  with an ERROR in the log, and counted in the next ``not_sent`` report.
- Any other refusal of the mailbox drops that one envelope (a WARNING in the log) and the
  next is tried: one bad envelope never blocks the ones after it.
- At exit (:meth:`ParentOutbox.close`) the backlog is tried again for a bounded time (the
  :data:`EXIT_LINGER_S`); what still cannot be sent is counted
  in the log (the parent learns of the bridge's exit from its process, and ends its task).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO, TypeVar

from actors.runtime.clock import Clock
from actors.runtime.transport import PARENT_INBOX, Transport
from actors.transports.mailbox.backoff import Backoff, outage_backoff
from protocol.core.errors import DiskFull, InboxFull, ShepherdError, Unreachable
from protocol.wire.envelopes import AnyEnvelope, RuntimeEnvelope

if TYPE_CHECKING:
    from loguru import Logger

__all__ = ["BACKLOG_LIMIT", "ParentOutbox", "Pauses", "retryable", "until_reachable"]

T = TypeVar("T")

#: envelopes that may wait for room in a full parent inbox before new ones are dropped
BACKLOG_LIMIT = 10_000
#: how long an exiting bridge keeps trying what it could not send yet (a done said just before
#: the exit, during an outage)
EXIT_LINGER_S = 30.0
#: at most this many given-up envelopes are named in one ``not_sent`` report (the rest counted)
NAMED_IN_REPORT = 20


def retryable(exc: ShepherdError) -> bool:
    """A refusal that may pass by itself: the same envelope is tried again (module rules)."""
    return isinstance(exc, InboxFull | Unreachable | DiskFull)


class Pauses:
    """The pause after a retryable refusal, by its kind: a full inbox drains in milliseconds
    (the producers' schedule), an outage passes in seconds (an outage's schedule)."""

    __slots__ = ("_full", "_outage")

    def __init__(self) -> None:
        self._full = Backoff()
        self._outage = outage_backoff()

    def next(self, exc: ShepherdError) -> float:
        return (self._full if isinstance(exc, InboxFull) else self._outage).next()

    def reset(self) -> None:
        self._full.reset()
        self._outage.reset()


def until_reachable(
    attempt: Callable[[], T], clock: Clock, deadline: float, err: TextIO | None = None
) -> T:
    """``attempt()`` (a publish, opening a reply inbox, subscribing), tried again while it is
    refused for a reason that may pass (:func:`retryable`) until the monotonic ``deadline``;
    then the last refusal goes out: the caller hears of it. The first retry is said once on
    ``err`` (stderr)."""
    pauses = Pauses()
    pause = threading.Event()  # never set: a bounded pause between attempts
    told = False
    while True:
        try:
            return attempt()
        except ShepherdError as exc:
            left = deadline - clock.monotonic()
            if not retryable(exc) or left <= 0:
                raise
            if not told:
                told = True
                why = "the parent inbox is full" if isinstance(exc, InboxFull) else exc.message
                print(f"shepherd-child: {why}; retrying", file=sys.stderr if err is None else err)
            pause.wait(min(pauses.next(exc), left))


class ParentOutbox:
    """The bridge's way to the parent inbox (see the module rules). Runs on the bridge's core
    thread: a retry is posted back to it with ``post``."""

    def __init__(
        self,
        mailbox: Transport,
        clock: Clock,
        post: Callable[[Callable[[], None]], None],
        log: Logger,
        *,
        give_up_s: float,
        report: Callable[[str], RuntimeEnvelope],
    ) -> None:
        self._mailbox = mailbox
        self._clock = clock
        self._post = post
        self._log = log
        self._give_up_s = give_up_s
        self._report = report  # builds the `not_sent` runtime event from its text
        self._backlog: deque[AnyEnvelope] = deque()  # waiting for room or for the session
        self._pauses = Pauses()
        self._last_refusal: ShepherdError | None = None  # why the head waits
        self._retry_pending = False
        self._failing_since: float | None = None  # the head's first failed try (unreachable)
        self._given_up: list[str] = []  # not yet told to the parent
        self._dropped = 0  # for a full backlog, not yet told

    def publish(self, envelope: AnyEnvelope) -> None:
        """Publish to the parent, after everything that waits; or wait in the backlog."""
        if self._backlog:
            if len(self._backlog) >= BACKLOG_LIMIT:
                self._log.error(
                    "dropping {}: {} envelopes already wait to be sent to the parent",
                    envelope.__struct_config__.tag,
                    len(self._backlog),
                )
                self._dropped += 1
                return
            self._backlog.append(envelope)
            return
        self._backlog.append(envelope)
        self._flush()

    def _flush(self) -> None:
        """Publish what waits, oldest first, until done or a passing failure stops it again."""
        self._retry_pending = False
        while self._backlog:
            if not self._tell_losses():
                return
            envelope = self._backlog[0]
            try:
                self._mailbox.publish(PARENT_INBOX, envelope)
            except ShepherdError as exc:
                if retryable(exc) and not self._past_bound(exc):
                    self._retry_later(exc)
                    return
                if retryable(exc):
                    self._log.error(
                        "giving up {} {} to the parent after {:g} s: {} ({})",
                        envelope.__struct_config__.tag,
                        envelope.message_id,
                        self._give_up_s,
                        exc.message,
                        exc.code,
                    )
                    self._given_up.append(
                        f"{envelope.__struct_config__.tag} {envelope.message_id} ({exc.message})"
                    )
                else:
                    self._log.warning(
                        "cannot publish {} to the parent: {} ({})",
                        envelope.__struct_config__.tag,
                        exc.message,
                        exc.code,
                    )
            self._backlog.popleft()
            self._failing_since = None
            self._pauses.reset()

    def _past_bound(self, exc: ShepherdError) -> bool:
        """Whether the head has been waiting longer than it may (a full inbox: never)."""
        if isinstance(exc, InboxFull):
            return False
        now = self._clock.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        return now - self._failing_since >= self._give_up_s

    def _retry_later(self, exc: ShepherdError) -> None:
        self._last_refusal = exc
        if not self._retry_pending:
            self._retry_pending = True
            self._clock.call_later(self._pauses.next(exc), lambda: self._post(self._flush))

    def _tell_losses(self) -> bool:
        """What was given up, told to the parent before anything else is sent (module rules);
        False while the session still cannot be reached (tried again later)."""
        if not self._given_up and not self._dropped:
            return True
        named = self._given_up[:NAMED_IN_REPORT]
        more = len(self._given_up) - len(named) + self._dropped
        text = "given up while the session could not be reached: " + "; ".join(named)
        if more:
            text += f"; and {more} more"
        try:
            self._mailbox.publish(PARENT_INBOX, self._report(text))
        except ShepherdError as exc:
            if retryable(exc):
                self._retry_later(exc)
                return False
            self._log.error("cannot tell the parent what was not sent: {}", exc.message)
        self._given_up.clear()
        self._dropped = 0
        return True

    def close(self, linger_s: float = EXIT_LINGER_S) -> None:
        """What waits is tried again (the loop that retried it is gone) for at most
        ``linger_s`` (an agent that said done and exited during an outage: its done still goes
        out once the session can be reached), then what is lost is said."""
        deadline = time.monotonic() + linger_s  # real time: the loop that ran the clock is gone
        pause = threading.Event()  # never set: a bounded pause between attempts
        self._flush()
        while self._backlog and self._last_refusal is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            pause.wait(min(self._pauses.next(self._last_refusal), left))
            self._flush()
        if self._backlog:
            self._log.error(
                "{} envelope(s) could not be sent to the parent before the bridge exited",
                len(self._backlog),
            )
