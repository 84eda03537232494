"""Everything that crosses a process boundary, as msgspec Structs.

One envelope is one immutable JSON object tagged by ``kind``:

=============  =====================  ==========================================================
kind           direction              meaning
=============  =====================  ==========================================================
``message``    any → any (via parent)  asynchronous content; ``expects_reply`` opens a request
                                       (``approval``: an approval request to the parent)
``reply``      any → any (via parent)  content answering request ``reply_to``
``task``       parent → agent          a delegated task (its description and context)
``task_done``  agent → parent          the explicit terminal signal for the agent's task
``runtime``    agent → parent          turn start/end, tool call/result, output, exit: never
                                       a settlement
``query``      agent → parent          a watchdog agent's read-only question about the session's
                                       agents, or its alert (answered in the ``ack``'s ``data``)
``ack``        parent → sender         the honest receipt for an envelope: accepted or refused
``control``    parent → agent          cancel the task, close, abort the running turn
``notice``     parent → agent          something the agent should know (request timed out,
                                       peer closed, non-delivery)
``call``       client → parent         a CLI operation (spawn, delegate, watch, ...)
``result``     parent → client         the answer to a ``call``
=============  =====================  ==========================================================

Fields a child can set carry the bounds of :mod:`protocol.core.limits` (a text's length, a reply
deadline), so an envelope out of bounds fails decoding like any malformed one: quarantined with
the reason, and its authenticated sender told.

Decoding is strict on purpose (``forbid_unknown_fields``): parent and children run from one
installation, so an unknown field is a bug or a forgery, not a newer peer. Schema evolution
happens by appending fields with defaults, which strict decoding still accepts from older
writers. One module-level :data:`ENCODER` and :data:`DECODER` serve every caller.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from protocol.core.errors import ErrorInfo, InvalidEnvelope
from protocol.core.ids import PARENT_ID, IdKind, an_id_of, is_id_of, is_valid_name
from protocol.core.limits import (
    MAX_NESTING,
    DeadlineSeconds,
    EditPaths,
    Handle,
    OptionalText,
    ProviderName,
    RetryAfterSeconds,
    Traceparent,
    UsageCost,
    UsageTokens,
    WatchdogAlertText,
    WatchdogEventLimit,
)
from protocol.core.tracecontext import parse_traceparent
from protocol.records.tasks import DoneStatus, TaskResult

__all__ = [
    "DECODER",
    "ENCODER",
    "AckEnvelope",
    "AnyEnvelope",
    "CallEnvelope",
    "ControlEnvelope",
    "Delivery",
    "Envelope",
    "MailboxWake",
    "MessageEnvelope",
    "NoticeEnvelope",
    "QueryEnvelope",
    "ReplyEnvelope",
    "ResultEnvelope",
    "RuntimeEnvelope",
    "RuntimeEvent",
    "TaskDoneEnvelope",
    "TaskEnvelope",
    "WatchdogQueryOp",
    "decode_envelope",
    "encode_envelope",
    "nested_deeper",
    "validate_addresses",
]

Delivery = Literal["follow_up", "steer"]
RuntimeEvent = Literal[
    "ready",  # the agent process is up and can take input
    "turn_start",
    "turn_end",  # a turn ended: the agent is idle. NEVER a task settlement.
    "tool_call",
    "tool_result",
    "output",  # text the agent produced (kept for `shepherd read`)
    "exit",  # the agent process exited (exit_code)
    "error",  # the bridge hit an error it could not hand to the agent
    "condensation",  # the agent's context was summarised (Pi's compaction); text: what
    "usage",  # what the agent spent since its last report (tokens, cost): counted, not settled
    "not_sent",  # text: what the bridge gave up sending while the session was unreachable
    # the model provider refused the agent's turn for its rate limit (provider, retry_after_s
    # when the provider said one, text: its words); the agent waits for ``resume``
    "rate_limited",
    # the model provider failed the agent's turn otherwise (provider, text: the error); the
    # agent waits for ``resume`` (the session retries it, or ends the task: provider_error)
    "provider_error",
]
#: ``hold``: start no new turn (a provider's cool-down: ``reason`` says whose and until when)
#: until ``resume``; ``resume``: run again the turn the provider refused, and take new turns
ControlAction = Literal["cancel_task", "close", "abort", "hold", "resume"]
#: How a process's inbox reader is woken: an inotify watch, the inbox's doorbell, watchfiles,
#: or nothing but the fallback rescan ("polling": deliveries wait up to fallback_poll_s); on
#: NATS, "nats" (the server answers a pending pull as soon as a message is stored).
MailboxWake = Literal["inotify", "bell", "watchfiles", "polling", "nats", "unknown"]
#: what a watchdog agent may ask the parent (``shepherd-child watchdog-status|watchdog-events|
#: watchdog-stuck|watchdog-alert``): read the watchdog's view, or alert the parent
WatchdogQueryOp = Literal["status", "events", "stuck", "alert"]


class Envelope(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="kind",
    forbid_unknown_fields=True,
    omit_defaults=True,
):
    """Fields common to every kind. ``capability`` proves the sender; it never leaves the
    mailbox layer (receipts and notifications never echo it)."""

    message_id: str
    session_id: str
    sender_id: str
    target_id: str
    created_at: float
    capability: str = ""
    #: where the receipt goes, if not to the sender's own inbox: a one-shot inbox named by a
    #: message id, created by a short-lived sender (a CLI call, a child's shell command)
    reply_inbox: str | None = None
    # --- trace context
    #: the W3C traceparent of the span this envelope belongs to (a task's, a tool call's, a
    #: message's), when tracing is on. Bounded; one that is not a valid traceparent is
    #: dropped when decoding (:func:`decode_envelope`): the reader starts a new trace, and
    #: the envelope is delivered as if it had none.
    traceparent: Traceparent | None = None


class MessageEnvelope(Envelope, frozen=True, kw_only=True, tag="message"):
    content: OptionalText
    task_id: str | None = None
    thread_id: str | None = None
    expects_reply: bool = False
    delivery: Delivery = "follow_up"
    reply_timeout_s: DeadlineSeconds | None = None
    sender_name: str | None = None
    #: an approval request to the parent (``shepherd-child approve-request``): the sender's
    #: call blocks until the parent approves or denies it (protocol.session.approvals)
    approval: bool = False


class ReplyEnvelope(Envelope, frozen=True, kw_only=True, tag="reply"):
    content: OptionalText
    reply_to: str
    task_id: str | None = None
    thread_id: str | None = None
    delivery: Delivery = "follow_up"
    sender_name: str | None = None
    late: bool = False  # set by the parent when the request was already closed


class TaskEnvelope(Envelope, frozen=True, kw_only=True, tag="task"):
    task_id: str
    content: str
    deadline_at: float | None = None
    #: handed again after ``serve --recover`` (its agent's process was gone); the content
    #: says so and carries the task's history
    resumed: bool = False


class TaskDoneEnvelope(Envelope, frozen=True, kw_only=True, tag="task_done"):
    #: the task being finished; None means the sender's active task
    task_id: str | None = None
    status: DoneStatus
    summary: OptionalText | None = None
    error: OptionalText | None = None
    cancel_requests: bool = False


class RuntimeEnvelope(Envelope, frozen=True, kw_only=True, tag="runtime"):
    event: RuntimeEvent
    tool: str | None = None
    command: str | None = None
    output: str | None = None
    exit_code: int | None = None
    is_error: bool = False
    text: str | None = None
    pid: int | None = None
    #: on ``ready`` after a parent restart: a turn of the agent is still running
    in_turn: bool = False
    #: how the bridge's inbox is woken: sent with ``ready`` and again when it changes
    mailbox_wake: MailboxWake | None = None
    #: on ``usage``: tokens and cost (US dollars) spent since the last report
    tokens: UsageTokens | None = None
    cost: UsageCost | None = None
    #: on ``rate_limited`` / ``provider_error``: the model provider, and how long it asked to
    #: be left alone (its Retry-After), when it said
    provider: ProviderName | None = None
    retry_after_s: RetryAfterSeconds | None = None
    #: on ``tool_call``: the files the tool writes, as the agent named them (Pi's ``write`` /
    #: ``edit``, an ACP agent's edit locations): what live edit collisions are judged on
    paths: EditPaths = ()


class QueryEnvelope(Envelope, frozen=True, kw_only=True, tag="query"):
    """A watchdog agent's question to the parent (:mod:`protocol.session.watchdog_queries`):
    the watchdog's status and targets, an agent's recent events, the detector's verdicts, or
    an alert for the parent. The answer is its receipt's ``data``."""

    op: WatchdogQueryOp
    #: the agent asked about (an agent name or id): ``events`` and ``alert`` need one
    agent: Handle | None = None
    #: ``events``: how many of the newest (default 20)
    limit: WatchdogEventLimit | None = None
    #: ``alert``: what the watchdog agent tells the parent
    text: WatchdogAlertText | None = None


