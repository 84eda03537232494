"""What the parent sends its agents, built in one place: receipts, notices, controls.

Rules:
- Every envelope from an agent gets an honest receipt (``ack``: accepted, or refused with a
  typed error). A one-shot sender (a child's shell command) waits for it in the inbox it named
  (``reply_inbox``); anyone else gets it in its own inbox, unless it is closed.
- A receipt names the task; it never echoes the task's text or a long summary back (a text
  that fit on its way in could make the receipt too big on its way out).
- A closed or unknown agent is sent nothing.
- An envelope that, stamped for its target, would not fit the mailbox is refused
  (``limit_exceeded``) before the operation is accepted, so nothing accepted can fail to be
  delivered for its size.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from protocol.calls.answers import preview_result
from protocol.core.errors import ErrorInfo, LimitExceeded
from protocol.core.ids import PARENT_ID, IdKind
from protocol.core.tracecontext import TRACEPARENT_ROOM
from protocol.records.tasks import TaskResult
from protocol.session.effects import Deliver, Effect, Publish
from protocol.session.state import Ctx, SessionState
from protocol.wire.envelopes import AckEnvelope, Envelope, NoticeEnvelope, encode_envelope

__all__ = ["ack", "check_fits", "from_parent", "notice"]

E = TypeVar("E", bound=Envelope)


def from_parent(cls: type[E], s: SessionState, cx: Ctx, target_id: str, **fields: Any) -> E:
    """An envelope from the parent: a new message id, this session, now."""
    return cls(
        message_id=fields.pop("message_id", None) or cx.ids.new(IdKind.MESSAGE),
        session_id=s.session_id,
        sender_id=PARENT_ID,
        target_id=target_id,
        created_at=fields.pop("created_at", cx.now),
        **fields,
    )


def ack(
    s: SessionState,
    cx: Ctx,
    env: Envelope,
    *,
    error: ErrorInfo | None = None,
    request_id: str | None = None,
    result: TaskResult | None = None,
    note: str | None = None,
) -> list[Effect]:
    row = s.agents.get(env.sender_id)
    if row is None:
        return []
    receipt = from_parent(
        AckEnvelope,
        s,
        cx,
        row.agent_id,
        ack_for=env.message_id,
        accepted=error is None,
        error=error,
        request_id=request_id,
        task_id=getattr(env, "task_id", None),
        result=preview_result(result) if result is not None else None,
        note=note,
    )
    if env.reply_inbox is not None:
        stamped = msgspec.structs.replace(receipt, capability=row.capability)
        return [Publish(inbox=env.reply_inbox, envelope=stamped)]
    if row.closed:
        return []
    return [Deliver(agent_id=row.agent_id, envelope=receipt)]


def notice(
    s: SessionState, cx: Ctx, agent_id: str, code: str, text: str, ref_id: str | None
) -> list[Effect]:
    row = s.agents.get(agent_id)
    if row is None or row.closed:
        return []
    env = from_parent(NoticeEnvelope, s, cx, agent_id, code=code, text=text, ref_id=ref_id)
    return [Deliver(agent_id=agent_id, envelope=env)]


def check_fits(s: SessionState, env: Envelope, what: str) -> None:
    row = s.agents.get(env.target_id)
    stamped = msgspec.structs.replace(
        env,
        session_id=s.session_id,
        capability=row.capability if row is not None else "",
        # room for the trace context the parent adds when tracing is on
        traceparent=max(env.traceparent or "", TRACEPARENT_ROOM, key=len),
    )
    size = len(encode_envelope(stamped))
    limit = s.settings.max_envelope_bytes
    if size > limit:
        raise LimitExceeded(
            f"{what} does not fit one envelope: {size} bytes encoded, over the "
            f"{limit}-byte limit (max_envelope_bytes); send a shorter text, or a path to "
            "a file holding it"
        )
