"""Human views of answers: what ``shepherd COMMAND`` prints without ``--json``.

Each works on an answer's JSON-able form (the CLI gets data over the mailbox), so the CLI and a
live view (``shepherd top``) share them; each operation names its view in :mod:`protocol.ops`.

Process state and task state are shown side by side and never merged: an idle agent whose
task waits on a peer reads ``○ 02:14 scout   idle / waiting for planner``, never as done.

Sans-IO: pure functions of data.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "closed",
    "degraded",
    "delegated",
    "delegated_many",
    "messaged",
    "prompted",
    "read_lines",
    "receipt",
    "render_status",
    "settled",
    "shut_down",
    "spawned",
    "spawned_many",
    "status_line",
    "summary_line",
    "usage_text",
    "waited",
    "watched",
]

_SYMBOL = {"working": "●", "idle": "○", "starting": "◌", "exited": "✕"}


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    minutes, sec = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}" if hours else f"{minutes:02d}:{sec:02d}"


def degraded(item: dict[str, Any]) -> str:
    """A note when deliveries wait for the fallback rescan (the normal wake-up is not shown)."""
    return " (mailbox polling)" if item.get("mailbox_wake") == "polling" else ""


def status_line(agent: dict[str, Any], names: dict[str, str], now: float) -> str:
    process = agent["process_state"]
    symbol = _SYMBOL.get(process, "?")
    task = agent.get("task")
    if task is None:
        age = _clock(now - agent["last_active_at"]) if agent.get("last_active_at") else "--:--"
        return f"{symbol} {age} {agent['name']:<8} {process} / no task{degraded(agent)}" + (
            _branch(agent)
        )
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
        elif state == "queued" and task.get("queue_place"):
            detail += f" (place {task['queue_place']})"
        elif state == "verifying" and task.get("check"):
            detail += f" (check attempt {task.get('attempt')} of {task['check']['attempts']})"
        elif task.get("turns_without_done"):
            code = task.get("last_turn_exit_code")
            status = f", status {code}" if code is not None else ""
            ago = _clock(now - (task.get("last_turn_ended_at") or now))
            detail += f" (turn ended without done {ago} ago{status})"
    closed = " [closed]" if agent.get("closed") else ""
    return (
        f"{symbol} {age} {agent['name']:<8} {process} / {detail}  {task['task_id']}{closed}"
        f"{degraded(agent)}{_used(agent, task)}{_branch(agent)}"
    )


# --- budgets


def usage_text(usage: dict[str, Any] | None, budget: dict[str, Any] | None = None) -> str:
    """``2 turns, 300/1000 tokens, $0.0120`` (a limit after the slash); "" for nothing."""
    usage, budget = usage or {}, budget or {}
    parts = []
    for field, limit, unit in (
        ("turns", "max_turns", "turns"),
        ("tokens", "max_tokens", "tokens"),
        ("cost", "max_cost", ""),
    ):
        value, bound = usage.get(field) or 0, budget.get(limit)
        if not value and bound is None:
            continue
        shown = f"${value:.4f}" if field == "cost" else f"{value}"
        if bound is not None:
            shown += f"/${bound:g}" if field == "cost" else f"/{bound}"
        one = field == "turns" and value == 1 and bound is None
        parts.append(f"{shown} {'turn' if one else unit}".rstrip())
    if budget.get("max_minutes") is not None:
        parts.append(f"max {budget['max_minutes']:g} min")
    return ", ".join(parts)


def _used(agent: dict[str, Any], task: dict[str, Any]) -> str:
    """The task's usage (of its budget) and the agent's, when anything was counted."""
    mine = usage_text(task.get("usage"), task.get("budget"))
    theirs = usage_text(agent.get("usage"))
    if not mine and not theirs:
        return ""
    return f"  used: {mine or 'nothing'}" + (f" (agent: {theirs})" if theirs != mine else "")


def _sandbox(box: dict[str, Any] | None) -> str:
    """``  [sandbox: no net, 512 pids, /tmp 256 MiB, +2 rw, env HOME]``, or nothing."""
    if not box:
        return ""
    parts = ["net" if box.get("net") else "no net"]
    parts.append(f"{box.get('pids')} pids" if box.get("pids") else "no pid bound")
    parts.append(f"/tmp {box.get('tmp_mb')} MiB")
    if box.get("rw"):
        parts.append(f"+{len(box['rw'])} rw")
    if box.get("env"):
        parts.append("env " + " ".join(box["env"]))
    return f"  [sandbox: {', '.join(parts)}]"


def _branch(agent: dict[str, Any]) -> str:
    """A watchdog agent (``[watchdog]``); an agent on a node (``@HOST``); a sandboxed one
    (``[sandbox: ...]``); one in a git worktree: its branch and its changed files (as last
    counted)."""
    role = "  [watchdog]" if agent.get("role") == "watchdog" else ""
    node = f"{role}  @{agent['node']}" if agent.get("node") else role
    node += _sandbox(agent.get("sandbox"))
    if not agent.get("branch"):
        return node
    count = agent.get("changed_files")
    return f"{node}  [{agent['branch']}: {'?' if count is None else count} changed]"


def summary_line(data: dict[str, Any]) -> str:
    """The session's counts: ``12 agents: 3 working, 9 idle; tasks: 2 running, 1 waiting``."""
    summary = data.get("summary") or {}
    total = summary.get("agents", len(data.get("agents", [])))
    processes = ", ".join(
        f"{n} {state}" for state, n in sorted(summary.get("processes", {}).items())
    )
    tasks = ", ".join(f"{n} {state}" for state, n in sorted(summary.get("tasks", {}).items()))
    line = f"{total} agent{'s' if total != 1 else ''}" + (f": {processes}" if processes else "")
    line += f"; tasks: {tasks}" if tasks else ""
    budget = {"max_tokens": summary.get("budget_tokens"), "max_cost": summary.get("budget_cost")}
    spent = usage_text(summary.get("usage"), budget)
    return line + (f"; session used: {spent}" if spent else "") + _admission(summary)


