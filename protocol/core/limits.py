"""The bounds of every value a user can pass, and of every answer that can grow: one table.

Rules:

1. **Checked once, where the arguments are defined.** Each bound is a msgspec constraint on an
   annotated type below, used by the operation's ``*Args`` Struct (``protocol.calls.api``), the
   child commands' Structs (``protocol.ops.tools``), the envelopes a child can send
   (``protocol.wire.envelopes``) and the settings (``protocol.records.settings``). Every surface
   (Python API, CLI, MCP, child CLI, settings files, envelopes from a child) converts its input
   into those Structs with ``msgspec.convert``, so one table bounds them all, and the JSON schemas
   the tools publish carry the same numbers (``maximum``, ``maxLength``, ...).
2. **Numbers are finite and in range.** A deadline is positive and at most :data:`MAX_DEADLINE_S`
   (seven days): NaN, infinities, zero, negatives and 1e300 are refused, never read as "no
   deadline" and never handed to a timer (a timestamp out of range once stopped every timer of a
   session). "No deadline" is said by leaving the field out.
3. **Texts fit everywhere they travel.** A text (task, message, summary, reason) is at most
   :data:`MAX_TEXT_CHARS` characters here, a coarse bound; the operative one is the envelope
   it travels in: where a text is put into an envelope, the envelope's encoded size is checked
   against ``max_envelope_bytes`` before the operation is accepted (escaping can make a text
   several times longer on the wire, and a session may raise the limit to pass bigger tasks).
   Receipts, notices, controls and answers carry ids and previews of texts, never a second
   full copy.
4. **Answers are bounded by design.** Status, read, watch and wait answers are paged or
   previewed to fit :func:`answer_budget`; full texts stay in the journal and the task's note.

Sans-IO: constants, annotated types and pure helpers only.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from protocol.core.errors import InvalidArgument

__all__ = [
    "A2A_FILE_POLL_S",
    "A2A_REFRESH_S",
    "MAX_A2A_REQUEST_BYTES",
    "MAX_A2A_STREAMS",
    "MAX_ACP_LINE_BYTES",
    "MAX_APPROVE_RULES",
    "MAX_APPROVE_RULE_CHARS",
    "MAX_BATCH",
    "MAX_BUDGET_COST",
    "MAX_BUDGET_TOKENS",
    "MAX_BUDGET_TURNS",
    "MAX_DEADLINE_MINUTES",
    "MAX_DEADLINE_S",
    "MAX_IDS",
    "MAX_MCP_LINE_BYTES",
    "MAX_NAME_CHARS",
    "MAX_NATS_CREDS_CHARS",
    "MAX_NODE_NAME_CHARS",
    "MAX_OPTION_CHARS",
    "MAX_PAGE_LINES",
    "MAX_PRIORITY",
    "MAX_PROVIDER_CHARS",
    "MAX_REFUSAL_TEXT_CHARS",
    "MAX_RETRY_AFTER_S",
    "MAX_TEXT_CHARS",
    "MAX_TRACEPARENT_CHARS",
    "MAX_TRANSPORT_CHARS",
    "MAX_TRANSPORT_SERVERS",
    "MAX_VERIFY_ATTEMPTS",
    "MAX_VERIFY_COMMAND_CHARS",
    "MAX_VERIFY_TIMEOUT_S",
    "MAX_WATCHDOG_ALERT_CHARS",
    "MAX_WATCHDOG_EVENTS",
    "MAX_WATCHDOG_TARGETS",
    "NODE_NAME_PATTERN",
    "PREVIEW_CHARS",
    "PROVIDER_PATTERN",
    "WORKTREES_PAGE",
    "WORKTREE_FILES_LISTED",
    "WORKTREE_OVERLAP_AGENTS",
    "ApproveRule",
    "ApproveRules",
    "BudgetCost",
    "BudgetMinutes",
    "BudgetTokens",
    "BudgetTurns",
    "Cursor",
    "DeadlineMinutes",
    "DeadlineSeconds",
    "Handle",
    "IdList",
    "LineCount",
    "NodeName",
    "OptionText",
    "OptionalText",
    "Priority",
    "ProviderName",
    "RefName",
    "RefusalText",
    "RetryAfterSeconds",
    "SoftFraction",
    "Text",
    "TimeoutFrom",
    "Traceparent",
    "UsageCost",
    "UsageTokens",
    "VerifyAttempts",
    "VerifyCommand",
    "VerifyTimeout",
    "WatchdogAlertText",
    "WatchdogEventLimit",
    "answer_budget",
    "preview",
]

#: the longest deadline anything accepts: a task, a reply, a wait (seven days)
MAX_DEADLINE_S: Final = 7 * 24 * 3600.0
MAX_DEADLINE_MINUTES: Final = MAX_DEADLINE_S / 60.0
#: the longest text (task, message, summary, reason), in characters; the envelope it travels
#: in is checked in bytes too (see rule 3): 64 KiB by default
MAX_TEXT_CHARS: Final = 1024 * 1024
#: an option string (a command template, a path, a model name)
MAX_OPTION_CHARS: Final = 4096
#: a name or an id given by the user (names are at most 32; ids are longer)
MAX_NAME_CHARS: Final = 200
#: ids in one watch/wait call
MAX_IDS: Final = 1000
#: how deeply an envelope's free-form data (a call's ``args``, a result's ``data``) may nest;
#: checked explicitly, since the decoder's own bound is the process's recursion limit, which
#: any module may raise
MAX_NESTING: Final = 64
#: items in one batch operation (``delegate_many``): its answer, one line per item, must fit
#: one envelope (at the default 64 KiB, with room to spare; a smaller ``max_envelope_bytes``
#: lowers it, checked before anything is done)
MAX_BATCH: Final = 100
#: output lines one read may ask for (the agent keeps at most ``output_lines``)
MAX_PAGE_LINES: Final = 100_000
#: texts shown inside answers and status rows are cut to this many characters
PREVIEW_CHARS: Final = 500
#: ``serve --transport nats://HOST:PORT[,HOST:PORT...]``: servers one session may name (a
#: cluster is three or five; the list travels in every agent's environment and session.json)
MAX_TRANSPORT_SERVERS: Final = 16
#: the whole ``--transport`` value, in characters
MAX_TRANSPORT_CHARS: Final = 2048

#: a node's name (``shepherd node --name``, ``spawn --node``): a host-name label, lowercase
#: letters, digits and '-', at most 63 characters; it is one token of NATS subjects, so a dot,
#: a wildcard, a space or a line break must never get in (the look-ahead ends the name where
#: Python's ``$`` would still allow a final line break)
MAX_NODE_NAME_CHARS: Final = 63
NODE_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9-]{0,62}(?![\s\S])"
#: a NATS ``.creds`` file (``shepherd node --nats-creds``, and the child's credentials a spawn
#: request carries to its node): a user JWT with its permissions and a seed; Shepherd's users
#: are about 2 KiB
MAX_NATS_CREDS_CHARS: Final = 16 * 1024

#: a deadline: finite, > 0, at most seven days (NaN and infinities fail both comparisons)
DeadlineMinutes = Annotated[float, msgspec.Meta(gt=0, le=MAX_DEADLINE_MINUTES)]
DeadlineSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_DEADLINE_S)]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS)]
OptionalText = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]
OptionText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_OPTION_CHARS)]
Handle = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
IdList = Annotated[
    tuple[Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS)], ...],
    msgspec.Meta(min_length=1, max_length=MAX_IDS),
]
NodeName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_NODE_NAME_CHARS, pattern=NODE_NAME_PATTERN)
]
LineCount = Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE_LINES)]
Cursor = Annotated[int, msgspec.Meta(ge=0)]

# --- budgets: what a task or a session may spend, and what an agent may report it spent

#: the most turns one task may be given
MAX_BUDGET_TURNS: Final = 100_000
#: the most tokens a budget may give (a trillion): also the most one usage report may carry
MAX_BUDGET_TOKENS: Final = 10**12
#: the most US dollars a budget may give: also the most one usage report may carry
MAX_BUDGET_COST: Final = 1_000_000.0

#: a budget: a positive whole number or amount, at most its ceiling (NaN, infinities, zero,
#: negatives and 1e300 are refused: "no budget" is said by leaving the field out)
BudgetTurns = Annotated[int, msgspec.Meta(ge=1, le=MAX_BUDGET_TURNS)]
BudgetTokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_BUDGET_TOKENS)]
BudgetCost = Annotated[float, msgspec.Meta(gt=0, le=MAX_BUDGET_COST)]
#: wall time a task may take, in minutes: bounded as a deadline is
BudgetMinutes = DeadlineMinutes
#: one usage report: zero or more, finite, at most the ceiling of a budget
UsageTokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_BUDGET_TOKENS)]
UsageCost = Annotated[float, msgspec.Meta(ge=0, le=MAX_BUDGET_COST)]
# --- model providers (rate limits, provider errors: protocol.session.providers)

#: a model provider's name (``openai``, ``anthropic``, a models.json key): a token, no spaces
MAX_PROVIDER_CHARS: Final = 64
PROVIDER_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(?![\s\S])"
#: the longest wait a provider's Retry-After may ask for that is taken as said (a day); the
#: session caps its cool-down lower (``provider_cooldown_max_s``)
MAX_RETRY_AFTER_S: Final = 86400.0
ProviderName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_PROVIDER_CHARS, pattern=PROVIDER_PATTERN)
]
RetryAfterSeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_RETRY_AFTER_S)]
#: what a provider said when it refused a turn (its error text), as an agent reports it: a
#: quarter of an envelope (an adapter cuts a longer one; ``shepherd-child`` refuses it)
MAX_REFUSAL_TEXT_CHARS: Final = 16 * 1024
RefusalText = Annotated[str, msgspec.Meta(max_length=MAX_REFUSAL_TEXT_CHARS)]

# --- live edit collisions (protocol.session.collisions)

#: the files one tool call of an agent says it writes, at most (more are not counted)
MAX_EDIT_PATHS: Final = 20
EditPath = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
EditPaths = Annotated[tuple[EditPath, ...], msgspec.Meta(max_length=MAX_EDIT_PATHS)]

# --- admission (``serve --max-running``: protocol.session.admission)

#: a queued task's priority: higher first, then first queued first
MAX_PRIORITY: Final = 1000
Priority = Annotated[int, msgspec.Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
#: where a task's deadline counts from: its delegation (default) or its start (out of the queue)
TimeoutFrom = Literal["delegate", "start"]
#: a cap on tasks handed over at once (``serve --max-running``, ``shepherd node --max-running``)
MAX_RUNNING_CAP: Final = 1_000_000
RunningCap = Annotated[int, msgspec.Meta(ge=1, le=MAX_RUNNING_CAP)]


def running_cap(value: object, what: str) -> int:
    """``value`` as a cap on running tasks, or ``invalid_argument`` naming ``what``."""
    try:
        return msgspec.convert(value, RunningCap, strict=False)
    except msgspec.ValidationError:
        raise InvalidArgument(
            f"{what}: {str(value)[:20]!r}: a whole number of 1 to {MAX_RUNNING_CAP}"
        ) from None


# --- acceptance checks (``delegate --verify CMD``: protocol.records.checks)

#: the longest check command, in characters (a shell command line, not a script)
MAX_VERIFY_COMMAND_CHARS: Final = 4096
#: the most attempts one task's check may get
MAX_VERIFY_ATTEMPTS: Final = 10
#: the longest one run of a check may take, in seconds (an hour)
MAX_VERIFY_TIMEOUT_S: Final = 3600.0
VerifyCommand = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_VERIFY_COMMAND_CHARS)]
VerifyAttempts = Annotated[int, msgspec.Meta(ge=1, le=MAX_VERIFY_ATTEMPTS)]
VerifyTimeout = Annotated[float, msgspec.Meta(gt=0, le=MAX_VERIFY_TIMEOUT_S)]

#: the share of a budget at which the parent is warned once (the soft limit)
SoftFraction = Annotated[float, msgspec.Meta(gt=0, le=1)]

#: room kept in an envelope for everything around an answer's data (ids, header, escaping slack)
_ENVELOPE_HEADROOM: Final = 2048


def answer_budget(max_envelope_bytes: int) -> int:
    """Bytes an answer's data may take so that its envelope fits ``max_envelope_bytes``."""
    return max(512, max_envelope_bytes - _ENVELOPE_HEADROOM)


