"""The NATS transport's contract, against a real ``nats-server`` (tests/nats/conftest.py): the
same promises the file mailbox makes (accepted means delivered once or quarantined with a
reason; refusals are typed), kept across a server's SIGKILL and restart."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator

import pytest

from actors.runtime.transport import PARENT_INBOX, NotHandled
from actors.transports.nats.server import NatsServer
from actors.transports.nats.transport import NatsTransport, inbox_subject
from protocol.core.errors import InboxFull, InvalidHandle, LimitExceeded, SessionUnavailable
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope

pytestmark = pytest.mark.processes

WAIT_S = 30.0
AGENT = make_id(IdKind.AGENT, "a1a1a1a1")
CAPABILITY = "c" * 32


def message(session_id: str, content: str = "hi", **fields: object) -> MessageEnvelope:
    values: dict[str, object] = {
        "message_id": make_id(IdKind.MESSAGE, secrets.token_hex(8)),
        "session_id": session_id,
        "sender_id": AGENT,
        "target_id": PARENT_ID,
        "created_at": 0.0,
        "capability": CAPABILITY,
        "content": content,
    }
    values.update(fields)
    return MessageEnvelope(**values)  # type: ignore[arg-type]


class Collector:
    """A handler recording envelopes; tests wait for a count on a Condition, never a sleep."""

    def __init__(self, fail_on: Callable[[AnyEnvelope], bool] | None = None) -> None:
        self.items: list[AnyEnvelope] = []
        self._cond = threading.Condition()
        self._fail_on = fail_on

    def __call__(self, envelope: AnyEnvelope) -> None:
        if self._fail_on is not None and self._fail_on(envelope):
            raise RuntimeError("handler failure on purpose")
        with self._cond:
            self.items.append(envelope)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = WAIT_S) -> list[AnyEnvelope]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.items) >= count, timeout), (
                f"{len(self.items)} of {count} envelopes arrived"
            )
            return list(self.items)


@pytest.fixture
def transport(nats_server: NatsServer, session_id: str) -> Iterator[NatsTransport]:
    made = NatsTransport([nats_server.url], session_id, Settings(max_queue_depth=5))
    made.admit(AGENT, session_id, CAPABILITY)
    try:
        yield made
    finally:
        made.close()


def test_delivered_once_in_order_without_capability(
    transport: NatsTransport, session_id: str
) -> None:
    got = Collector()
    transport.subscribe(PARENT_INBOX, got)
    sent = [message(session_id, f"m{index}") for index in range(5)]
    for envelope in sent:
        transport.publish(PARENT_INBOX, envelope)
    received = got.wait_for(5)
    assert [item.message_id for item in received] == [item.message_id for item in sent]
    assert all(item.capability == "" for item in received)


def test_unknown_inbox_is_invalid_handle(transport: NatsTransport, session_id: str) -> None:
    with pytest.raises(InvalidHandle, match="no inbox"):
        transport.publish(make_id(IdKind.AGENT, "b2b2b2b2"), message(session_id))
    with pytest.raises(InvalidHandle, match="not an inbox name"):
        transport.publish("bad.subject.>", message(session_id))


def test_oversized_envelope_is_limit_exceeded(transport: NatsTransport, session_id: str) -> None:
    transport.ensure_inbox(PARENT_INBOX)
    with pytest.raises(LimitExceeded, match="max_envelope_bytes"):
        transport.publish(PARENT_INBOX, message(session_id, "x" * 70_000))


def test_full_inbox_refused_by_the_server_then_accepted_once_read(
    transport: NatsTransport, session_id: str
) -> None:
    transport.ensure_inbox(PARENT_INBOX)
    for index in range(5):
        transport.publish(PARENT_INBOX, message(session_id, f"m{index}"))
    with pytest.raises(InboxFull) as refused:
        transport.publish(PARENT_INBOX, message(session_id, "one too many"))
    assert refused.value.code == "limit_exceeded"
    got = Collector()
    transport.subscribe(PARENT_INBOX, got)
    got.wait_for(5)
    late = message(session_id, "after reading")
    # a read envelope leaves the stream once its acknowledgement reaches the server, a moment
    # after the handler saw it; until then a publisher is refused, as any publisher meeting a
    # full inbox is, and tries again (each try a round trip to the server, at most 500)
    for _ in range(500):
        try:
            transport.publish(PARENT_INBOX, late)
            break
        except InboxFull:
            continue
    assert got.wait_for(6)[-1].message_id == late.message_id


def test_a_repeated_publish_is_stored_once(transport: NatsTransport, session_id: str) -> None:
    got = Collector()
    transport.subscribe(PARENT_INBOX, got)
    envelope = message(session_id)
    transport.publish(PARENT_INBOX, envelope)
    transport.publish(PARENT_INBOX, envelope)  # a retry after a lost acknowledgement
    marker = message(session_id, "marker")
    transport.publish(PARENT_INBOX, marker)
    assert [item.message_id for item in got.wait_for(2)] == [
        envelope.message_id,
        marker.message_id,
    ]


def test_forged_and_broken_messages_go_to_quarantine_and_the_rest_flows(
    transport: NatsTransport, session_id: str
) -> None:
    got = Collector(fail_on=lambda env: getattr(env, "content", "") == "poison")
    transport.subscribe(PARENT_INBOX, got)
    transport.publish(PARENT_INBOX, message(session_id, "forged", capability="f" * 32))
    transport.publish(PARENT_INBOX, message(session_id, "poison"))
    raw = transport._thread.run(
        transport._js.publish(inbox_subject(session_id, PARENT_INBOX), b"{not json"), 10
    )
    assert raw.seq > 0
    good = message(session_id, "good")
    transport.publish(PARENT_INBOX, good)
    assert [item.message_id for item in got.wait_for(1)] == [good.message_id]
    records = transport.quarantine()
    assert sorted(record.code for record, _ in records) == [
        "error",
        "forbidden_sender",
        "invalid_envelope",
    ]
    assert all(
        b"forged" not in data or record.code == "forbidden_sender" for record, data in records
    )
    assert transport.gate.refused == 1


def test_a_redelivery_after_a_lost_ack_is_handed_over_once(
    nats_server: NatsServer, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = NatsTransport([nats_server.url], session_id, ack_wait_s=1.0)
    made.admit(AGENT, session_id, CAPABILITY)
    repeated = threading.Event()
    judge = made.gate.judge

    def watching_judge(inbox: str, env: AnyEnvelope) -> object:
        verdict = judge(inbox, env)
        if verdict is None:
            repeated.set()
        return verdict

    monkeypatch.setattr(made.gate, "judge", watching_judge)
    lost = {"first": True}

    async def lossy_ack(self: Msg) -> None:  # the first acknowledgement never arrives
        if lost.pop("first", False):
            return
        await original_ack(self)

    from nats.aio.msg import Msg

    original_ack = Msg.ack
    monkeypatch.setattr(Msg, "ack", lossy_ack)
    try:
        got = Collector()
        made.subscribe(PARENT_INBOX, got)
        envelope = message(session_id)
        made.publish(PARENT_INBOX, envelope)
        got.wait_for(1)
        assert repeated.wait(WAIT_S), "the server never redelivered the unacknowledged message"
        assert made.gate.duplicates[PARENT_INBOX] == 1
        assert len(got.items) == 1
    finally:
        made.close()


def test_what_a_stopped_session_did_not_take_is_kept_unquarantined_for_the_next_parent(
    nats_server: NatsServer, session_id: str
) -> None:
    stopped = NatsTransport([nats_server.url], session_id, ack_wait_s=1.0)
    stopped.admit(AGENT, session_id, CAPABILITY)
    offered: list[str] = []
    again = threading.Event()

    def not_taken(envelope: AnyEnvelope) -> None:
        offered.append(envelope.message_id)
        if len(offered) >= 2:
            again.set()
        raise NotHandled("the session stopped: its journal could not be written")

    envelope = message(session_id)
    try:
        stopped.subscribe(PARENT_INBOX, not_taken)
        stopped.publish(PARENT_INBOX, envelope)
        # not acknowledged (the server offers it again) and not taken for a repeat
        assert again.wait(WAIT_S), offered
        assert set(offered) == {envelope.message_id}
        assert stopped.quarantined == 0 and stopped.quarantine() == []
    finally:
        stopped.close()
    following = NatsTransport([nats_server.url], session_id, create=False)
    following.admit(AGENT, session_id, CAPABILITY)
    try:
        got = Collector()
        following.subscribe(PARENT_INBOX, got)
        assert [e.message_id for e in got.wait_for(1)] == [envelope.message_id]
    finally:
        following.close()


def test_accepted_before_a_server_sigkill_is_delivered_after_its_restart(
    nats_server: NatsServer, session_id: str
) -> None:
    first = NatsTransport([nats_server.url], session_id, request_timeout_s=2.0)
    first.admit(AGENT, session_id, CAPABILITY)
    first.ensure_inbox(PARENT_INBOX)
    accepted = [message(session_id, f"m{index}") for index in range(20)]
    for envelope in accepted:
        first.publish(PARENT_INBOX, envelope)
    nats_server.kill()
    with pytest.raises(SessionUnavailable):
        first.publish(PARENT_INBOX, message(session_id, "while the server is down"))
    first.close()
    nats_server.start().wait_ready()
    second = NatsTransport([nats_server.url], session_id)
    second.admit(AGENT, session_id, CAPABILITY)
    try:
        got = Collector()
        second.subscribe(PARENT_INBOX, got)
        marker = message(session_id, "marker")
        second.publish(PARENT_INBOX, marker)
        received = [item.message_id for item in got.wait_for(21)]
        assert received[:20] == [item.message_id for item in accepted]
        assert received[20] == marker.message_id
    finally:
        second.close()


def test_the_same_envelope_published_to_two_inboxes_reaches_both(
    transport: NatsTransport, session_id: str
) -> None:
    """A message the parent forwards keeps its id: the server's duplicate window (the whole
    stream's) must not take the forwarded copy for a repeat of the one sent to the parent."""
    other = make_id(IdKind.AGENT, "b2b2b2b2")
    transport.ensure_inbox(other)
    to_parent, to_other = Collector(), Collector()
    transport.subscribe(PARENT_INBOX, to_parent)
    transport.subscribe(other, to_other)
    envelope = message(session_id, "forwarded")
    transport.publish(PARENT_INBOX, envelope)
    transport.publish(other, envelope)
    assert [e.message_id for e in to_parent.wait_for(1)] == [envelope.message_id]
    assert [e.message_id for e in to_other.wait_for(1)] == [envelope.message_id]
