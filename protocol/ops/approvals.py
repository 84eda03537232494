"""The approval operations: the parent's ``approve`` / ``deny`` and the child's
``approve-request`` (see :mod:`protocol.ops`; the rules are :mod:`protocol.session.approvals`).

The parent's entries are re-exported by :mod:`protocol.ops.parent` and the child's by
:mod:`protocol.ops.child`, so each table lists them after its own."""

from __future__ import annotations

from typing import Any

from protocol.calls import api
from protocol.calls.approvals import ApproveArgs, DenyArgs
from protocol.core.limits import DeadlineSeconds, Text
from protocol.ops.spec import Param, Tool, entry

__all__ = ["APPROVE", "APPROVE_REQUEST", "DENY", "ChildApprovalArgs", "approval_view"]

_REQUEST = Param(
    description="The approval request's id (from the approval_requested notification)",
    cli="request_id",
    metavar="REQ",
)


def _answered(data: dict[str, Any]) -> str:
    who = data.get("agent_name") or data.get("agent_id")
    verdict = "approved" if data.get("approved") else "denied"
    said = f": {data['answer']}" if data.get("answer") else ""
    return f"{data['request_id']} {verdict} ({who}){said}"


APPROVE = entry(
    "approve",
    ApproveArgs,
    help="approve a child's approval request (its blocked call goes on)",
    view=_answered,
    params={
        "request_id": _REQUEST,
        "note": Param(
            description="A note for the agent (it gets it with the approval)",
            cli="--note",
            metavar="TEXT",
            help="a note the agent gets with the approval",
        ),
    },
    tool=Tool(
        description=(
            "Approve an agent's approval request (notice approval_requested): the agent's "
            "blocked call returns approved, with the note if you give one, and its task goes on."
        ),
        prompt_snippet="Approve an agent's pending approval request",
    ),
)

DENY = entry(
    "deny",
    DenyArgs,
    help="deny a child's approval request, with the reason",
    view=_answered,
    params={
        "request_id": _REQUEST,
        "reason": Param(
            description="Why not (the agent gets it)",
            cli="--reason",
            metavar="TEXT",
            help="why not (the agent gets it)",
        ),
    },
    tool=Tool(
        description=(
            "Deny an agent's approval request (notice approval_requested): the agent's blocked "
            "call returns denied with your reason."
        ),
        prompt_snippet="Deny an agent's pending approval request, saying why",
    ),
)


#: what ``shepherd-child approve-request`` answers: the decision
Decision = dict[str, Any]


class ChildApprovalArgs(
    api.Arguments[Decision], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child approve-request``: ask the parent, block until it answers."""

    message: Text
    #: None: the session's default reply deadline (none unless the settings give one)
    timeout_s: DeadlineSeconds | None = None


def approval_view(data: dict[str, Any]) -> str:
    """The decision as the child's command prints it: the note or the reason."""
    return str(data.get("answer") or ("approved" if data.get("approved") else "denied"))


APPROVE_REQUEST = entry(
    "approve-request",
    ChildApprovalArgs,
    role="child",
    help="ask the parent for approval and wait for the answer (exit 0 approved, 1 denied)",
    view=approval_view,
    params={
        "message": Param(description="What you want to do, and why", cli="text"),
        "timeout_s": Param(
            description=(
                "Seconds to wait for the answer (at most 604800, 7 days); past it the request "
                "is denied with reason timeout"
            ),
            cli="--timeout",
            metavar="SECONDS",
            help="deny with reason timeout after this many seconds",
        ),
    },
    exit_status=lambda data: 0 if data.get("approved") else 1,
    blocks=True,
    tool=Tool(
        description=(
            "Ask the parent for permission before doing something that needs it (a destructive "
            "command, a push, a write outside your tree): say what and why. It blocks until the "
            "parent answers and tells you whether it was approved, with the parent's note or "
            "reason. Do not do the thing if it was denied."
        ),
        prompt_snippet="Ask the parent for approval and wait for its answer",
        name="shepherd_request_approval",
    ),
)
