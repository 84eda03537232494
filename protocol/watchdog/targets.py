"""Watchdog targets: every agent of the session as the watchdog sees it.

Rules
-----
* kind: ``watchdog`` when the agent was spawned with role ``watchdog``, or its name or
  description mentions "watchdog" (any case), else ``task`` when there is a name or
  description at all, else ``unknown``. A role, once known, is kept.
* Lifecycle events update status and ``last_active_at`` (never backwards) and count tool
  calls; an event for an unknown agent creates a minimal target; an event with no agent id
  changes nothing.
* Reconciling with a fresh snapshot (``status``) adds new agents, takes the snapshot's status
  and counts for known ones, keeps the later ``last_active_at``, and keeps agents the snapshot
  no longer lists (they exited; their history is still inspectable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

__all__ = [
    "TargetKind",
    "WatchdogTarget",
    "apply_target_event",
    "classify_kind",
    "make_target",
    "reconcile_targets",
]

TargetKind = Literal["task", "watchdog", "unknown"]


class WatchdogTarget(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str = ""
    description: str = ""
    kind: TargetKind = "unknown"
    status: str = "unknown"
    tool_call_count: int = 0
    created_at: float = 0.0
    last_active_at: float = 0.0


def classify_kind(
    name: str | None, description: str | None = None, role: str | None = None
) -> TargetKind:
    text = f"{name or ''} {description or ''}"
    if role == "watchdog" or "watchdog" in text.casefold():
        return "watchdog"
    return "task" if text.strip() else "unknown"


def make_target(
    agent_id: str,
    *,
    name: str = "",
    description: str = "",
    status: str = "unknown",
    created_at: float = 0.0,
    last_active_at: float | None = None,
    tool_call_count: int = 0,
) -> WatchdogTarget:
    """A target from an agent record; ``last_active_at`` defaults to ``created_at``."""
    return WatchdogTarget(
        id=agent_id,
        name=name,
        description=description,
        kind=classify_kind(name, description),
        status=status,
        tool_call_count=tool_call_count,
        created_at=created_at,
        last_active_at=created_at if last_active_at is None else last_active_at,
    )


def apply_target_event(
    targets: Mapping[str, WatchdogTarget],
    agent_id: str | None,
    now: float,
    *,
    status: str | None = None,
    tool_calls: int = 0,
    name: str | None = None,
    description: str | None = None,
    role: str | None = None,
) -> dict[str, WatchdogTarget]:
    """The targets after one lifecycle or tool event of ``agent_id`` at ``now``."""
    result = dict(targets)
    if not agent_id:
        return result
    current = result.get(agent_id) or make_target(
        agent_id, name=name or "", description=description or "", created_at=now
    )
    new_name = name if name is not None else current.name
    new_description = description if description is not None else current.description
    result[agent_id] = msgspec.structs.replace(
        current,
        name=new_name,
        description=new_description,
        kind="watchdog"
        if current.kind == "watchdog" and role is None
        else classify_kind(new_name, new_description, role),
        status=status if status is not None else current.status,
        tool_call_count=current.tool_call_count + max(tool_calls, 0),
        last_active_at=max(current.last_active_at, now),
    )
    return result


def reconcile_targets(
    targets: Mapping[str, WatchdogTarget], snapshot: Iterable[WatchdogTarget]
) -> dict[str, WatchdogTarget]:
    """Merge a fresh snapshot of the session's agents into the known targets."""
    result = dict(targets)
    for fresh in snapshot:
        known = result.get(fresh.id)
        if known is None:
            result[fresh.id] = fresh
            continue
        result[fresh.id] = msgspec.structs.replace(
            fresh,
            created_at=min(known.created_at, fresh.created_at),
            last_active_at=max(known.last_active_at, fresh.last_active_at),
            tool_call_count=max(known.tool_call_count, fresh.tool_call_count),
        )
    return result
