"""A watchdog agent's operations (``spawn --role watchdog``): ``shepherd-child watchdog-status``,
``watchdog-events AGENT [--limit N]``, ``watchdog-stuck [AGENT]`` and ``watchdog-alert AGENT
TEXT``, entries of the child's table (:data:`protocol.ops.CHILD`, listed there after its own).

Each is one ``query`` envelope to the parent (:func:`query_fields` gives its fields), answered
in its receipt; the parent answers only an agent whose role is ``watchdog`` and checks the rest
(:mod:`protocol.session.watchdog_queries`). The bounds are the envelope's
(:mod:`protocol.core.limits`): ``--limit`` 1-200, the alert's text 1-4000 characters. The Pi
extension gives a watchdog agent the same four as tools (``watchdog_status``,
``watchdog_read_events``, ``watchdog_detect_stuck``, ``watchdog_alert_main``).

Sans-IO: data and pure functions.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from protocol.calls import api
from protocol.core.limits import Handle, WatchdogAlertText, WatchdogEventLimit
from protocol.ops.spec import Param, entry
from protocol.wire.envelopes import WatchdogQueryOp

__all__ = [
    "CHILD_WATCHDOG",
    "WATCHDOG_ALERT",
    "WATCHDOG_EVENTS",
    "WATCHDOG_STATUS",
    "WATCHDOG_STUCK",
    "ChildWatchdogAlertArgs",
    "ChildWatchdogArgs",
    "ChildWatchdogEventsArgs",
    "ChildWatchdogStatusArgs",
    "ChildWatchdogStuckArgs",
    "query_fields",
]

#: what the commands answer: the watchdog's answer (JSON-able)
Answer = Any


class ChildWatchdogArgs(
    api.Arguments[Answer], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """A watchdog agent's question; ``op`` is the query it sends."""

    op: ClassVar[WatchdogQueryOp]


class ChildWatchdogStatusArgs(
    ChildWatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child watchdog-status``: no arguments."""

    op = "status"


class ChildWatchdogEventsArgs(
    ChildWatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child watchdog-events AGENT [--limit N]``."""

    op = "events"
    agent: Handle
    limit: WatchdogEventLimit | None = None


class ChildWatchdogStuckArgs(
    ChildWatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child watchdog-stuck [AGENT]``."""

    op = "stuck"
    agent: Handle | None = None


class ChildWatchdogAlertArgs(
    ChildWatchdogArgs, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shepherd-child watchdog-alert AGENT TEXT``."""

    op = "alert"
    agent: Handle
    text: WatchdogAlertText


def query_fields(args: ChildWatchdogArgs) -> dict[str, Any]:
    """The ``query`` envelope's own fields for ``args`` (those given)."""
    fields = {name: getattr(args, name) for name in args.__struct_fields__}
    return {"op": args.op, **{k: v for k, v in fields.items() if v is not None}}


def _json(answer: Any) -> str:
    """The view of an answer: its JSON, indented (a model or a shell reads it)."""
    return json.dumps(answer, indent=1, sort_keys=True)


_AGENT = Param(
    description="The agent's name or id",
    cli="agent",
    metavar="AGENT",
    help="an agent's name or id",
)

WATCHDOG_STATUS = entry(
    "watchdog-status",
    ChildWatchdogStatusArgs,
    role="child",
    help="(watchdog agents) the watchdog's state and the agents it watches",
    view=_json,
    params={},
)

WATCHDOG_EVENTS = entry(
    "watchdog-events",
    ChildWatchdogEventsArgs,
    role="child",
    help="(watchdog agents) an agent's newest normalised tool events",
    view=_json,
    params={
        "agent": _AGENT,
        "limit": Param(
            description="How many of the newest events (1-200, default 20)",
            cli="--limit",
            metavar="N",
            help="how many of the newest events (1-200, default 20)",
        ),
    },
)

WATCHDOG_STUCK = entry(
    "watchdog-stuck",
    ChildWatchdogStuckArgs,
    role="child",
    help="(watchdog agents) the stuck-loop detector's verdict on one agent, or on every agent",
    view=_json,
    params={
        "agent": Param(
            description="The agent's name or id (default: every agent, the stuck ones listed)",
            cli="agent",
            metavar="AGENT",
            help="an agent's name or id (default: every agent)",
        ),
    },
)

WATCHDOG_ALERT = entry(
    "watchdog-alert",
    ChildWatchdogAlertArgs,
    role="child",
    help="(watchdog agents) alert the parent that an agent looks stuck, in your words",
    view=_json,
    params={
        "agent": _AGENT,
        "text": Param(
            description=(
                "The alert: who is stuck, on what, and what you suggest (1-4000 characters)"
            ),
            cli="text",
            metavar="TEXT",
            help="the alert (1-4000 characters)",
        ),
    },
)

#: a watchdog agent's entries, in the order the child's command line lists them
CHILD_WATCHDOG = (WATCHDOG_STATUS, WATCHDOG_EVENTS, WATCHDOG_STUCK, WATCHDOG_ALERT)