def _admission(summary: dict[str, Any]) -> str:
    """``; 4 running of at most 4, 2 queued; cooling down: sim; paced: sim 4.5/s; ...``."""
    cap, queued = summary.get("max_running"), summary.get("queued", 0)
    parts = []
    if cap is not None or queued:
        of = f" of at most {cap}" if cap is not None else ""
        parts.append(f"{summary.get('running', 0)} running{of}, {queued} queued")
    if summary.get("cooldowns"):
        parts.append("cooling down: " + ", ".join(sorted(summary["cooldowns"])))
    if summary.get("paced"):
        paced = sorted(summary["paced"].items())
        parts.append("paced: " + ", ".join(f"{p} {rate:g}/s" for p, rate in paced))
    if summary.get("node_caps"):
        caps = sorted(summary["node_caps"].items())
        parts.append("node caps: " + ", ".join(f"{n} {cap}" for n, cap in caps))
    return "".join(f"; {part}" for part in parts)


def render_status(data: dict[str, Any]) -> str:
    agents = data.get("agents", [])
    parent = [f"parent{degraded(data)}"] if degraded(data) else []
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


# ----------------------------------------------------------------------------- one per operation


def spawned(data: dict[str, Any]) -> str:
    return f"{data['name']} {data['agent_id']} ({data['adapter']}, {data['process_state']})"


def delegated(data: dict[str, Any]) -> str:
    text = f"{data['task_id']} delegated to {data.get('agent_name') or data['agent_id']}"
    if data.get("budget"):
        text += f" (budget: {usage_text(None, data['budget'])})"
    if data.get("clamped"):
        text += f"; lowered to the session's remainder: {', '.join(data['clamped'])}"
    return text


def spawned_many(data: dict[str, Any]) -> str:
    ids = data["agent_ids"]
    why = {e["index"]: e for e in data.get("errors") or []}
    lines = [f"{sum(a is not None for a in ids)} of {len(ids)} agents started"]
    for index, agent_id in enumerate(ids):
        if agent_id is not None:
            lines.append(f"  {index}: {agent_id}")
        elif index in why:
            lines.append(f"  {index}: refused: {why[index]['code']}: {why[index]['message']}")
    return "\n".join(lines)


def delegated_many(data: dict[str, Any]) -> str:
    ids = data["task_ids"]
    errors = data.get("errors") or []
    lines = [f"{sum(t is not None for t in ids)} of {len(ids)} tasks delegated"]
    if data.get("watcher_id"):
        lines[0] += f", watched by {data['watcher_id']}"
    why = {e["index"]: e for e in errors}
    for index, task_id in enumerate(ids):
        if task_id is not None:
            lines.append(f"  {index}: {task_id}")
        elif index in why:
            lines.append(f"  {index}: refused: {why[index]['code']}: {why[index]['message']}")
    return "\n".join(lines)