def preview(text: str | None, limit: int = PREVIEW_CHARS) -> str | None:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text)} characters in all]"


# --- trace context (W3C traceparent) carried in envelopes and the child's environment

#: the longest traceparent an envelope may carry: version 00 is exactly 55 characters; later
#: versions may append fields, which a reader of version 00 ignores (W3C Trace Context)
MAX_TRACEPARENT_CHARS: Final = 256
Traceparent = Annotated[str, msgspec.Meta(max_length=MAX_TRACEPARENT_CHARS)]


# --- agents' git worktrees (``spawn --worktree``, task changes, ``shepherd worktrees``)

#: changed paths a task's result lists (it always gives their count); also per overlap
WORKTREE_FILES_LISTED: Final = 50
#: other agents an overlap names (it says how many there were when more)
WORKTREE_OVERLAP_AGENTS: Final = 10
#: worktrees per page of ``shepherd worktrees`` (each row is inspected with git)
WORKTREES_PAGE: Final = 20
#: a git ref name given by the user (``--branch``, ``--base``); git checks the rest
RefName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]


# ------------------------------------------------------------------ approvals
# (``spawn --approve TOOL:GLOB``: Pi tool calls that need the parent's approval)

#: rules one agent may have
MAX_APPROVE_RULES: Final = 64
#: one rule's length in characters (``bash:git push*``)
MAX_APPROVE_RULE_CHARS: Final = 1000
#: a tool name (Pi's or an extension's: letters, digits, ``_``, ``-``, ``.``), a colon, then a
#: non-empty glob (``*`` any text, ``?`` one character)
ApproveRule = Annotated[
    str,
    msgspec.Meta(
        min_length=3,
        max_length=MAX_APPROVE_RULE_CHARS,
        pattern=r"^[A-Za-z0-9_.-]{1,64}:[\s\S]*\S[\s\S]*$",
    ),
]
ApproveRules = Annotated[tuple[ApproveRule, ...], msgspec.Meta(max_length=MAX_APPROVE_RULES)]


