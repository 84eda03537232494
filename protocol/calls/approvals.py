"""Approvals: a child asks the parent for permission and is parked until the answer.

The operations' Structs (``approve``, ``deny``) and what the blocked child call is told. The
rules are :mod:`protocol.session.approvals`; the request itself is a
:class:`~protocol.records.requests.RequestRecord` of ``kind="approval"`` (one machine for questions
and approvals).

What the blocked call is told is a ``notice`` envelope in the one-shot inbox it waits on:
``code`` :data:`APPROVED` or :data:`DENIED`, ``ref_id`` the request id, ``text`` the parent's
note (approved) or the reason (denied: the parent's reason, ``timeout`` when the deadline
passed, or why it was cancelled: the task ended, the agent was closed).

Sans-IO.
"""

from __future__ import annotations

from typing import Final

import msgspec

from protocol.calls import api
from protocol.core.limits import Handle, Text
from protocol.records.requests import RequestRecord, RequestState

__all__ = [
    "APPROVED",
    "DENIED",
    "TIMEOUT_REASON",
    "ApprovalResult",
    "ApproveArgs",
    "DenyArgs",
    "outcome",
]

#: the codes of the decision notice a blocked call gets
APPROVED: Final = "approval_approved"
DENIED: Final = "approval_denied"
#: the reason of an approval whose deadline passed
TIMEOUT_REASON: Final = "timeout"


class ApprovalResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    request_id: str
    approved: bool
    agent_id: str
    agent_name: str | None = None
    task_id: str | None = None
    #: the note (approved) or the reason (denied)
    answer: str | None = None


class ApproveArgs(
    api.Arguments[ApprovalResult], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    request_id: Handle
    note: Text | None = None


class DenyArgs(
    api.Arguments[ApprovalResult], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    request_id: Handle
    reason: Text


def outcome(record: RequestRecord) -> str:
    """How a closed approval ended, in words (``approved``, ``denied: REASON``)."""
    if record.pending:
        return "pending"
    if record.approved:
        return "approved"
    if record.state is RequestState.REPLIED:
        return f"denied by the parent: {record.answer}"
    return f"denied ({record.state.value.replace('_', ' ')}: {record.answer})"
