"""The answers to a watchdog agent's questions (``shepherd-child watchdog-*``), from the
session's watchdog (:class:`~actors.session.watchdog.WatchdogActor`, which publishes them).

What each question takes and who may ask is :mod:`protocol.session.watchdog_queries`; the
bounded shapes of the answers and the alert's text are :mod:`protocol.watchdog.queries`. Runs
inside the watchdog actor's handler: it reads the actor's state, and an alert is counted and
remembered by the agent's alert gate, as ``watchdog_alert_main``'s is.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from actors.runtime.clock import Clock
from actors.session.sinks import GuardedSink
from protocol import watchdog as wd
from protocol.records.notifications import WatchdogAlert
from protocol.session.effects import WatchdogQuery
from protocol.watchdog import queries

__all__ = ["Watchdog", "answer"]


class Watchdog(Protocol):
    """What of the watchdog actor the answers read (and an alert counts)."""

    config: wd.WatchdogConfig
    state: wd.WatchdogSession
    targets: dict[str, wd.WatchdogTarget]
    alerts: int
    _agents: dict[str, Any]
    _sink: GuardedSink

    @property
    def clock(self) -> Clock: ...

    def _call(self, op: str, args: dict[str, Any]) -> Any: ...

    def _verdict(self, agent: Any) -> wd.Verdict: ...

    def _known(self, handle: Any) -> tuple[str, Any]: ...

    def new_alert(
        self,
        agent_id: str,
        agent: Any,
        verdict: wd.Verdict,
        *,
        text: str | None = None,
        reported_by: str | None = None,
    ) -> WatchdogAlert: ...


def answer(w: Watchdog, q: WatchdogQuery) -> Any:
    """The answer to ``q`` (raises the typed error that refuses it)."""
    if q.op == "status":
        shown, total = queries.newest_targets(w.targets.values())
        status = {k: v for k, v in w._call("status", {}).items() if k != "targets"}
        targets = [msgspec.to_builtins(t) for t in shown]
        answer = {**status, "targets": targets, "targets_total": total}
        return queries.fit_list(answer, "targets", q.budget, keep="first")
    if q.op == "events":
        answer = w._call("read_events", {"agent": q.agent_id, "limit": q.limit or 20})
        return queries.fit_events(answer, q.budget)
    if q.op == "stuck" and q.agent_id is not None:
        return w._call("detect", {"agent": q.agent_id})
    if q.op == "stuck":
        shown, total = queries.newest_targets(w.targets.values())
        verdicts = [
            (t, w._agents[t.id].task_id, w._verdict(w._agents[t.id]))
            for t in shown
            if t.id in w._agents
        ]
        found = {"checked": len(verdicts), "agents": total, "stuck": queries.stuck_list(verdicts)}
        return queries.fit_list(found, "stuck", q.budget, keep="first")
    agent_id, agent = w._known(q.agent_id)  # alert
    verdict = w._verdict(agent)
    why = "disabled" if not w.config.enabled else "paused" if w.state.paused else None
    if why is not None:
        return {"alerted": False, "reason": f"the watchdog is {why}: no alert is sent"}
    text = queries.render_agent_alert(
        reporter=q.asker_name,
        reporter_id=q.asker_id,
        agent_name=agent.name,
        agent_id=agent_id,
        task_id=agent.task_id,
        text=q.text or "",
        verdict=verdict,
    )
    alert = w.new_alert(agent_id, agent, verdict, text=text, reported_by=q.asker_id)
    w.alerts += 1
    w._sink(alert)
    agent.gate = wd.record_alert(agent.gate, verdict, w.clock.now())
    return {"alerted": True, "agent_id": agent_id, "confidence": verdict.confidence}