def messaged(data: dict[str, Any]) -> str:
    extra = f" (request {data['request_id']})" if data.get("request_id") else ""
    return f"{data['message_id']} accepted{extra}"


def _result_line(r: dict[str, Any]) -> str:
    body = r.get("text") or r.get("error") or ""
    used = usage_text(r.get("usage"))
    return f"{r['task_id']} {r['status']} (rc {r['return_code']}) {body}" + (
        f" [used: {used}]" if used else ""
    )


def watched(data: dict[str, Any]) -> str:
    lines = [f"watcher {data['watcher_id']}: {len(data['pending'])} pending"]
    lines += [f"  {_result_line(r)}" for r in data["completed"]]
    return "\n".join(lines)


def read_lines(data: dict[str, Any]) -> str:
    return "\n".join(data["lines"])


def closed(data: dict[str, Any]) -> str:
    cancelled = data.get("cancelled_task_id")
    line = f"closed {data['agent_id']}" + (f"; cancelled {cancelled}" if cancelled else "")
    path = data.get("worktree_path")
    if path and data.get("worktree_removed"):
        line += f"; worktree {path} removed"
    elif path:
        line += f"; worktree kept at {path}: {data.get('worktree_kept_because') or 'not clean'}"
    return line


def worktrees(data: dict[str, Any]) -> str:
    rows = data.get("worktrees", [])
    if not rows:
        return "no worktrees"
    lines = []
    for w in rows:
        count = w.get("changed_files")
        changed = "" if count is None else f", {count} changed"
        closed = " [closed]" if w.get("closed") else ""
        error = f" ({w['error']})" if w.get("error") else ""
        lines.append(
            f"{w['agent']:<8} {w['state']}{changed}  {w['branch']}  {w['path']}{closed}{error}"
        )
    return "\n".join(lines)


def merge(data: dict[str, Any]) -> str:
    line = _merged(data)
    if not data.get("queue"):
        return line
    steps = []
    for step in data["queue"]:
        if step.get("merged"):
            said = f"merged as {str(step.get('commit'))[:12]}"
        elif step.get("conflicts_count"):
            said = f"conflicts ({', '.join(step.get('conflicts', ()))}): the queue stopped"
        else:
            said = "nothing to merge" if step.get("up_to_date") else "checked"
        steps.append(f"{step['agent']} {said}")
    return "queue: " + "; ".join(steps) + "\n" + line


def _merged(data: dict[str, Any]) -> str:
    head = f"{data['agent']}: {data['branch']} into {data['into']} ({data['strategy']})"
    if data.get("conflicts_count"):
        more = data["conflicts_count"] - len(data.get("conflicts", ()))
        paths = ", ".join(data.get("conflicts", ())) + (f" and {more} more" if more > 0 else "")
        return f"{head}: conflicts, nothing changed: {paths}"
    if data.get("up_to_date"):
        return f"{head}: nothing to merge"
    count = data.get("files_count", 0)
    if data.get("checked_only"):
        return f"{head}: merges cleanly ({count} file(s)); nothing changed"
    return f"{head}: merged as {str(data.get('commit'))[:12]} ({count} file(s) changed)"


def settled(command: str) -> Any:
    """The view of ``cancel`` or ``fail`` (named in the line when the call changed nothing)."""

    def view(data: dict[str, Any]) -> str:
        line = f"{data['task_id']} {data['status']} (rc {data['return_code']})"
        if data.get("already_settled"):
            line += f": it had already settled; the {command} changed nothing"
        return line

    return view


def prompted(data: dict[str, Any]) -> str:
    return f"{data['prompt_id']} (task {data['task_id']}) delegated to {data['agent_id']}"


def shut_down(data: dict[str, Any]) -> str:
    return "shutting down: every agent is closed, the records are kept"


def waited(data: dict[str, Any]) -> str:
    lines = [_result_line(r) for r in data["completed"]]
    lines += [f"{t} still pending" for t in data["pending"]]
    return "\n".join(lines)


def receipt(command: str) -> Any:
    """The view of a child's receipt for ``message`` or ``done``."""

    def view(data: dict[str, Any]) -> str:
        parts = [f"accepted {command} {data['message_id']}"]
        if "request_id" in data:
            parts.append(f"request {data['request_id']} (the answer arrives later as a message)")
        if "task_id" in data:
            parts.append(f"task {data['task_id']}")
        if "result" in data:
            result = data["result"]
            parts.append(f"{result.get('status')} (rc {result.get('return_code')})")
        return "; ".join(parts)

    return view
