"""The watchdog's operations and model-facing tools: one Args Struct each.

Two surfaces reach the session's watchdog (``Session.watchdog(op, **args)``):

* **operations** (``shepherd watchdog ...``, ``Supervisor.call("watchdog", {"op", "args"})``):
  ``status``, ``config``, ``set``, ``pause``, ``resume``, ``list_targets``, ``read_events``,
  ``inspect``, ``detect``, ``alert_main``, ``steer`` — :data:`OP_ARGS` gives each its Args
  Struct and :func:`check_op` validates a call before it reaches the actor;
* **tools** for a model (the watchdog agent or the parent): :data:`WATCHDOG_TOOLS`, one
  :class:`WatchdogTool` per tool — its name, the operation it runs, its Args Struct, and the
  text the tool-schema generator (``protocol/ops/tools.py``) needs. :func:`tool_call` turns a tool
  call into ``(op, args)`` for ``Session.watchdog``.

Rules
-----
* Every Args Struct forbids unknown fields; a bad call is ``invalid_argument`` naming the
  tool (or operation) and the field, never a crash inside the actor.
* ``watchdog_steer_subagent`` is dry-run unless ``dry_run`` is explicitly false: nothing
  else (a missing field, ``null``) sends a steer.
* ``watchdog_config`` with neither ``key`` nor ``value`` returns every setting; with both it
  sets one for this session only (settings files are never written); one without the other
  is refused.
* Optional fields left at ``None`` are not passed on, so the actor applies its own default
  (the effective rescue message, the whole event window).

Sans-IO: no files, clocks or threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar, get_args

import msgspec

from protocol.core.errors import InvalidArgument

__all__ = [
    "OP_ARGS",
    "TOOL_OPS",
    "WATCHDOG_OPS",
    "WATCHDOG_TOOLS",
    "WatchdogAgentArgs",
    "WatchdogAlertMainArgs",
    "WatchdogCallArgs",
    "WatchdogConfigArgs",
    "WatchdogDetectStuckArgs",
    "WatchdogInspectArgs",
    "WatchdogListTargetsArgs",
    "WatchdogNoArgs",
    "WatchdogOp",
    "WatchdogReadEventsArgs",
    "WatchdogSetArgs",
    "WatchdogSteerSubagentArgs",
    "WatchdogTool",
    "check_call",
    "check_op",
    "is_watchdog_tool",
    "tool_call",
]

WatchdogOp = Literal[
    "status",
    "config",
    "set",
    "pause",
    "resume",
    "list_targets",
    "read_events",
    "inspect",
    "detect",
    "alert_main",
    "steer",
]
WATCHDOG_OPS: Final[tuple[str, ...]] = get_args(WatchdogOp)

AgentHandle = Annotated[str, msgspec.Meta(min_length=1)]
Limit = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]  # bounded like every count


class _Args(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# ----------------------------------------------------------------------------- tool arguments


class WatchdogListTargetsArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_list_targets``: no arguments."""


class WatchdogReadEventsArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_read_events``: an agent's most recent normalised tool events."""

    agent: AgentHandle
    limit: Limit = 50


class WatchdogDetectStuckArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_detect_stuck``: run the detector on an agent's current episode."""

    agent: AgentHandle


class WatchdogAlertMainArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_alert_main``: send the ``[Watchdog Alert]`` for an agent to the parent."""

    agent: AgentHandle


class WatchdogSteerSubagentArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_steer_subagent``: steer an agent with a rescue message (dry-run by default)."""

    agent: AgentHandle
    message: str | None = None
    dry_run: bool = True


class WatchdogConfigArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_config``: every setting (no arguments), or set one (``key`` and ``value``)."""

    key: str | None = None
    value: str | None = None


# ----------------------------------------------------------------------------- operation arguments


class WatchdogNoArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``status``, ``config``, ``pause``, ``resume``, ``list_targets``."""


class WatchdogSetArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``set KEY VALUE``: the value as text, parsed into the setting's type by the watchdog."""

    key: Annotated[str, msgspec.Meta(min_length=1)]
    value: str


class WatchdogAgentArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``detect``, ``alert_main``."""

    agent: AgentHandle


class WatchdogInspectArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``inspect AGENT``: events (the newest ``limit``; default the whole window) and verdict."""

    agent: AgentHandle
    limit: Limit | None = None


class WatchdogCallArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The envelope of ``Supervisor.call("watchdog", {"op": ..., "args": {...}})``."""

    op: WatchdogOp
    args: dict[str, Any] = {}


OP_ARGS: Final[Mapping[str, type[_Args]]] = {
    "status": WatchdogNoArgs,
    "config": WatchdogNoArgs,
    "set": WatchdogSetArgs,
    "pause": WatchdogNoArgs,
    "resume": WatchdogNoArgs,
    "list_targets": WatchdogNoArgs,
    "read_events": WatchdogReadEventsArgs,
    "inspect": WatchdogInspectArgs,
    "detect": WatchdogAgentArgs,
    "alert_main": WatchdogAgentArgs,
    "steer": WatchdogSteerSubagentArgs,
}
assert set(OP_ARGS) == set(WATCHDOG_OPS)

A = TypeVar("A", bound=msgspec.Struct)


def _build(cls: type[A], what: str, fields: Mapping[str, object]) -> A:
    if not all(isinstance(k, str) for k in fields):
        raise InvalidArgument(f"{what}: argument names must be strings")
    try:
        return msgspec.convert(dict(fields), cls)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{what}: {exc}") from None


def _plain(args: msgspec.Struct) -> dict[str, object]:
    """The fields as builtins, leaving out ``None`` (so the actor applies its default)."""
    return {
        name: value for name in args.__struct_fields__ if (value := getattr(args, name)) is not None
    }


def check_call(call: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    """Validate ``{"op": ..., "args": {...}}``; returns ``(op, args)`` for ``Session.watchdog``."""
    parsed = _build(WatchdogCallArgs, "watchdog", call)
    checked = _build(OP_ARGS[parsed.op], f"watchdog {parsed.op}", parsed.args)
    return parsed.op, _plain(checked)


def check_op(op: str, args: Mapping[str, object] | None = None) -> tuple[str, dict[str, object]]:
    """Validate one watchdog operation; returns ``(op, args)`` for ``Session.watchdog``."""
    return check_call({"op": op, "args": dict(args or {})})


# ----------------------------------------------------------------------------- tools


class WatchdogTool(msgspec.Struct, frozen=True, kw_only=True):
    """What the tool-schema generator needs for one watchdog tool."""

    name: str
    #: the watchdog operation it runs (``watchdog_config`` runs ``set`` when given a key)
    op: str
    args_type: type[msgspec.Struct]
    label: str
    description: str
    prompt_snippet: str
    #: one description per Args field, in field order
    fields: dict[str, str]


_AGENT = "Agent name or agent id"

_TOOL_LIST: Final[tuple[WatchdogTool, ...]] = (
    WatchdogTool(
        name="watchdog_list_targets",
        op="list_targets",
        args_type=WatchdogListTargetsArgs,
        label="Watchdog targets",
        description=(
            "List every agent the watchdog observes: id, name, kind (task or watchdog), "
            "process status, tool-call count, created and last-active times."
        ),
        prompt_snippet="List the agents the watchdog observes",
        fields={},
    ),
    WatchdogTool(
        name="watchdog_read_events",
        op="read_events",
        args_type=WatchdogReadEventsArgs,
        label="Watchdog events",
        description=(
            "Read an agent's most recent tool events as the watchdog keeps them: normalised "
            "command, output hash and a short preview (never whole outputs), exit code, time."
        ),
        prompt_snippet="Read an agent's recent normalised tool events",
        fields={"agent": _AGENT, "limit": "How many of the newest events (default 50)"},
    ),
    WatchdogTool(
        name="watchdog_detect_stuck",
        op="detect",
        args_type=WatchdogDetectStuckArgs,
        label="Watchdog detect",
        description=(
            "Run the deterministic stuck-loop rules on an agent's events since its last "
            "instruction: likely_stuck, confidence (none/low/medium/high), reasons and evidence "
            "(the commands, output hashes and counts). Changes nothing."
        ),
        prompt_snippet="Check whether an agent looks stuck in a loop (with evidence)",
        fields={"agent": _AGENT},
    ),
    WatchdogTool(
        name="watchdog_alert_main",
        op="alert_main",
        args_type=WatchdogAlertMainArgs,
        label="Watchdog alert",
        description=(
            "Send the parent a [Watchdog Alert] about an agent: its task, the detector's reasons "
            "and evidence, and the suggested rescue message. Nothing is killed or steered."
        ),
        prompt_snippet="Alert the parent that an agent looks stuck",
        fields={"agent": _AGENT},
    ),
    WatchdogTool(
        name="watchdog_steer_subagent",
        op="steer",
        args_type=WatchdogSteerSubagentArgs,
        label="Watchdog steer",
        description=(
            "Steer an agent with a rescue message (default: the configured one). Dry-run by "
            "default: it only shows what would be sent; set dry_run to false to send it as an "
            "ordinary steer message that interrupts the agent's turn."
        ),
        prompt_snippet="Preview (or, with dry_run false, send) a rescue message to an agent",
        fields={
            "agent": _AGENT,
            "message": "The message to send (default: the configured rescue message)",
            "dry_run": "Only show what would be sent (default true)",
        },
    ),
    WatchdogTool(
        name="watchdog_config",
        op="config",
        args_type=WatchdogConfigArgs,
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
        fields={
            "key": "The setting to change, e.g. cooldown_s or monologue.threshold (give value too)",
            "value": "Its new value, as text (give key too)",
        },
    ),
)

WATCHDOG_TOOLS: Final[Mapping[str, WatchdogTool]] = {t.name: t for t in _TOOL_LIST}
TOOL_OPS: Final[Mapping[str, str]] = {t.name: t.op for t in _TOOL_LIST}

for _tool in _TOOL_LIST:
    _names = list(_tool.args_type.__struct_fields__)
    assert list(_tool.fields) == _names, f"{_tool.name}: field descriptions {_names}"
del _tool, _names


def is_watchdog_tool(name: str) -> bool:
    return name in WATCHDOG_TOOLS


def tool_call(
    name: str, fields: Mapping[str, object] | None = None
) -> tuple[str, dict[str, object]]:
    """Validate a watchdog tool call; returns ``(op, args)`` for ``Session.watchdog``."""
    tool = WATCHDOG_TOOLS.get(name)
    if tool is None:
        raise InvalidArgument(f"unknown watchdog tool {name!r}")
    args = _build(tool.args_type, name, fields or {})
    if isinstance(args, WatchdogConfigArgs):
        if args.key is None and args.value is None:
            return "config", {}
        if args.key is None or args.value is None:
            raise InvalidArgument(
                f"{name}: give both key and value to set a setting, or neither to read them all"
            )
        return "set", {"key": args.key, "value": args.value}
    return tool.op, _plain(args)
