"""A watchdog agent's questions in a simulated session: the session's watchdog answers each in
its receipt, in order after everything it was told before (a question that arrives in the same
batch as an agent's tool events sees them); its alert reaches the parent's sink; a session
without a watchdog refuses the question; same seed, same answers."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from actors.session import watchdog_answers
from actors.session.messages import InboundBatch
from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from actors.testing.simagent import SimLauncher
from actors.testing.simulation import SimRuntime, SimTransport
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.notifications import WatchdogAlert
from protocol.records.settings import Settings
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    QueryEnvelope,
    RuntimeEnvelope,
    encode_envelope,
)
from tests.sim.scenarios import new_session

IDLE: dict[str, Any] = {"steps": []}
RG = "rg -n TODO src"


def _id() -> str:
    return make_id(IdKind.MESSAGE, secrets.token_hex(8))


def _runtime(session: SimSession, agent_id: str, event: str, **fields: Any) -> RuntimeEnvelope:
    return RuntimeEnvelope(
        message_id=_id(),
        session_id=session.session_id,
        sender_id=agent_id,
        target_id=PARENT_ID,
        created_at=0.0,
        event=event,  # type: ignore[arg-type]
        **fields,
    )


def _ask(
    session: SimSession, asker: str, op: str, **fields: Any
) -> tuple[QueryEnvelope, list[Any]]:
    """A question from ``asker`` and the list its answers land in (its one-shot inbox)."""
    message_id = _id()
    got: list[AnyEnvelope] = []
    session.transport.subscribe(message_id, got.append)
    env = QueryEnvelope(
        message_id=message_id,
        session_id=session.session_id,
        sender_id=asker,
        target_id=PARENT_ID,
        created_at=0.0,
        reply_inbox=message_id,
        op=op,  # type: ignore[arg-type]
        **fields,
    )
    return env, got


def _answer(got: list[Any]) -> AckEnvelope:
    (ack,) = got
    assert isinstance(ack, AckEnvelope)
    return ack


def _loop_and_ask(seed: int) -> tuple[list[Any], list[str], list[WatchdogAlert]]:
    session, sink = new_session(seed)
    try:
        wd = session.spawn("wd", script=IDLE, role="watchdog").agent_id
        scout = session.spawn("scout", script=IDLE).agent_id
        session.sim.run_all(max_time=1)
        events: list[AnyEnvelope] = []
        for _ in range(3):
            events.append(_runtime(session, scout, "tool_call", tool="bash", command=RG))
            events.append(
                _runtime(session, scout, "tool_result", tool="bash", command=RG, output="a:1")
            )
        read, read_got = _ask(session, wd, "events", agent="scout", limit=200)
        stuck, stuck_got = _ask(session, wd, "stuck")
        alert, alert_got = _ask(session, wd, "alert", agent="scout", text="scout loops on rg")
        # one receiving pass: the tool events, then the questions, in this order
        batch = (*events, read, stuck, alert)
        assert session.broker.ask(InboundBatch(envelopes=batch), timeout=30) is None
        session.sim.run_all(max_time=5)
        acks = [_answer(read_got), _answer(stuck_got), _answer(alert_got)]
        assert all(a.accepted for a in acks), acks
        commands = [e["command"] for e in acks[0].data["events"]]
        mine = [a for a in sink.items if isinstance(a, WatchdogAlert) and a.reported_by == wd]
        return [a.data for a in acks], commands, mine
    finally:
        session.shutdown()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_questions_are_answered_after_what_the_watchdog_was_told_before(seed: int) -> None:
    (events, stuck, alerted), commands, mine = _loop_and_ask(seed)
    assert commands == [RG] * 6  # every event handled before the question was answered
    assert events["name"] == "scout" and events["dropped"] == 0
    assert [s["name"] for s in stuck["stuck"]] == ["scout"]
    assert alerted["alerted"] is True
    (alert,) = mine
    assert "scout loops on rg" in alert.text and "repeated_command" in alert.reasons


def test_same_seed_same_answers() -> None:
    first = _loop_and_ask(7)
    assert _loop_and_ask(7) == first


def test_a_session_without_a_watchdog_refuses_the_question() -> None:
    runtime = SimRuntime(5)
    transport = SimTransport(runtime)
    sink = CollectingSink()
    session = SimSession(
        runtime, transport, SimLauncher(runtime, transport), sink=sink, watchdog=False
    )
    try:
        wd = session.spawn("wd", script=IDLE, role="watchdog").agent_id
        session.sim.run_all(max_time=1)
        env, got = _ask(session, wd, "status")
        assert session.broker.ask(InboundBatch(envelopes=(env,)), timeout=30) is None
        session.sim.run_all(max_time=1)
        ack = _answer(got)
        assert not ack.accepted and ack.error is not None
        assert (ack.error.code, ack.error.message) == (
            "invalid_argument",
            "this session runs without a watchdog",
        )
    finally:
        session.shutdown()


def test_answers_fit_a_small_envelope_and_say_what_they_cut() -> None:
    settings = Settings(max_envelope_bytes=1024)
    session, _ = new_session(9, settings=settings)
    try:
        wd = session.spawn("wd", script=IDLE, role="watchdog").agent_id
        for i in range(12):
            session.spawn(f"w{i}", script=IDLE)
        session.sim.run_all(max_time=1)
        env, got = _ask(session, wd, "status")
        assert session.broker.ask(InboundBatch(envelopes=(env,)), timeout=30) is None
        session.sim.run_all(max_time=1)
        ack = _answer(got)
        assert ack.accepted, ack
        data = ack.data
        assert data["targets_total"] == 13 and data["cut"] == 13 - len(data["targets"]) > 0
        assert len(encode_envelope(ack)) <= settings.max_envelope_bytes
    finally:
        session.shutdown()


def test_a_failing_answer_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug in the answer")

    monkeypatch.setattr(watchdog_answers, "answer", broken)
    session, _ = new_session(4)
    try:
        wd = session.spawn("wd", script=IDLE, role="watchdog").agent_id
        session.sim.run_all(max_time=1)
        env, got = _ask(session, wd, "status")
        assert session.broker.ask(InboundBatch(envelopes=(env,)), timeout=30) is None
        session.sim.run_all(max_time=1)
        ack = _answer(got)
        assert not ack.accepted and ack.error is not None
        assert "internal error" in ack.error.message and "a bug in the answer" in ack.error.message
    finally:
        session.shutdown()
