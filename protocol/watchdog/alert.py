"""Watchdog alert gating and the ``[Watchdog Alert]`` text.

Gate policy (per agent)
-----------------------
A verdict alerts only when all of these hold, checked in this order (the first that fails is
the decision's ``reason``):

1. ``disabled``  — ``enabled`` is true;
2. ``paused``    — the session is not paused;
3. ``not_stuck`` — the verdict is ``likely_stuck`` (confidence medium or high);
4. ``cooldown``  — at least ``cooldown_s`` have passed since this agent's last alert
   (so an agent gets at most one alert per cooldown window, whatever its evidence);
5. ``duplicate_evidence`` — at least one evidence item is *fresh*: its key was never
   alerted for this agent in this episode, or it has grown since (a newer event ``seq``
   than when it was last alerted, i.e. the loop kept going).

So the same evidence never alerts twice inside the cooldown; a loop that keeps going alerts
again once per cooldown window; evidence that stopped growing (the agent moved on) never
alerts again. A new instruction starts a new episode: :func:`reset_episode` forgets the
evidence keys but keeps the cooldown clock. Alerting never kills or steers anything.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from protocol.watchdog.config import WatchdogConfig
from protocol.watchdog.detect import Verdict

__all__ = [
    "AlertDecision",
    "AlertGate",
    "decide_alert",
    "gate_verdict",
    "record_alert",
    "render_alert",
    "reset_episode",
]

GateReason = Literal["alert", "disabled", "paused", "not_stuck", "cooldown", "duplicate_evidence"]
MAX_RENDERED_EVIDENCE: Final = 8


class AlertGate(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's alert memory: when it last alerted and which evidence it alerted on."""

    last_alert_at: float | None = None
    alerted: dict[str, int] = {}  # evidence key -> newest seq at the time it alerted


class AlertDecision(msgspec.Struct, frozen=True, kw_only=True):
    alert: bool
    reason: GateReason
    fresh_keys: list[str] = []
    retry_after: float | None = None  # when the cooldown ends (reason == "cooldown")


def _newest(seqs: list[int]) -> int:
    return max(seqs, default=-1)


def decide_alert(
    gate: AlertGate,
    verdict: Verdict,
    config: WatchdogConfig,
    now: float,
    *,
    paused: bool = False,
) -> AlertDecision:
    """Should this verdict alert now? Pure: the gate is not changed."""
    if not config.enabled:
        return AlertDecision(alert=False, reason="disabled")
    if paused:
        return AlertDecision(alert=False, reason="paused")
    if not verdict.likely_stuck:
        return AlertDecision(alert=False, reason="not_stuck")
    if gate.last_alert_at is not None and now - gate.last_alert_at < config.cooldown_s:
        return AlertDecision(
            alert=False, reason="cooldown", retry_after=gate.last_alert_at + config.cooldown_s
        )
    fresh = [
        item.key
        for item in verdict.evidence
        if item.key not in gate.alerted or _newest(item.seqs) > gate.alerted[item.key]
    ]
    if not fresh:
        return AlertDecision(alert=False, reason="duplicate_evidence")
    return AlertDecision(alert=True, reason="alert", fresh_keys=fresh)


def record_alert(gate: AlertGate, verdict: Verdict, now: float) -> AlertGate:
    """The gate after an alert on ``verdict`` was sent at ``now``."""
    alerted = dict(gate.alerted)
    for item in verdict.evidence:
        alerted[item.key] = max(alerted.get(item.key, -1), _newest(item.seqs))
    return AlertGate(last_alert_at=now, alerted=alerted)


def reset_episode(gate: AlertGate) -> AlertGate:
    """A new instruction: forget evidence keys, keep the cooldown clock."""
    return AlertGate(last_alert_at=gate.last_alert_at)


def gate_verdict(
    gate: AlertGate,
    verdict: Verdict,
    config: WatchdogConfig,
    now: float,
    *,
    paused: bool = False,
) -> tuple[AlertDecision, AlertGate]:
    """Decide and, when it alerts, record: the usual one-step use of the gate."""
    decision = decide_alert(gate, verdict, config, now, paused=paused)
    if decision.alert:
        return decision, record_alert(gate, verdict, now)
    return decision, gate


def render_alert(
    agent_name: str,
    agent_id: str,
    task_id: str | None,
    verdict: Verdict,
    rescue_message: str,
) -> str:
    """The ``[Watchdog Alert]`` notification for the parent (no action has been taken)."""
    lines = [
        "[Watchdog Alert]",
        f"agent: {agent_name} ({agent_id})",
        f"task: {task_id or 'none'}",
        f"likely_stuck: {'yes' if verdict.likely_stuck else 'no'} "
        f"(confidence {verdict.confidence})",
        f"reasons: {', '.join(verdict.reasons) or 'none'}",
        "evidence:",
    ]
    for item in verdict.evidence[:MAX_RENDERED_EVIDENCE]:
        lines.append(f"  - {item.code} x{item.count} [{item.confidence}]: {item.detail}")
        lines.extend(f"      $ {command}" for command in item.commands)
        if item.hashes:
            shown = ", ".join(h[:12] for h in item.hashes if h)
            if shown:
                lines.append(f"      output sha256: {shown}")
    if len(verdict.evidence) > MAX_RENDERED_EVIDENCE:
        lines.append(f"  … {len(verdict.evidence) - MAX_RENDERED_EVIDENCE} more")
    if not verdict.evidence:
        lines.append("  (none)")
    lines.append("suggested rescue message:")
    lines.extend(f"  {line}" for line in rescue_message.splitlines() or [""])
    lines.append(
        "No action was taken: the agent keeps running. To send the rescue message, "
        f"message {agent_name} yourself (a steer is dry-run unless asked for)."
    )
    return "\n".join(lines)
