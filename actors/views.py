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
        elif task.get("turns_without_done"):
            code = task.get("last_turn_exit_code")
            status = f", status {code}" if code is not None else ""
            ago = _clock(now - (task.get("last_turn_ended_at") or now))
            detail += f" (turn ended without done {ago} ago{status})"
    closed = " [closed]" if agent.get("closed") else ""
    return (
        f"{symbol} {age} {agent['name']:<8} {process} / {detail}  {task['task_id']}{closed}"
        f"{_degraded(agent)}"
    )


def summary_line(data: dict[str, Any]) -> str:
    """The session's counts: ``12 agents: 3 working, 9 idle; tasks: 2 running, 1 waiting``."""
    summary = data.get("summary") or {}
    total = summary.get("agents", len(data.get("agents", [])))
    processes = ", ".join(
        f"{n} {state}" for state, n in sorted(summary.get("processes", {}).items())
    )
    tasks = ", ".join(f"{n} {state}" for state, n in sorted(summary.get("tasks", {}).items()))
    line = f"{total} agent{'s' if total != 1 else ''}" + (f": {processes}" if processes else "")
    return line + (f"; tasks: {tasks}" if tasks else "")


def render_status(data: dict[str, Any]) -> str:
    agents = data.get("agents", [])
    parent = [f"parent{_degraded(data)}"] if _degraded(data) else []
    if not agents:
        text = "\n".join([*parent, f"session {data['session_id']}: no agents"])
    else:
        names = {"shepherd": "shepherd", **{a["agent_id"]: a["name"] for a in agents}}
        lines = [*parent, *(status_line(a, names, data["now"]) for a in agents)]
        if len(agents) > 1:
            lines.append(summary_line(data))
        text = "\n".join(lines)
    damaged = data.get("journal_problems") or 0
    if damaged:
        text += (
            f"\n! {damaged} damaged line(s) in the journal or notifications file when the "
            "session resumed (torn tails kept in *.torn-N files; the log names each line)"
        )
    return text


def status_table(data: dict[str, Any]) -> Any:
    """A rich Table of the status snapshot (for ``shepherd top``)."""
    from rich.table import Table

    title = f"session {data['session_id']}{_degraded(data)} — {summary_line(data)}"
    if data.get("journal_problems"):
        title += f"  ! {data['journal_problems']} damaged journal line(s) at resume"
    table = Table(
        title=title,
        caption=(
            f"… {_more(data)} more agents (`shepherd status` lists them all)"
            if data.get("next_cursor") is not None
            else None
        ),
        expand=True,
    )
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


def _more(data: dict[str, Any]) -> int:
    total = int((data.get("summary") or {}).get("agents", 0))
    return max(0, total - int(data.get("cursor", 0)) - len(data.get("agents", [])))
