"""The child's operations: ``shepherd-child message|done`` and the child's tools
``shepherd_message`` / ``shepherd_done``, through the same Structs (see :mod:`protocol.ops`)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from protocol.calls import api, views
from protocol.core.limits import (
    MAX_REFUSAL_TEXT_CHARS,
    MAX_RETRY_AFTER_S,
    Handle,
    OptionalText,
    ProviderName,
    RefusalText,
    RetryAfterSeconds,
    Text,
    UsageCost,
    UsageTokens,
)
from protocol.ops.parent import MESSAGE_PARAMS
from protocol.ops.spec import Param, Tool, entry, respell
from protocol.records.tasks import DoneStatus

__all__ = [
    "DONE",
    "MESSAGE",
    "PROVIDER_ERROR",
    "RATE_LIMITED",
    "USAGE",
    "ChildDoneArgs",
    "ChildMessageArgs",
    "ChildProviderErrorArgs",
    "ChildRateLimitedArgs",
    "ChildUsageArgs",
]

#: what the child's commands answer: the parent's receipt (``message_id``, ``accepted``, and
#: ``request_id``, ``task_id``, ``result`` when they apply)
Receipt = dict[str, Any]


class ChildMessageArgs(
    api.Arguments[Receipt], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child message``: a child's asynchronous message (or reply)."""

    target: Handle
    message: Text
    expects_reply: bool = False
    reply_to: Handle | None = None
    thread_id: Handle | None = None
    steer: bool = False


class ChildDoneArgs(api.Arguments[Receipt], frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``shepherd-child done``: the explicit terminal signal for the child's task."""

    status: DoneStatus
    summary: OptionalText | None = None
    cancel_requests: bool = False


MESSAGE = entry(
    "message",
    ChildMessageArgs,
    role="child",
    help="send a message to a peer, the parent, or a reply",
    view=views.receipt("message"),
    params={
        **MESSAGE_PARAMS,
        "message": respell(MESSAGE_PARAMS["message"], help="the message text"),
        "thread_id": respell(MESSAGE_PARAMS["thread_id"], help="conversation thread id"),
        "reply_to": respell(MESSAGE_PARAMS["reply_to"], help="the message id this answers"),
        "expects_reply": respell(MESSAGE_PARAMS["expects_reply"], help="open a request"),
        "target": Param(
            description='Agent name or id, or "shepherd" for the parent',
            cli="target",
            help='agent name or id, or "shepherd" for the parent',
        ),
        "steer": Param(
            description="Interrupt the recipient instead of queueing (default false)",
            cli="--steer",
            help="interrupt the recipient",
        ),
    },
    tool=Tool(
        description=(
            'Send an asynchronous message to another agent, the parent ("shepherd"), or as a '
            "reply. It returns as soon as the message is accepted; it does not wait for an "
            "answer. Set expects_reply when you need an answer: the answer arrives later as a "
            "new message. Answer a question by setting reply_to to its message id."
        ),
        prompt_snippet=(
            "Send an asynchronous message to a peer agent or the parent (replies arrive later)"
        ),
    ),
)

DONE = entry(
    "done",
    ChildDoneArgs,
    role="child",
    help="finish this agent's delegated task",
    view=views.receipt("done"),
    params={
        "status": Param(description="completed, blocked or failed", cli="--status"),
        "summary": Param(
            description="What was done, or why not",
            cli="--summary",
            metavar="TEXT",
            help="what was done, or why not",
        ),
        "cancel_requests": Param(
            description=(
                "Cancel your questions still waiting for a reply (otherwise 'completed' is "
                "refused while any is open)"
            ),
            cli="--cancel-requests",
            help="cancel this task's open requests",
        ),
    },
    tool=Tool(
        description=(
            "Finish your delegated task: the only way a task ends. Call it once, when the whole "
            "task is completed, or when you are blocked or have failed. Ending your turn does "
            "not finish the task."
        ),
        prompt_snippet=(
            "Mark your delegated task completed, blocked or failed (the only way a task ends)"
        ),
    ),
)


# --- budgets


class ChildUsageArgs(api.Arguments[Receipt], frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``shepherd-child usage``: what the agent spent since its last report, counted against
    its task's budget and the session's."""

    tokens: UsageTokens
    cost: UsageCost | None = None


USAGE = entry(
    "usage",
    ChildUsageArgs,
    role="child",
    help="report tokens (and cost) this agent spent since its last report",
    view=views.receipt("usage"),
    params={
        "tokens": Param(
            description="Tokens spent since the last report (0 to 10^12)",
            cli="--tokens",
            metavar="N",
            help="tokens spent since the last report (0-10^12)",
        ),
        "cost": Param(
            description="Cost in US dollars spent since the last report (0 to 1000000)",
            cli="--cost",
            metavar="USD",
            help="cost since the last report, US dollars (0-1000000)",
        ),
    },
)


# --- model providers: a command agent's turn refused by its provider (actors.child.turn_reports)


class ChildRateLimitedArgs(
    api.Arguments[Receipt], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child rate-limited``: the model provider refused this turn for its rate limit."""

    provider: ProviderName
    retry_after_s: RetryAfterSeconds | None = None
    text: RefusalText | None = None


class ChildProviderErrorArgs(
    api.Arguments[Receipt], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child provider-error``: the model provider failed this turn otherwise."""

    provider: ProviderName
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REFUSAL_TEXT_CHARS)]


def _reported(data: dict[str, Any]) -> str:
    wait = data.get("retry_after_s")
    after = f", retry after {wait:g} s" if wait is not None else ""
    return (
        f"reported {data['reported']} ({data['provider']}{after}): end this turn now; the "
        "parent is told when it has ended, and it runs again when the parent resumes you"
    )


_PROVIDER = Param(
    description="The model provider (openai, anthropic, a models.json key): a name, no spaces",
    cli="--provider",
    metavar="NAME",
    help="the model provider (a name, no spaces, at most 64 characters)",
)

RATE_LIMITED = entry(
    "rate-limited",
    ChildRateLimitedArgs,
    role="child",
    help="report that the model provider refused this turn for its rate limit (429, 529)",
    view=_reported,
    params={
        "provider": _PROVIDER,
        "retry_after_s": Param(
            description=f"The provider's Retry-After, in seconds (0 to {MAX_RETRY_AFTER_S:g})",
            cli="--retry-after",
            metavar="S",
            help=f"the provider's Retry-After, seconds (0-{MAX_RETRY_AFTER_S:g})",
        ),
        "text": Param(
            description="What the provider said",
            cli="--text",
            metavar="TEXT",
            help=f"what the provider said (at most {MAX_REFUSAL_TEXT_CHARS} characters)",
        ),
    },
)

PROVIDER_ERROR = entry(
    "provider-error",
    ChildProviderErrorArgs,
    role="child",
    help="report that the model provider failed this turn (a 5xx, a model error)",
    view=_reported,
    params={
        "provider": _PROVIDER,
        "text": Param(
            description="The provider's error",
            cli="--text",
            metavar="TEXT",
            help=f"the provider's error (at most {MAX_REFUSAL_TEXT_CHARS} characters)",
        ),
    },
)


# approvals (protocol/ops/approvals.py): listed here so it is one of the child's entries
from protocol.ops.approvals import APPROVE_REQUEST  # noqa: E402, F401