# ------------------------------------------------------------------ the A2A front door
# (``shepherd a2a``: :mod:`actors.surfaces.a2a_server`)

#: the largest request body the front door reads, in bytes (a JSON-RPC frame): a task's text
#: is bounded again as every task is (``Text``, then the envelope's ``max_envelope_bytes``);
#: a body over this is refused before it is read whole
MAX_A2A_REQUEST_BYTES: Final = 2 * 1024 * 1024
#: requests that follow a task at once (streams, and SendMessage calls waiting for their
#: task): each holds an open connection and a place in the front door's refresh
MAX_A2A_STREAMS: Final = 64
#: how often the front door looks at the size of the session's notifications file while it
#: follows tasks (a question to the parent, a watched completion: told at once)
A2A_FILE_POLL_S: Final = 0.025
#: how often it asks the session for the state of the tasks it follows when nothing was
#: written there (a reply given from another surface, a peer's answer)
A2A_REFRESH_S: Final = 0.5


# ------------------------------------------------------------------ the MCP server
# (``shepherd mcp``: :mod:`actors.surfaces.mcp_wire`)

#: the longest line (one JSON-RPC frame) the server reads from stdin, in bytes: four times
#: the largest envelope a session takes (16 MiB), room for JSON's escapes in a call's text; a
#: longer line is read to its end without being kept and answered ``Invalid Request``
MAX_MCP_LINE_BYTES: Final = 64 * 1024 * 1024

#: the longest line (one JSON-RPC frame) read from an ACP agent, in bytes (``--adapter acp``:
#: :mod:`actors.child.acp_lines`); a longer one ends the connection, and the agent is failed
MAX_ACP_LINE_BYTES: Final = 16 * 1024 * 1024


# ------------------------------------------------------------------ the watchdog role
# (``spawn --role watchdog``: what such an agent may ask the parent, ``shepherd-child
# watchdog-*``; protocol.session.watchdog_queries)

#: events one ``watchdog-events`` answer may hold (the newest; the watchdog keeps at most
#: ``max_events_per_agent`` per agent, 200 by default), 20 when not given
MAX_WATCHDOG_EVENTS: Final = 200
#: agents one ``watchdog-status`` or ``watchdog-stuck`` answer lists (the most recently
#: active first; the answer gives how many there are in all)
MAX_WATCHDOG_TARGETS: Final = 100
#: the longest alert a watchdog agent may send the parent, in characters
MAX_WATCHDOG_ALERT_CHARS: Final = 4000
WatchdogEventLimit = Annotated[int, msgspec.Meta(ge=1, le=MAX_WATCHDOG_EVENTS)]
WatchdogAlertText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_WATCHDOG_ALERT_CHARS)]
