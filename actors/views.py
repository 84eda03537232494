"""Human views of a session: the status table.

Process state and task state are shown side by side and never merged: an idle agent whose
task waits on a peer reads ``○ 02:14 scout   idle / waiting for planner``, never as done.
Works on the JSON-able form of :class:`protocol.api.StatusResult`, so the CLI (which gets
data over the mailbox) and a live view share it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["render_status", "status_line"]

_SYMBOL = {"working": "●", "idle": "○", "starting": "◌", "exited": "✕"}


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    minutes, sec = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}" if hours else f"{minutes:02d}:{sec:02d}"


def _degraded(item: dict[str, Any]) -> str:
    """A note when deliveries wait for the fallback rescan (the normal wake-up is not shown)."""
    return " (mailbox polling)" if item.get("mailbox_wake") == "polling" else ""


def status_line(agent: dict[str, Any], names: dict[str, str], now: float) -> str:
    process = agent["process_state"]
    symbol = _SYMBOL.get(process, "?")
    task = agent.get("task")
    if task is None:
        age = _clock(now - agent["last_active_at"]) if agent.get("last_active_at") else "--:--"
        return f"{symbol} {age} {agent['name']:<8} {process} / no task{_degraded(agent)}"
    state = task["state"]
    if state == "waiting":
        age = _clock(task.get("waiting_age_s") or 0.0)
        targets = [
            names.get(r["target_id"], r["target_id"]) for r in task.get("pending_requests", ())
        ]
        detail = f"waiting for {', '.join(targets) or '?'}"
        if task.get("stale"):
            detail += " (stale)"
    else:
        age = _clock(now - task["created_at"])
        detail = state
        result = task.get("result")
        if result is not None:
            detail += f" (rc {result['return_code']})"
    closed = " [closed]" if agent.get("closed") else ""
    return (
        f"{symbol} {age} {agent['name']:<8} {process} / {detail}  {task['task_id']}{closed}"
        f"{_degraded(agent)}"
    )


def render_status(data: dict[str, Any]) -> str:
    agents = data.get("agents", [])
    parent = [f"parent{_degraded(data)}"] if _degraded(data) else []
    if not agents:
        return "\n".join([*parent, f"session {data['session_id']}: no agents"])
    names = {"shepherd": "shepherd", **{a["agent_id"]: a["name"] for a in agents}}
    return "\n".join([*parent, *(status_line(a, names, data["now"]) for a in agents)])


def status_table(data: dict[str, Any]) -> Any:
    """A rich Table of the status snapshot (for ``shepherd top``)."""
    from rich.table import Table

    table = Table(title=f"session {data['session_id']}{_degraded(data)}", expand=True)
    for column in ("", "age", "agent", "process", "task", "detail", "task id"):
        table.add_column(column, no_wrap=column != "detail")
    agents = data.get("agents", [])
    names = {"shepherd": "shepherd", **{a["agent_id"]: a["name"] for a in agents}}
    for agent in agents:
        line = status_line({**agent, "mailbox_wake": None}, names, data["now"])  # own column
        symbol, age = line.split(" ", 2)[:2]
        task = agent.get("task") or {}
        state = task.get("state", "no task")
        detail = line.split(" / ", 1)[1].split("  ")[0] if " / " in line else ""
        style = {"waiting": "yellow", "completed": "green", "failed": "red", "blocked": "red"}
        table.add_row(
            symbol,
            age,
            agent["name"],
            agent["process_state"]
            + (" [closed]" if agent.get("closed") else "")
            + _degraded(agent),
            f"[{style.get(state, 'default')}]{state}[/]",
            detail if detail != state else "",
            task.get("task_id", ""),
        )
    return table
