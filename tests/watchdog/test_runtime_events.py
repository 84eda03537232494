"""What the watchdog actor makes of an agent's runtime events, by adapter: a command agent's
printed lines are not messages, a bridge note is not the agent speaking, a Pi compaction is a
condensation (neither progress nor a failure), and the rules see it all that way.

The runtime envelopes are told to the session's watchdog as the broker tells them (one
``WatchdogRuntime`` per envelope) in a simulated session: virtual time, no sleeps.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from actors.session.messages import WatchdogAgent, WatchdogInstruction, WatchdogRuntime
from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from protocol.records.notifications import WatchdogAlert
from protocol.wire.envelopes import RuntimeEnvelope

_ids = itertools.count()


class Agent:
    """One agent as the broker shows it to the watchdog."""

    def __init__(self, session: SimSession, name: str, adapter: str) -> None:
        self.session = session
        self.agent_id = f"agent-{name}"
        self.name = name
        assert session.watchdog_ref is not None  # the session runs its watchdog
        self.watchdog: Any = session.watchdog_ref
        self.watchdog.tell(
            WatchdogAgent(agent_id=self.agent_id, name=name, adapter=adapter, at=self.now())
        )

    def now(self) -> float:
        return self.session.runtime.clock.now()

    def instruct(self, text: str) -> None:
        self.watchdog.tell(
            WatchdogInstruction(
                agent_id=self.agent_id, kind="task", text=text, task_id=None, at=self.now()
            )
        )

    def runtime(self, event: str, **fields: Any) -> None:
        env = RuntimeEnvelope(
            message_id=f"m-{next(_ids)}",
            session_id=self.session.session_id,
            sender_id=self.agent_id,
            target_id="parent",
            created_at=self.now(),
            event=event,  # type: ignore[arg-type]
            **fields,
        )
        self.watchdog.tell(WatchdogRuntime(agent_id=self.agent_id, envelope=env, at=self.now()))

    def inspect(self) -> dict[str, Any]:
        self.session.sim.run_all(max_time=1)
        result: dict[str, Any] = self.session.watchdog("inspect", agent=self.name)
        return result


@pytest.fixture
def session() -> Iterator[tuple[SimSession, CollectingSink]]:
    sink = CollectingSink()
    made = SimSession.simulated(11, sink=sink)
    try:
        yield made, sink
    finally:
        made.shutdown()


def alerts(sink: CollectingSink) -> list[WatchdogAlert]:
    return [n for n in sink.items if isinstance(n, WatchdogAlert)]


def test_a_command_agent_printing_the_same_error_line_is_not_stuck(session: Any) -> None:
    s, sink = session
    agent = Agent(s, "worker", "command")
    agent.instruct("fetch the report")
    agent.runtime("turn_start")
    for _ in range(5):
        agent.runtime("output", text="error: connection refused (retrying)")
    data = agent.inspect()
    assert [e["kind"] for e in data["events"]] == ["message"] + ["output"] * 5
    assert data["verdict"]["reasons"] == [] and not data["verdict"]["likely_stuck"]
    assert alerts(sink) == []


def test_the_same_lines_from_a_model_agent_are_a_monologue(session: Any) -> None:
    s, sink = session
    agent = Agent(s, "thinker", "pi-rpc")
    agent.instruct("fetch the report")
    for _ in range(3):
        agent.runtime("output", text="I cannot reach the server.")
    assert agent.inspect()["verdict"]["reasons"] == ["monologue"]
    (alert,) = alerts(sink)
    assert alert.reasons == ("monologue",)


def test_bridge_notes_are_not_the_agent_speaking(session: Any) -> None:
    s, sink = session
    agent = Agent(s, "thinker", "pi-rpc")
    agent.instruct("fetch the report")
    for _ in range(4):
        agent.runtime("output", text="[shepherd] message queued as a follow_up: lands next turn")
    data = agent.inspect()
    assert {e["kind"] for e in data["events"][1:]} == {"output"}
    assert data["verdict"]["reasons"] == [] and alerts(sink) == []


def test_pi_compactions_are_condensations_neither_progress_nor_failure(session: Any) -> None:
    s, sink = session
    agent = Agent(s, "coder", "pi-rpc")
    agent.instruct("make the tests pass")
    for i in range(3):
        agent.runtime("tool_call", tool="bash", command="npm test")
        agent.runtime("condensation", text="context compaction (overflow) failed", is_error=True)
        agent.runtime(
            "tool_result", tool="bash", command="npm test", output=f"{i} failing", is_error=True
        )
    data = agent.inspect()
    kinds = [e["kind"] for e in data["events"]]
    assert kinds.count("condensation") == 3 and kinds.count("error") == 3
    # the compactions do not pair with the running call, and they are not progress either:
    # the same call failed three times in a row
    assert data["verdict"]["reasons"] == ["repeated_failure"]
    assert data["verdict"]["calls"] == 3
    (alert,) = alerts(sink)
    assert "npm test" in alert.text


def test_compactions_back_to_back_alert_as_a_condensation_loop(session: Any) -> None:
    s, sink = session
    s.watchdog("set", key="condensation_loop.threshold", value="4")
    agent = Agent(s, "coder", "pi-rpc")
    agent.instruct("summarise the repository")
    for _ in range(4):
        agent.runtime("condensation", text="context compaction (overflow)")
    assert agent.inspect()["verdict"]["reasons"] == ["condensation_loop"]
    (alert,) = alerts(sink)
    assert alert.reasons == ("condensation_loop",)
