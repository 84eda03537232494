"""The watchdog's text renderings: what ``shepherd watchdog ...`` prints without ``--json``.

Rules: pure functions from an answer (the JSON-able dict a watchdog operation returns) to text;
no I/O, no session, no clock, no parsing of the command line (they are the views of the
watchdog's entries of the operation table, :mod:`protocol.ops.watchdog`). A field that is
missing renders as a placeholder rather than failing, so a newer session's answer still
prints. The JSON printed under ``--json`` is the answer itself and never passes through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import watchdog as wd

__all__ = [
    "render_config",
    "render_inspect",
    "render_set",
    "render_status",
    "replay_table",
]


def _when(ts: Any) -> str:
    """A clock value: the time of day in UTC (``Z``) for real sessions, seconds for simulated
    ones (computed, not read from a clock: views are pure)."""
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not -1e18 < ts < 1e18:
        return "-"
    if ts > 1e9:
        minutes, seconds = divmod(int(ts) % 86_400, 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours:02d}:{minutes:02d}:{seconds:02d}Z"
    return f"{ts:.1f}s"


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _verdict_lines(verdict: Mapping[str, Any]) -> list[str]:
    stuck = "likely stuck" if verdict.get("likely_stuck") else "not stuck"
    lines = [f"verdict: {stuck} (confidence {verdict.get('confidence', 'none')})"]
    reasons = verdict.get("reasons") or []
    lines.append(f"reasons: {', '.join(reasons) or 'none'}")
    evidence = verdict.get("evidence") or []
    if evidence:
        lines.append("evidence:")
    for item in evidence:
        lines.append(
            f"  - {item.get('code')} x{item.get('count')} [{item.get('confidence')}]: "
            f"{item.get('detail', '')}"
        )
        lines.extend(f"      $ {command}" for command in item.get("commands") or [])
        hashes = [h[:12] for h in item.get("hashes") or [] if h]
        if hashes:
            lines.append(f"      output sha256: {', '.join(hashes)}")
    return lines


def render_status(data: Mapping[str, Any]) -> str:
    """``watchdog status``: on/paused/off, alert mode, alerts sent, a line per target."""
    if not data.get("enabled"):
        state = "off (enabled = false)"
    elif data.get("paused"):
        state = "paused (no alerts until `shepherd watchdog resume`)"
    else:
        state = "on"
    targets = data.get("targets") or []
    lines = [
        f"watchdog: {state}",
        f"alert mode: {data.get('alert_mode')}   alerts sent: {data.get('alerts', 0)}",
        f"rescue message: {_one_line(str(data.get('rescue_message', '')), 90)}",
        f"targets: {len(targets)}",
    ]
    for t in targets:
        lines.append(
            f"  {t.get('name') or '?':<12} {t.get('id', ''):<14} {t.get('kind', ''):<9} "
            f"{t.get('status', ''):<9} {t.get('tool_call_count', 0):>4} tool calls   "
            f"last active {_when(t.get('last_active_at'))}"
        )
    return "\n".join(lines)


_FALLBACKS = {f"{r.code}.threshold": r.fallback for r in wd.RULES}


def render_config(data: Mapping[str, Any]) -> str:
    """Every setting; a rule with no threshold of its own shows the one it uses."""
    width = max((len(k) for k in data), default=0)
    lines = []
    for key, value in data.items():
        shown = _value(value)
        fallback = _FALLBACKS.get(key)
        if value is None and fallback is not None:
            shown = f"{_value(data.get(fallback))} (from {fallback})"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(lines)


def render_set(key: str, data: Mapping[str, Any]) -> str:
    """``watchdog set``: the setting's new value (a rescue message is not echoed)."""
    if key == "rescue_message_override":
        return "rescue message override updated (this session only; settings files unchanged)"
    return f"{key} = {_value(data.get(key))} (this session only; settings files unchanged)"


def render_inspect(data: Mapping[str, Any]) -> str:
    """``watchdog inspect``: the agent, the detector's verdict, a line per window event."""
    events = data.get("events") or []
    lines = [
        f"{data.get('name')} ({data.get('agent_id')})   task: {data.get('task_id') or 'none'}",
        *_verdict_lines(data.get("verdict") or {}),
        f"events: {len(events)} shown, {data.get('dropped', 0)} dropped from the window",
    ]
    if events:
        lines.append(f"  {'seq':>4} {'ts':>9}  {'kind':<11} {'tool':<8} {'exit':>4}  what")
    for e in events:
        what = e.get("command") or e.get("preview") or ""
        if e.get("kind") in ("tool_result", "error") and e.get("output_hash"):
            what = f"{what}  -> {str(e['output_hash'])[:12]}"
        exit_code = e.get("exit_code")
        lines.append(
            f"  {e.get('seq', ''):>4} {_when(e.get('ts')):>9}  {e.get('kind', ''):<11} "
            f"{e.get('tool') or '-':<8} {'' if exit_code is None else exit_code:>4}  "
            f"{_one_line(str(what), 70)}"
        )
    return "\n".join(lines)


def replay_table(lines: list[bytes], results: list[dict[str, Any]]) -> str:
    """``watchdog replay``: a row per transcript event, then the final verdict."""
    head = f"{'line':>4}  {'kind':<11} {'tool':<8} {'stuck':<5} {'conf':<6} {'alert':<5}  "
    rows = [head + "command / reasons"]
    for r in results:
        if r.get("final"):
            continue
        line = int(r["line"])
        event = wd.decode_replay_line(lines[line - 1], line)
        what = event.command or _one_line(event.text or event.output or "", 40)
        reasons = ",".join(r.get("reasons") or [])
        rows.append(
            f"{line:>4}  {r['kind']:<11} {r.get('tool') or '-':<8} "
            f"{'yes' if r['likely_stuck'] else 'no':<5} {r['confidence']:<6} "
            f"{'yes' if r.get('alert') else '':<5}  {_one_line(what, 50)}"
            + (f"   [{reasons}]" if reasons else "")
        )
    final = results[-1]
    rows.append("")
    events, alerts = final.get("events", 0), final.get("alerts", 0)
    rows.append(
        f"final after {events} event{'' if events == 1 else 's'}, "
        f"{alerts} alert{'' if alerts == 1 else 's'}:"
    )
    rows.extend(_verdict_lines(final))
    return "\n".join(rows)
