"""WatchdogActor: watches every agent's tool events for stuck loops.

It owns, per agent, a bounded event window (normalised commands, output hashes, short
previews — never whole outputs) and an alert gate (cooldown, evidence dedup), plus the
session state (paused, rescue-message override) and the target list. The broker tells it what
happens; it never changes a task. The rules are the pure functions of ``protocol.watchdog``.

Runtime events become watchdog events through :func:`protocol.watchdog.runtime_kind`, which
knows the agent's adapter: a ``command`` agent's printed lines and the bridge's notes are
kept as ``output``, not as agent messages; a condensation (Pi's compaction) is its own kind.
On each tool result, agent message and condensation it runs the detector (no timer: every
rule, ``no_progress`` too, measures what the events say, so only an event can make a verdict
worse); a verdict
that passes the gate becomes one ``[Watchdog Alert]`` to the parent (``alert_mode``
``main_only``, the default). With ``direct_subagent``/``both`` the rescue message is also sent
to the agent as a steer — the only automatic action, and only when configured. ``steer`` on
request is dry-run by default. A steer the watchdog sent comes back as the agent's next
message; it is kept as a rescue message (source ``watchdog``), not as a new instruction, so
an agent that goes on looping after the nudge keeps its counts.

A watchdog agent's question (``WatchdogQuery``, checked by
:mod:`protocol.session.watchdog_queries`) arrives in order with what the broker told it, and
is answered by publishing its receipt with the answer (:mod:`protocol.watchdog.queries`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import pykka

from actors.runtime.log import logger
from actors.runtime.runtime import ShepherdActor, tell_quietly
from actors.session import watchdog_answers
from actors.session.messages import (
    ParentCall,
    WatchdogAgent,
    WatchdogCall,
    WatchdogInstruction,
    WatchdogRuntime,
    WatchdogTask,
)
from actors.session.sinks import GuardedSink
from protocol import watchdog as wd
from protocol.calls import api
from protocol.calls.answers import fit_answer
from protocol.core.errors import InvalidArgument, InvalidHandle, ShepherdError
from protocol.ops import watchdog as watchdog_ops
from protocol.records.notifications import WatchdogAlert
from protocol.session.effects import WatchdogQuery
from protocol.wire.envelopes import AnyEnvelope

__all__ = ["WatchdogActor", "is_watchdog_call", "session_call"]


class _Agent:
    __slots__ = ("adapter", "gate", "name", "rescues", "seq", "task_id", "window")

    def __init__(self, agent_id: str, name: str, max_events: int) -> None:
        self.name = name
        self.adapter: str | None = None
        self.window = wd.EventWindow(agent_id, max_events)
        self.gate = wd.AlertGate()
        self.task_id: str | None = None
        self.seq = 0
        #: rescue messages steered to the agent that have not reached it yet
        self.rescues: deque[str] = deque(maxlen=8)


class WatchdogActor(ShepherdActor):
    def __init__(
        self,
        config: wd.WatchdogConfig,
        sink: GuardedSink,
        broker: pykka.ActorRef[Any],
        publish: Callable[[str, AnyEnvelope], None] | None = None,
    ) -> None:
        super().__init__()
        #: how a watchdog agent's answer is sent (the session's transport)
        self._publish = publish
        self.config = config
        self.state = wd.WatchdogSession()
        self.targets: dict[str, wd.WatchdogTarget] = {}
        self._agents: dict[str, _Agent] = {}
        self._sink = sink
        self._broker = broker
        self.alerts = 0

    # ------------------------------------------------------------------ events

    def on_receive(self, message: Any) -> Any:
        match message:
            case WatchdogAgent():
                self._agent(message)
            case WatchdogTask(agent_id=agent_id, task_id=task_id):
                if agent_id in self._agents:
                    self._agents[agent_id].task_id = task_id
            case WatchdogInstruction():
                self._instruction(message)
            case WatchdogRuntime():
                self._runtime(message)
            case WatchdogCall(op=op, args=args):
                return self._call(op, dict(args))
            case WatchdogQuery():
                self._query(message)
            case list():  # what one run of the broker's effects told, in order (one message)
                for each in message:
                    self.on_receive(each)
            case _:
                return super().on_receive(message)
        return None

    def _agent(self, msg: WatchdogAgent) -> None:
        if msg.agent_id not in self._agents:
            self._agents[msg.agent_id] = _Agent(
                msg.agent_id, msg.name, self.config.max_events_per_agent
            )
        if msg.adapter is not None:
            self._agents[msg.agent_id].adapter = msg.adapter
        self._target_event(
            msg.agent_id,
            msg.at,
            status=msg.process_state,
            name=msg.name,
            description=msg.description,
            role=msg.role,
        )

    def _target_event(self, agent_id: str, at: float, **changes: Any) -> None:
        """Update one target in place (the pure rule copies its mapping: O(agents) per event,
        which made a 10,000-agent session start quadratically)."""
        one = {agent_id: self.targets[agent_id]} if agent_id in self.targets else {}
        self.targets[agent_id] = wd.apply_target_event(one, agent_id, at, **changes)[agent_id]

    def _event(self, agent: _Agent, **fields: Any) -> None:
        agent.seq += 1
        agent.window.append(
            wd.make_event(
                agent_id=agent.window.agent_id, seq=agent.seq, config=self.config, **fields
            )
        )

    def _instruction(self, msg: WatchdogInstruction) -> None:
        agent = self._agents.get(msg.agent_id)
        if agent is None:
            return
        if msg.kind == "task":
            agent.task_id = msg.task_id
        if msg.kind == "message" and msg.text in agent.rescues:
            # our own nudge coming back through the broker: not an instruction, the episode
            # goes on until the agent does something new
            agent.rescues.remove(msg.text)
            self._event(agent, ts=msg.at, kind="message", output=msg.text, source="watchdog")
            return
        # a new instruction opens a new evidence window
        self._event(agent, ts=msg.at, kind="message", output=msg.text, source="user")
        agent.gate = wd.reset_episode(agent.gate)

    def _runtime(self, msg: WatchdogRuntime) -> None:
        agent = self._agents.get(msg.agent_id)
        if agent is None:
            return
        env = msg.envelope
        match wd.runtime_kind(agent.adapter, env.event, env.text):
            case "tool_call":
                self._event(
                    agent, ts=msg.at, kind="tool_call", tool=env.tool or "tool", command=env.command
                )
                self._target_event(msg.agent_id, msg.at, tool_calls=1)
            case "tool_result":
                self._event(
                    agent,
                    ts=msg.at,
                    kind="error" if env.is_error else "tool_result",
                    tool=env.tool or "tool",
                    command=env.command,
                    output=env.output or "",
                    exit_code=env.exit_code,
                    is_error=env.is_error,
                )
                self._check(msg.agent_id)
            case "message":
                self._event(agent, ts=msg.at, kind="message", output=env.text or "")
                self._check(msg.agent_id)
            case "condensation":
                self._event(
                    agent,
                    ts=msg.at,
                    kind="condensation",
                    output=env.text or "",
                    is_error=env.is_error,
                )
                self._check(msg.agent_id)
            case "output":
                # kept for inspection; no rule counts it, so nothing to check
                self._event(agent, ts=msg.at, kind="output", output=env.text or "")
                self._target_event(msg.agent_id, msg.at)
            case _:
                self._target_event(msg.agent_id, msg.at)

    # ------------------------------------------------------------------ detection

    def _verdict(self, agent: _Agent) -> wd.Verdict:
        return wd.detect_stuck(agent.window.episode(), self.config, self.clock.now())

    def _check(self, agent_id: str) -> None:
        agent = self._agents.get(agent_id)
        if agent is None:
            return
        verdict = self._verdict(agent)
        decision, agent.gate = wd.gate_verdict(
            agent.gate, verdict, self.config, self.clock.now(), paused=self.state.paused
        )
        if decision.alert:
            self._alert(agent_id, agent, verdict)

    def _alert(
        self,
        agent_id: str,
        agent: _Agent,
        verdict: wd.Verdict,
        destinations: frozenset[str] | None = None,
    ) -> WatchdogAlert:
        alert = self.new_alert(agent_id, agent, verdict)
        rescue = alert.rescue_message
        self.alerts += 1
        if destinations is None:
            destinations = wd.alert_destinations(self.config.alert_mode)
        if "parent" in destinations:
            self._sink(alert)
        if "agent" in destinations:
            self._steer(agent_id, rescue)
        return alert

    def new_alert(
        self,
        agent_id: str,
        agent: _Agent,
        verdict: wd.Verdict,
        *,
        text: str | None = None,
        reported_by: str | None = None,
    ) -> WatchdogAlert:
        """The alert about ``agent`` (``text``: said by a watchdog agent, ``reported_by``;
        else the detector's own words)."""
        rescue = wd.effective_rescue_message(self.config, self.state)
        if text is None:
            text = wd.render_alert(agent.name, agent_id, agent.task_id, verdict, rescue)
        return WatchdogAlert(
            created_at=self.clock.now(),
            agent_id=agent_id,
            agent_name=agent.name,
            task_id=agent.task_id,
            confidence=verdict.confidence,
            reasons=tuple(verdict.reasons),
            evidence=tuple(msgspec.to_builtins(e) for e in verdict.evidence),
            rescue_message=rescue,
            text=text,
            reported_by=reported_by,
        )

    def _steer(self, agent_id: str, text: str) -> None:
        if agent_id in self._agents:
            self._agents[agent_id].rescues.append(text)
        tell_quietly(
            self._broker,
            ParentCall(args=api.MessageArgs(target=agent_id, message=text, steer=True)),
        )

    # ------------------------------------------------------------------ operations

    def _known(self, handle: Any) -> tuple[str, _Agent]:
        if not isinstance(handle, str):
            raise InvalidArgument("an agent id or name is required")
        if handle in self._agents:
            return handle, self._agents[handle]
        for agent_id, agent in reversed(self._agents.items()):  # the newest agent of a name
            if agent.name == handle:
                return agent_id, agent
        raise InvalidHandle(f"the watchdog knows no agent {handle!r}")

    @staticmethod
    def _limit(args: dict[str, Any], default: int) -> int:
        limit = args.get("limit", default)
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise InvalidArgument(f"limit must be an integer, got {limit!r}")
        return limit

    def _call(self, op: str, args: dict[str, Any]) -> Any:
        match op:
            case "status":
                return {
                    "enabled": self.config.enabled,
                    "paused": self.state.paused,
                    "alert_mode": self.config.alert_mode,
                    "alerts": self.alerts,
                    "rescue_message": wd.effective_rescue_message(self.config, self.state),
                    "targets": [msgspec.to_builtins(t) for t in self.targets.values()],
                }
            case "config":
                return wd.config_to_dict(self.config)
            case "set":
                key, value = args.get("key"), args.get("value")
                if not isinstance(key, str) or not isinstance(value, str):
                    raise InvalidArgument("watchdog set needs a KEY and a VALUE (both text)")
                if key == "rescue_message_override":
                    self.state = wd.set_rescue_override(self.state, value or None)
                else:
                    self.config = wd.set_config_value(self.config, key, value)
                    if key == "max_events_per_agent":
                        for agent_id, agent in self._agents.items():
                            kept = agent.window.events()[-self.config.max_events_per_agent :]
                            agent.window = wd.EventWindow(
                                agent_id, self.config.max_events_per_agent
                            )
                            agent.window.extend(kept)
                return wd.config_to_dict(self.config)
            case "pause":
                self.state = wd.pause(self.state)
                return {"paused": True}
            case "resume":
                self.state = wd.resume(self.state)
                return {"paused": False}
            case "list_targets":
                return [msgspec.to_builtins(t) for t in self.targets.values()]
            case "read_events" | "inspect":
                agent_id, agent = self._known(args.get("agent"))
                limit = self._limit(args, self.config.max_events_per_agent)
                events = agent.window.events()[-limit:] if limit > 0 else []
                result: dict[str, Any] = {
                    "agent_id": agent_id,
                    "name": agent.name,
                    "task_id": agent.task_id,
                    "events": [msgspec.to_builtins(e) for e in events],
                    "dropped": agent.window.dropped,
                }
                if op == "inspect":
                    result["verdict"] = wd.verdict_to_dict(self._verdict(agent))
                return result
            case "detect":
                agent_id, agent = self._known(args.get("agent"))
                return {"agent_id": agent_id, **wd.verdict_to_dict(self._verdict(agent))}
            case "alert_main":
                agent_id, agent = self._known(args.get("agent"))
                verdict = self._verdict(agent)
                # asked for explicitly: to the parent only, and it counts for the gate
                alert = self._alert(agent_id, agent, verdict, frozenset({"parent"}))
                agent.gate = wd.record_alert(agent.gate, verdict, self.clock.now())
                return {"alerted": True, "text": alert.text}
            case "steer":
                agent_id, agent = self._known(args.get("agent"))
                text = str(
                    args.get("message") or wd.effective_rescue_message(self.config, self.state)
                )
                dry_run = args.get("dry_run", True) is not False  # only an explicit False sends
                if not dry_run:
                    self._steer(agent_id, text)
                return {
                    "agent_id": agent_id,
                    "message": text,
                    "dry_run": dry_run,
                    "sent": not dry_run,
                }
            case _:
                raise InvalidArgument(f"unknown watchdog operation {op!r}")

    # ------------------------------------------------------------------ a watchdog agent's

    def _query(self, q: WatchdogQuery) -> None:
        """Answer a watchdog agent's question in its receipt (a refusal if it fails)."""
        try:
            data = fit_answer(watchdog_answers.answer(self, q), q.budget)
            reply = msgspec.structs.replace(q.receipt, data=data)
        except ShepherdError as exc:
            reply = msgspec.structs.replace(q.receipt, accepted=False, error=exc.info())
        except Exception as exc:  # a bug still answers: the asker never waits in vain
            logger.opt(exception=True).error("watchdog question {} failed", q.op)
            error = ShepherdError(f"internal error: {exc!r}").info()
            reply = msgspec.structs.replace(q.receipt, accepted=False, error=error)
        if self._publish is not None:
            try:
                self._publish(q.inbox, reply)
            except ShepherdError as exc:  # its asker has gone: nobody to tell
                logger.warning("watchdog answer to {} undeliverable: {}", q.inbox, exc.message)


# ------------------------------------------------------------------ the watchdog operations


def is_watchdog_call(op: str) -> bool:
    """``watchdog`` (the older envelope) or one of the watchdog's entries of the operation
    table (``watchdog_status``, the ``watchdog_*`` tools ...)."""
    return op == "watchdog" or any(entry.name == op for entry in watchdog_ops.WATCHDOG)


def session_call(session: Any, op: str, args: Mapping[str, Any]) -> Any:
    """A watchdog call as ``Supervisor.call`` takes it: checked against its entry of the
    operation table, then run by ``session.run``.

    ``op`` is ``watchdog`` with ``{"op": ..., "args": {...}}`` (the older envelope), or an
    entry's name (``watchdog_status``, ``watchdog_read_events`` ...) with its arguments.
    """
    if op == "watchdog":
        return session.run(watchdog_ops.envelope_args(args))
    if not is_watchdog_call(op):
        raise InvalidArgument(f"not a watchdog operation: {op!r}")
    entry = next(e for e in watchdog_ops.WATCHDOG if e.name == op)
    return session.run(entry.build(args))