class AckEnvelope(Envelope, frozen=True, kw_only=True, tag="ack"):
    ack_for: str
    accepted: bool
    error: ErrorInfo | None = None
    request_id: str | None = None
    task_id: str | None = None
    result: TaskResult | None = None
    #: what the parent does with what it accepted, when it is not the end (a ``done`` whose
    #: claim is being checked)
    note: str | None = None
    #: the answer to a ``query`` (JSON-able, fitted to one envelope)
    data: Any = None


class ControlEnvelope(Envelope, frozen=True, kw_only=True, tag="control"):
    action: ControlAction
    task_id: str | None = None
    reason: OptionalText | None = None


class NoticeEnvelope(Envelope, frozen=True, kw_only=True, tag="notice"):
    code: str
    text: str
    ref_id: str | None = None


class CallEnvelope(Envelope, frozen=True, kw_only=True, tag="call"):
    op: str
    args: dict[str, Any] = {}


class ResultEnvelope(Envelope, frozen=True, kw_only=True, tag="result"):
    call_id: str
    ok: bool
    data: Any = None
    error: ErrorInfo | None = None


AnyEnvelope = (
    MessageEnvelope
    | ReplyEnvelope
    | TaskEnvelope
    | TaskDoneEnvelope
    | RuntimeEnvelope
    | QueryEnvelope
    | AckEnvelope
    | ControlEnvelope
    | NoticeEnvelope
    | CallEnvelope
    | ResultEnvelope
)

