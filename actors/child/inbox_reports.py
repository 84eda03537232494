"""What the parent hears about the child's own inbox: what it refused, and how it is woken.

Rules:
- An envelope of this child's inbox that the mailbox quarantined (it failed
  :func:`~actors.child.env.envelope_validator`'s checks) is logged, and told to the parent as a
  runtime ``error`` event (shown by ``shepherd read``), so that a refusal on this side, such
  as a task the child could not accept, is never silent. Only the first
  :data:`REFUSALS_REPORTED` are told (the last one says so): a flood of planted files must not
  become a flood towards the parent; the rest are only logged.
- How the inbox is woken (``mailbox_wake``: a doorbell, or only polling) is told with every
  ``ready``; the first ``ready`` waits (at most :data:`WAKE_REPORT_WAIT_S`) for the mailbox
  receiver's first full pass, which comes after it built its waker on its own thread. A later
  change is a runtime ``error`` event with the new ``mailbox_wake`` (``is_error`` when it fell
  back to polling, which delays deliveries), never before the first ``ready``, never twice
  for the same mode.
- The mailbox receiver's thread only logs, counts and posts: the parent is told from the
  bridge's core thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast, get_args

from protocol.core.errors import ShepherdError
from protocol.wire.envelopes import AnyEnvelope, MailboxWake

if TYPE_CHECKING:
    from loguru import Logger

    from actors.child.adapters import AgentContext
    from actors.transports.wire import SessionTransport

__all__ = ["REFUSALS_REPORTED", "WAKE_REPORT_WAIT_S", "InboxReports"]

#: quarantined envelopes of this child's inbox reported to the parent (the rest are only logged)
REFUSALS_REPORTED = 100
#: longest ``ready`` waits for the mailbox receiver to say how the inbox is woken
WAKE_REPORT_WAIT_S = 5.0
_WAKE_MODES = get_args(MailboxWake)


class InboxReports:
    """The reports about one child's inbox (see the module rules); ``ctx`` is the bridge."""

    def __init__(self, ctx: AgentContext, fallback_poll_s: float, log: Logger) -> None:
        self._ctx = ctx
        self._fallback_poll_s = fallback_poll_s
        self._log = log
        self._mailbox: SessionTransport | None = None
        self._refusals = 0  # envelopes this child's inbox quarantined
        self._ready_sent = False
        self._wake_reported: MailboxWake | None = None  # as the parent was last told

    def attach(self, mailbox: SessionTransport) -> None:
        """The mailbox whose receiver reports to :meth:`rejected` and :meth:`wake_changed`."""
        self._mailbox = mailbox

    def rejected(
        self, inbox: str, envelope: AnyEnvelope | None, error: ShepherdError, authenticated: bool
    ) -> None:
        """The mailbox receiver's thread: an envelope in this child's inbox went to quarantine."""
        who = envelope.sender_id if envelope is not None else "unknown sender"
        if envelope is not None and not authenticated:
            who = f"{who} (claimed)"
        self._log.warning("refused an envelope from {} in {}: {}", who, inbox, error.message)
        self._refusals += 1
        if self._refusals > REFUSALS_REPORTED:
            return  # a flood of planted files must not become a flood towards the parent
        what = f"envelope {envelope.message_id}" if envelope is not None else "a file"
        text = f"refused {what} from {who} (quarantined): {error.code}: {error.message}"
        if self._refusals == REFUSALS_REPORTED:
            text += " (the last one reported: further refusals are only in the bridge's log)"
        self._ctx.post(lambda: self._ctx.runtime("error", text=text))

    def first_ready_wake(self) -> MailboxWake | None:
        """How the inbox is woken, for the first ``ready`` (which tells it): once the
        receiver's first full pass is done, see the module rules."""
        if self._mailbox is not None:
            self._mailbox.wait_drained(WAKE_REPORT_WAIT_S)
        return self.ready_wake()

    def ready_wake(self) -> MailboxWake | None:
        """How the inbox is woken, for a ``ready`` about to tell it."""
        self._wake_reported = self._wake_mode()
        self._ready_sent = True
        return self._wake_reported

    def wake_changed(self, inbox: str, mode: str) -> None:
        """The mailbox receiver's thread: how an inbox is woken changed."""
        if inbox == self._ctx.env.agent_id:
            self._ctx.post(self._report_wake)

    def _wake_mode(self) -> MailboxWake | None:
        mode = self._mailbox.wake_mode(self._ctx.env.agent_id) if self._mailbox else None
        return (
            None if mode is None else cast(MailboxWake, mode if mode in _WAKE_MODES else "unknown")
        )

    def _report_wake(self) -> None:
        """Tell the parent (``status`` shows it; ``read`` gets the line) when the inbox is woken
        another way than ``ready`` said, e.g. its doorbell was swapped and it is only polled."""
        mode = self._wake_mode()
        if not self._ready_sent or mode is None or mode == self._wake_reported:
            return  # not ready yet (``ready`` says it), or nothing new
        was, self._wake_reported = self._wake_reported, mode
        degraded = mode == "polling"
        text = f"mailbox: this agent's inbox is now woken by {mode} (was {was or 'unknown'})"
        if degraded:
            text += f"; deliveries wait up to {self._fallback_poll_s} s"
        self._log.log("WARNING" if degraded else "INFO", text)
        self._ctx.runtime("error", text=text, is_error=degraded, mailbox_wake=mode)
