"""The watchdog's operations, beside :mod:`protocol.ops.parent`: eleven entries of the operation
table (see :mod:`protocol.ops`), one per operation of the session's watchdog.

Each entry is an ordinary one: its Args Struct (:mod:`protocol.calls.watchdog`) names the
watchdog actor's operation it runs; the command line spells it as a sub-command of
``shepherd watchdog`` (``cli``), a model reaches it as a ``watchdog_*`` tool, the Python API as
``Session.watchdog_status()`` and the like, ``Supervisor.call`` by its name. Six are commands
(``watchdog status|config|set|pause|resume|inspect``; ``watchdog replay`` runs locally, without
a session, and is the command line's own), six are tools (``watchdog_config`` is both: with a
key and a value it sets one setting).

The older spellings stay answerable: ``Supervisor.call("watchdog", {"op": ..., "args": ...})``
(:func:`check_call`) and ``Session.watchdog(op, **args)`` by the actor's operation name.

Sans-IO: data and pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, get_args

import msgspec

from protocol.calls import watchdog as w
from protocol.calls.watchdog_views import render_config, render_inspect, render_set, render_status
from protocol.core.errors import InvalidArgument
from protocol.ops.spec import Op, Param, Tool, entry
from protocol.watchdog.config import CONFIG_KEYS

__all__ = [
    "GROUP",
    "OP_ARGS",
    "TOOL_OPS",
    "WATCHDOG",
    "WATCHDOG_OPS",
    "WATCHDOG_TOOLS",
    "WatchdogTool",
    "check_call",
    "check_op",
    "is_watchdog_tool",
    "tool_call",
]

#: the command line's group: (its word, its help, its description)
GROUP: Final = (
    "watchdog",
    "the stuck-loop watchdog: status, settings, pause/resume, inspect, replay",
    "The stuck-loop watchdog (it alerts the parent; it never kills or steers).",
)

_AGENT = "Agent name or agent id"


def _json(answer: Any) -> str:
    """The view of an answer no command prints (a tool's): its JSON."""
    return msgspec.json.encode(answer).decode()


STATUS = entry(
    "watchdog_status",
    w.WatchdogStatusArgs,
    params={},
    cli="watchdog status",
    help="enabled/paused, alert mode, alerts sent, targets",
    view=render_status,
)
LIST_TARGETS = entry(
    "watchdog_list_targets",
    w.WatchdogListTargetsArgs,
    params={},
    help="",
    view=_json,
    tool=Tool(
        name="watchdog_list_targets",
        label="Watchdog targets",
        description=(
            "List every agent the watchdog observes: id, name, kind (task or watchdog), "
            "process status, tool-call count, created and last-active times."
        ),
        prompt_snippet="List the agents the watchdog observes",
    ),
)
READ_EVENTS = entry(
    "watchdog_read_events",
    w.WatchdogReadEventsArgs,
    params={"agent": _AGENT, "limit": "How many of the newest events (default 50)"},
    help="",
    view=_json,
    tool=Tool(
        name="watchdog_read_events",
        label="Watchdog events",
        description=(
            "Read an agent's most recent tool events as the watchdog keeps them: normalised "
            "command, output hash and a short preview (never whole outputs), exit code, time."
        ),
        prompt_snippet="Read an agent's recent normalised tool events",
    ),
)
DETECT_STUCK = entry(
    "watchdog_detect_stuck",
    w.WatchdogDetectStuckArgs,
    params={"agent": _AGENT},
    help="",
    view=_json,
    tool=Tool(
        name="watchdog_detect_stuck",
        label="Watchdog detect",
        description=(
            "Run the deterministic stuck-loop rules on an agent's events since its last "
            "instruction: likely_stuck, confidence (none/low/medium/high), reasons and evidence "
            "(the commands, output hashes and counts). Changes nothing."
        ),
        prompt_snippet="Check whether an agent looks stuck in a loop (with evidence)",
    ),
)
ALERT_MAIN = entry(
    "watchdog_alert_main",
    w.WatchdogAlertMainArgs,
    params={"agent": _AGENT},
    help="",
    view=_json,
    tool=Tool(
        name="watchdog_alert_main",
        label="Watchdog alert",
        description=(
            "Send the parent a [Watchdog Alert] about an agent: its task, the detector's reasons "
            "and evidence, and the suggested rescue message. Nothing is killed or steered."
        ),
        prompt_snippet="Alert the parent that an agent looks stuck",
    ),
)
STEER_SUBAGENT = entry(
    "watchdog_steer_subagent",
    w.WatchdogSteerSubagentArgs,
    params={
        "agent": _AGENT,
        "message": "The message to send (default: the configured rescue message)",
        "dry_run": "Only show what would be sent (default true)",
    },
    help="",
    view=_json,
    tool=Tool(
        name="watchdog_steer_subagent",
        label="Watchdog steer",
        description=(
            "Steer an agent with a rescue message (default: the configured one). Dry-run by "
            "default: it only shows what would be sent; set dry_run to false to send it as an "
            "ordinary steer message that interrupts the agent's turn."
        ),
        prompt_snippet="Preview (or, with dry_run false, send) a rescue message to an agent",
    ),
)
CONFIG = entry(
    "watchdog_config",
    w.WatchdogConfigArgs,
    params={
        "key": "The setting to change, e.g. cooldown_s or monologue.threshold (give value too)",
        "value": "Its new value, as text (give key too)",
    },
    cli="watchdog config",
    help="every watchdog setting in effect, every rule's threshold",
    view=render_config,
    tool=Tool(
        name="watchdog_config",
        label="Watchdog config",
        description=(
            "Without arguments: every watchdog setting in effect, with each rule's threshold as "
            "RULE.threshold (null: the rule uses repeat_threshold, or typecheck_repeat_threshold "
            "for repeated_typecheck_error). With key and value: change one setting for this "
            "session only (settings files are not written), e.g. key cooldown_s, value 120, or "
            "key monologue.threshold, value 5; key rescue_message_override sets the session's "
            "rescue message."
        ),
        prompt_snippet="Show the watchdog settings, or change one for this session",
    ),
)
SET = entry(
    "watchdog_set",
    w.WatchdogSetArgs,
    params={
        "key": Param(description="The setting to change", cli="key", metavar="KEY"),
        "value": Param(
            description="Its new value, as text", cli="value", metavar="VALUE", words=True
        ),
    },
    cli="watchdog set",
    help="change one setting for this session only (settings files are not written)",
    description=(
        f"Keys: {', '.join(CONFIG_KEYS)}, and rescue_message_override (the session's rescue "
        "message; an empty value clears it). RULE.threshold is one rule's count (1-1,000,000). "
        "The words of VALUE are joined by spaces."
    ),
    view=_json,
    view_of_call=lambda answer, call_args: render_set(str(call_args.get("key")), answer),
)
PAUSE = entry(
    "watchdog_pause",
    w.WatchdogPauseArgs,
    params={},
    cli="watchdog pause",
    help="suppress alerts in this session (detection goes on)",
    view=lambda _: "watchdog paused: no alerts until `shepherd watchdog resume`",
)
RESUME = entry(
    "watchdog_resume",
    w.WatchdogResumeArgs,
    params={},
    cli="watchdog resume",
    help="alert again after a pause",
    view=lambda _: "watchdog resumed: alerts are on again",
)
INSPECT = entry(
    "watchdog_inspect",
    w.WatchdogInspectArgs,
    params={
        "agent": Param(description=_AGENT, cli="agent", metavar="AGENT", help="agent name or id"),
        "limit": Param(
            description="Only the newest N events (default: the whole window)",
            cli="--limit",
            metavar="N",
            help="only the newest N events",
        ),
    },
    cli="watchdog inspect",
    help="an agent's recent events and the detector's verdict",
    view=render_inspect,
)

#: the watchdog's entries, in the order the command line lists its commands and the tools
#: list its tools
WATCHDOG: Final[tuple[Op[Any], ...]] = (
    STATUS,
    LIST_TARGETS,
    READ_EVENTS,
    DETECT_STUCK,
    ALERT_MAIN,
    STEER_SUBAGENT,
    CONFIG,
    SET,
    PAUSE,
    RESUME,
    INSPECT,
)

# ----------------------------------------------------------------------------- older spellings

#: the watchdog actor's operations (``Session.watchdog(op, **args)``)
WATCHDOG_OPS: Final[tuple[str, ...]] = get_args(w.WatchdogOp)
#: the actor's operation -> the Args Struct of the entry that runs it (``config`` is the
#: entry of ``watchdog_config``: with a key and a value it runs ``set``)
OP_ARGS: Final[Mapping[str, type[w.WatchdogArgs]]] = {
    args.op: args for args in (op.args for op in WATCHDOG) if issubclass(args, w.WatchdogArgs)
}
assert set(OP_ARGS) == set(WATCHDOG_OPS), sorted(OP_ARGS)


class WatchdogTool(msgspec.Struct, frozen=True, kw_only=True):
    """One watchdog tool, as its entry says it: its name, the watchdog operation it runs, its
    Args Struct, its text and its fields' descriptions (in field order)."""

    name: str
    op: str
    args_type: type[msgspec.Struct]
    label: str
    description: str
    prompt_snippet: str
    fields: dict[str, str]


WATCHDOG_TOOLS: Final[Mapping[str, WatchdogTool]] = {
    op.name: WatchdogTool(
        name=op.name,
        op=op.args.op,  # type: ignore[attr-defined]
        args_type=op.args,
        label=op.tool.label or op.name,
        description=op.tool.description,
        prompt_snippet=op.tool.prompt_snippet,
        fields={name: param.description for name, param in op.params.items()},
    )
    for op in WATCHDOG
    if op.tool is not None
}
#: tool name -> the watchdog operation it runs
TOOL_OPS: Final[Mapping[str, str]] = {name: t.op for name, t in WATCHDOG_TOOLS.items()}

_BY_NAME: Final[Mapping[str, Op[Any]]] = {op.name: op for op in WATCHDOG}


class _Call(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The older envelope: ``Supervisor.call("watchdog", {"op": ..., "args": {...}})``."""

    op: w.WatchdogOp
    args: dict[str, Any] = {}


def _checked(op: Op[Any], fields: Mapping[str, object]) -> tuple[str, dict[str, Any]]:
    args = op.build(fields)
    assert isinstance(args, w.WatchdogArgs)
    return w.watchdog_call(args)


def envelope_args(call: Mapping[str, object]) -> w.WatchdogArgs:
    """The older envelope ``{"op": ..., "args": {...}}`` as its entry's checked arguments."""
    if not all(isinstance(k, str) for k in call):
        raise InvalidArgument("watchdog: argument names must be strings")
    try:
        parsed = msgspec.convert(dict(call), _Call)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"watchdog: {exc}") from None
    args_type = OP_ARGS[parsed.op]
    op = next(o for o in WATCHDOG if o.args is args_type)
    built = op.build(parsed.args)
    assert isinstance(built, w.WatchdogArgs)
    return built


def check_call(call: Mapping[str, object]) -> tuple[str, dict[str, Any]]:
    """Validate ``{"op": ..., "args": {...}}``; returns ``(op, args)`` for ``Session.watchdog``."""
    return w.watchdog_call(envelope_args(call))


def check_op(op: str, args: Mapping[str, object] | None = None) -> tuple[str, dict[str, Any]]:
    """Validate one watchdog operation; returns ``(op, args)`` for ``Session.watchdog``."""
    return check_call({"op": op, "args": dict(args or {})})


def is_watchdog_tool(name: str) -> bool:
    return name in WATCHDOG_TOOLS


def tool_call(name: str, fields: Mapping[str, object] | None = None) -> tuple[str, dict[str, Any]]:
    """Validate a watchdog tool call; returns ``(op, args)`` for ``Session.watchdog``."""
    if name not in WATCHDOG_TOOLS:
        raise InvalidArgument(f"unknown watchdog tool {name!r}")
    return _checked(_BY_NAME[name], fields or {})
