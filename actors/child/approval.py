"""``shepherd-child approve-request TEXT [--timeout S]``: ask the parent, block until it answers.

Rules:
- The request is one ``message`` envelope to the parent with ``approval`` (and
  ``reply_timeout_s`` from ``--timeout``), published as this agent like ``message`` (with the
  same back-pressure retries), naming a one-shot inbox that this call creates and locks first
  (:mod:`actors.transports.mailbox.reply_inboxes`). The parent's receipt arrives there within the
  child timeout (30 s, ``SHEPHERD_CHILD_TIMEOUT_S``), then, whenever the parent decides, the
  decision (a ``notice`` ``approval_approved`` / ``approval_denied`` naming the request). A refusal
  or no receipt exits 2 as every child command does.
- The call waits for the decision as long as the request lives: with ``--timeout S`` the
  parent denies it at S with reason ``timeout``; this call gives up by itself only
  :data:`GRACE_S` later (the parent gone for good), denied with reason ``timeout`` too.
  Without ``--timeout`` it waits until the parent answers, the task ends or the agent is
  closed (each a decision), or until it is killed (the bridge stops every process of its
  agent when the parent is gone past its reconnect window).
- Exit 0 approved, 1 denied; the note or the reason on stdout (``approved`` / ``denied`` when
  there is none); ``--json``: ``{"request_id", "approved", "answer"}``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from actors.child.env import ChildEnv, envelope_validator
from actors.child.outbox import until_reachable
from actors.runtime.clock import Clock, SystemClock
from actors.runtime.ids import IdSource
from actors.runtime.transport import Transport
from protocol.calls.approvals import APPROVED, DENIED, TIMEOUT_REASON
from protocol.core.errors import ErrorInfo, SessionUnavailable, error_from_info
from protocol.core.ids import PARENT_ID, IdKind
from protocol.ops.approvals import ChildApprovalArgs
from protocol.wire.envelopes import AckEnvelope, AnyEnvelope, MessageEnvelope, NoticeEnvelope

__all__ = ["GRACE_S", "ask"]

#: how long past its own deadline the call waits for the parent's ``timeout`` decision
GRACE_S = 30.0


#: publish to the parent, retrying while its inbox is full, until a monotonic deadline
Publisher = Callable[[Transport, AnyEnvelope, Clock, float], None]


def ask(
    env: ChildEnv, args: ChildApprovalArgs, *, ack_timeout_s: float, publish: Publisher
) -> dict[str, Any]:
    """Open the approval request and wait for the decision (see the module rules)."""
    message_id = IdSource().new(IdKind.MESSAGE)
    clock = SystemClock()
    envelope = MessageEnvelope(
        message_id=message_id,
        session_id=env.session_id,
        sender_id=env.agent_id,
        target_id=PARENT_ID,
        created_at=clock.now(),
        capability=env.capability,
        reply_inbox=message_id,
        content=args.message,
        expects_reply=True,
        approval=True,
        reply_timeout_s=args.timeout_s,
    )
    validate = envelope_validator(env, kinds=(AckEnvelope, NoticeEnvelope))
    # the session's transport (its mailbox, or NATS), imported when a request is made
    from actors.transports.wire import open_reply_inbox

    mailbox = env.open_transport(validate=validate)
    acks: list[AckEnvelope] = []
    decisions: list[NoticeEnvelope] = []
    acked, decided = threading.Event(), threading.Event()

    def on_envelope(received: AnyEnvelope) -> None:
        if isinstance(received, AckEnvelope) and received.ack_for == message_id:
            acks.append(received)
            acked.set()
        elif (
            isinstance(received, NoticeEnvelope)
            and received.ref_id == message_id
            and received.code in (APPROVED, DENIED)
        ):
            decisions.append(received)
            decided.set()
            acked.set()  # a decision implies the request was accepted

    deadline = clock.monotonic() + ack_timeout_s
    try:  # each step waits out an outage (a NATS leader election) within the call's bound
        inbox = until_reachable(lambda: open_reply_inbox(mailbox, message_id), clock, deadline)
    except BaseException:
        mailbox.close()
        raise
    try:
        subscription = until_reachable(
            lambda: mailbox.subscribe(message_id, on_envelope), clock, deadline
        )
        try:
            publish(mailbox, envelope, clock, deadline)
            if not acked.wait(max(0.0, deadline - clock.monotonic())):
                raise SessionUnavailable(
                    f"no receipt from the shepherd within {ack_timeout_s:g} s "
                    f"(approval request {message_id}); is the session still running?"
                )
            if acks and not acks[0].accepted:
                info = acks[0].error or ErrorInfo(code="refused", message="refused")
                raise error_from_info(info)
            wait_s = None if args.timeout_s is None else args.timeout_s + GRACE_S
            if not decided.wait(wait_s):
                return {"request_id": message_id, "approved": False, "answer": TIMEOUT_REASON}
        finally:
            subscription.cancel()
    finally:
        mailbox.close()
        inbox.remove()
    decision = decisions[0]
    return {
        "request_id": message_id,
        "approved": decision.code == APPROVED,
        "answer": decision.text or None,
    }
