"""The request state machine: a question sent with ``expects_reply``, or an approval request.

Rules: a request starts ``pending`` and ends exactly once, ``replied``, ``cancelled`` (its
sender's task settled, its target or sender closed) or ``timed_out`` (its reply deadline
passed). A terminal request never moves again (:func:`resolve` returns ``changed=False``):
a late reply to a request that closed unanswered is delivered as content, and a second reply
to an answered one is refused by the broker.

An approval request (``kind="approval"``) moves through the same machine: the parent's approve
or deny is its ``replied``; ``cancelled`` and ``timed_out`` close it denied.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

import msgspec

from protocol.core.errors import InvalidTransition

__all__ = ["REQUEST_TRANSITIONS", "RequestKind", "RequestRecord", "RequestState", "resolve"]

RequestKind = Literal["question", "approval"]


class RequestState(enum.StrEnum):
    PENDING = "pending"
    REPLIED = "replied"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


#: pending → each terminal state; nothing leaves a terminal state.
REQUEST_TRANSITIONS: Final[dict[RequestState, frozenset[RequestState]]] = {
    RequestState.PENDING: frozenset(
        {RequestState.REPLIED, RequestState.CANCELLED, RequestState.TIMED_OUT}
    ),
    RequestState.REPLIED: frozenset(),
    RequestState.CANCELLED: frozenset(),
    RequestState.TIMED_OUT: frozenset(),
}


class RequestRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One open or closed question. ``request_id`` is the message id."""

    request_id: str
    sender_id: str
    target_id: str
    created_at: float
    question: str = ""
    task_id: str | None = None
    thread_id: str | None = None
    state: RequestState = RequestState.PENDING
    deadline_at: float | None = None
    resolved_at: float | None = None
    reply_id: str | None = None
    #: the start of the reply's text (at most REPLY_KEPT_CHARS): the task's history, for a
    #: task handed again after ``serve --recover``
    reply_text: str = ""
    # approvals (a request to the parent that a blocked child call waits on): see
    # protocol.session.approvals
    #: "approval": the parent answers with approve or deny, never with a reply
    kind: RequestKind = "question"
    #: the one-shot inbox of the blocked call that waits for the decision
    reply_inbox: str | None = None
    #: an approval's outcome once closed: True only when the parent approved it
    approved: bool | None = None
    #: the parent's note or reason, or why it closed unanswered ("timeout", ...)
    answer: str | None = None

    @property
    def pending(self) -> bool:
        return self.state is RequestState.PENDING


#: How much of a reply's text its request record keeps.
REPLY_KEPT_CHARS = 2000


def resolve(
    record: RequestRecord,
    target: RequestState,
    now: float,
    *,
    reply_id: str | None = None,
    reply_text: str = "",
) -> tuple[RequestRecord, bool]:
    """Move a pending request to a terminal state. Returns ``(record, changed)``."""
    if target is RequestState.PENDING:
        raise InvalidTransition(f"request {record.request_id} cannot move back to pending")
    if target not in REQUEST_TRANSITIONS[record.state]:
        return record, False
    return (
        msgspec.structs.replace(
            record,
            state=target,
            resolved_at=now,
            reply_id=reply_id,
            reply_text=reply_text[:REPLY_KEPT_CHARS],
        ),
        True,
    )
