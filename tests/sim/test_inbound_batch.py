"""The broker's batch of inbound envelopes (``InboundBatch``, what the parent's mailbox hands
over per receiving pass): each envelope through the same rule as one alone, in order; one the
session fails on is refused alone (the transport quarantines it), the others stay handled."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from actors.runtime.transport import DeliveryFailed
from actors.session import broker as broker_module
from actors.session.messages import InboundBatch
from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from protocol.envelopes import MessageEnvelope
from protocol.ids import PARENT_ID, IdKind, make_id
from protocol.notifications import AgentMessage

IDLE = {"steps": []}


def _message(session: SimSession, sender_id: str, content: str) -> MessageEnvelope:
    return MessageEnvelope(
        message_id=make_id(IdKind.MESSAGE, secrets.token_hex(8)),
        session_id=session.session_id,
        sender_id=sender_id,
        target_id=PARENT_ID,
        created_at=0.0,
        content=content,
    )


def test_a_batch_is_handled_in_order_and_a_failing_envelope_is_refused_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = CollectingSink()
    session = SimSession.simulated(3, sink=sink, trace=False)
    try:
        agent_id = session.spawn("scout", script=IDLE).agent_id
        session.sim.run_all(max_time=1)
        batch = [_message(session, agent_id, f"m{i}") for i in range(4)]
        failing = batch[2].message_id
        rule = broker_module.inbound.envelope

        def envelope(state: Any, env: Any, cx: Any) -> Any:
            if env.message_id == failing:
                raise RuntimeError("the rule broke on this one")
            return rule(state, env, cx)

        monkeypatch.setattr(broker_module.inbound, "envelope", envelope)
        refused = session.broker.ask(InboundBatch(envelopes=tuple(batch)), timeout=30)
        session.sim.run_all(max_time=1)
        assert set(refused) == {failing}
        assert isinstance(refused[failing], DeliveryFailed)
        assert "the rule broke on this one" in refused[failing].message
        told = [n.content for n in sink.items if isinstance(n, AgentMessage)]
        assert told == ["m0", "m1", "m3"]
        # nothing refused: the answer is None
        monkeypatch.setattr(broker_module.inbound, "envelope", rule)
        again = [_message(session, agent_id, "m4")]
        assert session.broker.ask(InboundBatch(envelopes=tuple(again)), timeout=30) is None
    finally:
        session.shutdown()
