"""An approval request's decision: what it records when it closes, and who is told.

Rules (see :mod:`protocol.session.approvals` for opening and answering one):

1. An approval closes through the request machine like a question; it is approved only when
   the parent approved it (``replied`` with ``approved``). Every other close is a denial with
   its reason: the parent's, ``timeout`` (its deadline passed), or why it was cancelled (its
   task ended, its agent was closed, its message could not be delivered).
2. The blocked call is told at once, after the record is journaled: a ``notice`` envelope
   (:data:`~protocol.calls.approvals.APPROVED` / :data:`~protocol.calls.approvals.DENIED`) in the
   one-shot inbox it waits on (stamped with its agent's capability), or in the agent's inbox when
   the request named none. Never as a notice about a closed question (the call got its answer).
3. An approval that timed out is also told to the parent (it was asked and did not answer).
"""

from __future__ import annotations

import msgspec

from protocol.calls.approvals import APPROVED, DENIED, TIMEOUT_REASON
from protocol.records.notifications import Notice
from protocol.records.requests import RequestRecord, RequestState
from protocol.session import outbox
from protocol.session.effects import Deliver, Effect, Notify, Publish
from protocol.session.state import Ctx, SessionState
from protocol.wire.envelopes import NoticeEnvelope

__all__ = ["decided", "notice_for", "tell"]


def decided(record: RequestRecord, approved: bool, answer: str | None) -> RequestRecord:
    """``record`` (just closed) with its outcome (rule 1)."""
    if record.state is RequestState.REPLIED:
        return msgspec.structs.replace(record, approved=approved, answer=answer)
    if record.state is RequestState.TIMED_OUT:
        answer = TIMEOUT_REASON
    return msgspec.structs.replace(record, approved=False, answer=answer or record.state.value)


def notice_for(s: SessionState, record: RequestRecord, cx: Ctx) -> NoticeEnvelope:
    """The decision as its sender's blocked call gets it (unstamped)."""
    return outbox.from_parent(
        NoticeEnvelope,
        s,
        cx,
        record.sender_id,
        code=APPROVED if record.approved else DENIED,
        text=record.answer or "",
        ref_id=record.request_id,
    )


def tell(s: SessionState, record: RequestRecord, cx: Ctx) -> list[Effect]:
    """Rules 2 and 3, for a closed approval."""
    effects: list[Effect] = []
    row = s.agents.get(record.sender_id)
    if row is not None:
        env = notice_for(s, record, cx)
        if record.reply_inbox is not None:
            stamped = msgspec.structs.replace(env, capability=row.capability)
            effects.append(Publish(inbox=record.reply_inbox, envelope=stamped))
        elif not row.closed:
            effects.append(Deliver(agent_id=row.agent_id, envelope=env))
    if record.state is RequestState.TIMED_OUT:
        text = (
            f"approval request {record.request_id} from {s.name_of(record.sender_id)} timed "
            f"out unanswered and was denied: {record.question}"
        )
        note = Notice(
            created_at=cx.now,
            code="approval_timed_out",
            text=text,
            agent_id=record.sender_id,
            task_id=record.task_id,
            refs=(record.request_id,),
        )
        effects.append(Notify(note=note))
    return effects
