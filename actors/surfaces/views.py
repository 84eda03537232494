"""Live views of a session: the status table of ``shepherd top`` (the text views of every
answer, ``shepherd status`` included, are :mod:`protocol.calls.views`)."""

from __future__ import annotations

from typing import Any

from protocol.calls.views import degraded, status_line, summary_line, usage_text

__all__ = ["status_table"]


def status_table(data: dict[str, Any]) -> Any:
    """A rich Table of the status snapshot (for ``shepherd top``)."""
    from rich.table import Table

    title = f"session {data['session_id']}{degraded(data)} — {summary_line(data)}"
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
        detail = detail if detail != state else ""
        # what the task spent of its budget, else what the agent spent (in the wrapping column)
        used = usage_text(task.get("usage"), task.get("budget")) or usage_text(agent.get("usage"))
        detail = "; ".join(x for x in (detail, f"used {used}" if used else "") if x)
        style = {"waiting": "yellow", "completed": "green", "failed": "red", "blocked": "red"}
        table.add_row(
            symbol,
            age,
            agent["name"],
            agent["process_state"] + (" [closed]" if agent.get("closed") else "") + degraded(agent),
            f"[{style.get(state, 'default')}]{state}[/]",
            detail,
            task.get("task_id", ""),
        )
    return table


def _more(data: dict[str, Any]) -> int:
    total = int((data.get("summary") or {}).get("agents", 0))
    return max(0, total - int(data.get("cursor", 0)) - len(data.get("agents", [])))