ENCODER: Final = msgspec.json.Encoder()
DECODER: Final = msgspec.json.Decoder(AnyEnvelope)


def encode_envelope(envelope: Envelope) -> bytes:
    return ENCODER.encode(envelope)


def decode_envelope(data: bytes, *, max_bytes: int | None = None) -> AnyEnvelope:
    """Decode strictly; any failure is ``invalid_envelope`` carrying msgspec's field path."""
    if max_bytes is not None and len(data) > max_bytes:
        raise InvalidEnvelope(
            f"envelope is {len(data)} bytes, over the {max_bytes}-byte limit (max_envelope_bytes)"
        )
    try:
        envelope = DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidEnvelope(f"envelope does not match the schema: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidEnvelope(f"envelope is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidEnvelope("envelope is nested too deeply") from None
    free_form = (
        envelope.args
        if isinstance(envelope, CallEnvelope)
        else envelope.data
        if isinstance(envelope, ResultEnvelope | AckEnvelope)
        else None
    )
    if nested_deeper(free_form, MAX_NESTING):
        raise InvalidEnvelope(f"envelope is nested more than {MAX_NESTING} levels deep")
    validate_addresses(envelope)
    if envelope.traceparent is not None and parse_traceparent(envelope.traceparent) is None:
        envelope = msgspec.structs.replace(envelope, traceparent=None)
    return envelope


def nested_deeper(value: object, limit: int) -> bool:
    """Whether ``value``'s lists and dicts nest more than ``limit`` levels (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _is_address(value: str) -> bool:
    return value == PARENT_ID or is_id_of(value, IdKind.AGENT)


#: the optional id fields, in the order they are checked, and the kind each must be
_OPTIONAL_IDS = (
    ("task_id", IdKind.TASK),
    ("reply_to", IdKind.MESSAGE),
    ("ack_for", IdKind.MESSAGE),
    ("call_id", IdKind.MESSAGE),
    ("reply_inbox", IdKind.MESSAGE),
)
#: per envelope class, the entries of _OPTIONAL_IDS it has (see _optional_ids)
_OPTIONAL_IDS_OF: dict[type, tuple[tuple[str, IdKind], ...]] = {}
#: isinstance with a tuple: quicker than with a ``X | Y`` union
_CLIENT_SIDE = (CallEnvelope, ResultEnvelope)
_NAME_ADDRESSED = (MessageEnvelope, ReplyEnvelope)


def _optional_ids(cls: type) -> tuple[tuple[str, IdKind], ...]:
    """The entries of :data:`_OPTIONAL_IDS` that ``cls`` has as fields (all of them if it is
    not a Struct): a missing field reads as None, so only these can hold an id."""
    found = _OPTIONAL_IDS_OF.get(cls)
    if found is None:
        fields = getattr(cls, "__struct_fields__", None)
        found = tuple(item for item in _OPTIONAL_IDS if fields is None or item[0] in fields)
        _OPTIONAL_IDS_OF[cls] = found
    return found


def validate_addresses(envelope: Envelope) -> None:
    """Id fields must be well-formed: a path-like or foreign-shaped id never gets further.

    ``target_id`` of a ``message`` or ``reply`` may also be an agent name (the parent
    resolves it);
    ``call``/``result`` envelopes come from and go to CLI clients, addressed by message ids.
    """
    if not is_id_of(envelope.message_id, IdKind.MESSAGE):
        raise InvalidEnvelope(f"message_id {envelope.message_id!r} is not a message id")
    if not is_id_of(envelope.session_id, IdKind.SESSION):
        raise InvalidEnvelope(f"session_id {envelope.session_id!r} is not a session id")
    client_side = isinstance(envelope, _CLIENT_SIDE)
    sender_ok = _is_address(envelope.sender_id) or (
        client_side and is_id_of(envelope.sender_id, IdKind.MESSAGE)
    )
    if not sender_ok:
        raise InvalidEnvelope(f"sender_id {envelope.sender_id!r} is not an agent id or {PARENT_ID}")
    target_ok = (
        _is_address(envelope.target_id)
        or (isinstance(envelope, _NAME_ADDRESSED) and is_valid_name(envelope.target_id))
        or (client_side and is_id_of(envelope.target_id, IdKind.MESSAGE))
    )
    if not target_ok:
        raise InvalidEnvelope(f"target_id {envelope.target_id!r} is not a valid address")
    for name, expected in _optional_ids(type(envelope)):
        value = getattr(envelope, name, None)
        if value is None:
            continue
        if not is_id_of(value, expected):
            raise InvalidEnvelope(f"{name} {value!r} is not {an_id_of(expected)}")
