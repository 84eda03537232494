"""The watchdog's operations' Structs: one arguments Struct per operation.

Each is a :class:`WatchdogArgs` (an :class:`~protocol.calls.api.Arguments` whose answer is the
JSON-able dict or list the session's watchdog returns) that names the watchdog actor's own
operation (``op``: ``status``, ``set``, ``inspect`` ...). What the surfaces say about each one
(its command line, help, tool text, view) is its entry of the operation table,
:mod:`protocol.ops.watchdog`; :func:`watchdog_call` turns checked arguments into the actor's
``(op, args)``.

Rules:

* Every Struct forbids unknown fields; a bad call is ``invalid_argument`` naming the operation
  and the field, never a crash inside the actor.
* ``watchdog_steer_subagent`` is dry-run unless ``dry_run`` is explicitly false: nothing else
  (a missing field, ``null``) sends a steer.
* ``watchdog_config`` with neither ``key`` nor ``value`` returns every setting; with both it sets
  one for this session only (settings files are never written); one without the other is
  refused.
* Optional fields left at ``None`` are not passed on, so the actor applies its own default (the
  effective rescue message, the whole event window).

Sans-IO: no files, clocks or threads.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from protocol.calls.api import Arguments
from protocol.core.errors import InvalidArgument

__all__ = [
    "WatchdogAlertMainArgs",
    "WatchdogArgs",
    "WatchdogConfigArgs",
    "WatchdogDetectStuckArgs",
    "WatchdogInspectArgs",
    "WatchdogListTargetsArgs",
    "WatchdogOp",
    "WatchdogPauseArgs",
    "WatchdogReadEventsArgs",
    "WatchdogResumeArgs",
    "WatchdogSetArgs",
    "WatchdogStatusArgs",
    "WatchdogSteerSubagentArgs",
    "watchdog_call",
]

#: the watchdog actor's own operations (``Session.watchdog(op, **args)``)
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

AgentHandle = Annotated[str, msgspec.Meta(min_length=1)]
Limit = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]  # bounded like every count


class WatchdogArgs(Arguments[Any], frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A watchdog operation's arguments; ``op`` is the watchdog actor's operation it runs."""

    op: ClassVar[str]


class WatchdogStatusArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog status``: no arguments."""

    op = "status"


class WatchdogConfigArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_config``: every setting (no arguments), or set one (``key`` and ``value``)."""

    op = "config"
    key: str | None = None
    value: str | None = None


class WatchdogSetArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog set KEY VALUE``: the value as text, parsed into the setting's type by the
    watchdog."""

    op = "set"
    key: Annotated[str, msgspec.Meta(min_length=1)]
    value: str


class WatchdogPauseArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog pause``: no arguments."""

    op = "pause"


class WatchdogResumeArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog resume``: no arguments."""

    op = "resume"


class WatchdogListTargetsArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_list_targets``: no arguments."""

    op = "list_targets"


class WatchdogReadEventsArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_read_events``: an agent's most recent normalised tool events."""

    op = "read_events"
    agent: AgentHandle
    limit: Limit = 50


class WatchdogInspectArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog inspect AGENT``: events (the newest ``limit``; default the whole window) and
    the detector's verdict."""

    op = "inspect"
    agent: AgentHandle
    limit: Limit | None = None


class WatchdogDetectStuckArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_detect_stuck``: run the detector on an agent's current episode."""

    op = "detect"
    agent: AgentHandle


class WatchdogAlertMainArgs(WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``watchdog_alert_main``: send the ``[Watchdog Alert]`` for an agent to the parent."""

    op = "alert_main"
    agent: AgentHandle


class WatchdogSteerSubagentArgs(
    WatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``watchdog_steer_subagent``: steer an agent with a rescue message (dry-run by default)."""

    op = "steer"
    agent: AgentHandle
    message: str | None = None
    dry_run: bool = True


def watchdog_call(args: WatchdogArgs) -> tuple[str, dict[str, Any]]:
    """Checked arguments as the watchdog actor's ``(op, args)``: the fields left at ``None``
    left out (the actor applies its own default); ``watchdog_config`` given a key and a value
    is ``set``."""
    plain = {
        name: value for name in args.__struct_fields__ if (value := getattr(args, name)) is not None
    }
    if isinstance(args, WatchdogConfigArgs):
        if not plain:
            return "config", {}
        if len(plain) == 1:
            raise InvalidArgument(
                "watchdog_config: give both key and value to set a setting, or neither to read "
                "them all"
            )
        return "set", plain
    return args.op, plain
