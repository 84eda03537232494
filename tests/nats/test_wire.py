"""The transport seam every Shepherd process opens (:mod:`actors.transports.wire`) when the session
runs over NATS: the owner's validator, handlers off the event loop, what a process that did not
create the session may do, one-shot reply inboxes and their sweep, a server out of reach."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.nats.server import NatsServer, free_port
from actors.transports.nats.transport import NatsTransport
from actors.transports.wire import open_reply_inbox, open_transport
from protocol.core.errors import ForbiddenSender, InvalidHandle, SessionUnavailable, ShepherdError
from protocol.core.ids import IdKind, make_id
from protocol.wire.envelopes import AnyEnvelope
from tests.nats.test_transport import AGENT, CAPABILITY, WAIT_S, Collector, message

pytestmark = pytest.mark.processes

OTHER = make_id(IdKind.AGENT, "b2b2b2b2")


class Rejections:
    def __init__(self) -> None:
        self.items: list[tuple[str, AnyEnvelope | None, ShepherdError, bool]] = []
        self.arrived = threading.Event()

    def __call__(
        self, inbox: str, env: AnyEnvelope | None, error: ShepherdError, authenticated: bool
    ) -> None:
        self.items.append((inbox, env, error, authenticated))
        self.arrived.set()


def _only_agent(inbox: str, env: AnyEnvelope) -> None:
    if env.sender_id != AGENT or env.capability != CAPABILITY:
        raise ForbiddenSender(f"unknown sender {env.sender_id!r}")


@pytest.fixture
def parent(nats_server: NatsServer, session_id: str) -> Iterator[Any]:
    rejected = Rejections()
    made = open_transport(
        nats_server.url, session_id, create=True, validate=_only_agent, on_reject=rejected
    )
    made.ensure_inbox(PARENT_INBOX)
    made.ensure_inbox(OTHER)
    try:
        yield made, rejected
    finally:
        made.close()


def test_the_owners_validator_decides_and_a_refusal_is_told_without_the_capability(
    parent: Any, session_id: str
) -> None:
    transport, rejected = parent
    assert isinstance(transport, NatsTransport)
    got = Collector()
    assert transport.wake_mode(PARENT_INBOX) is None
    transport.subscribe(PARENT_INBOX, got)
    assert transport.wake_mode(PARENT_INBOX) == "nats"
    forged = message(session_id, "forged", sender_id=OTHER, capability="f" * 32)
    transport.publish(PARENT_INBOX, forged)
    good = message(session_id, "good")
    transport.publish(PARENT_INBOX, good)
    assert [e.message_id for e in got.wait_for(1)] == [good.message_id]
    assert rejected.arrived.wait(WAIT_S)
    ((inbox, env, error, authenticated),) = rejected.items
    assert (inbox, authenticated, error.code) == (PARENT_INBOX, False, "forbidden_sender")
    assert env is not None and env.message_id == forged.message_id and env.capability == ""
    (record, _data), *_ = transport.quarantine()
    assert record.code == "forbidden_sender"


def test_a_handler_may_publish_through_the_transport_it_runs_on(
    parent: Any, session_id: str
) -> None:
    """Handlers run off the event loop: the parent's handler waits for its broker, which
    publishes through the same transport (on the loop, that waited for itself)."""
    transport, rejected = parent
    forwarded = Collector()
    transport.subscribe(OTHER, forwarded)

    def forward(env: AnyEnvelope) -> None:
        transport.publish(OTHER, msgspec.structs.replace(env, capability=CAPABILITY))

    transport.subscribe(PARENT_INBOX, forward)
    sent = message(session_id, "pass it on")
    started = time.monotonic()
    transport.publish(PARENT_INBOX, sent)
    assert [e.message_id for e in forwarded.wait_for(1)] == [sent.message_id]
    assert time.monotonic() - started < 4.0  # not after a publish timed out (5 s) and retried
    assert rejected.items == [] and transport.quarantined == 0


def test_a_process_that_did_not_create_the_session_makes_only_its_reply_inbox(
    parent: Any, nats_server: NatsServer, session_id: str
) -> None:
    child = open_transport(nats_server.url, session_id)
    try:
        with pytest.raises(ForbiddenSender, match="only the session parent"):
            child.ensure_inbox(make_id(IdKind.AGENT, "c3c3c3c3"))
        with pytest.raises(InvalidHandle, match="no inbox"):
            child.subscribe(make_id(IdKind.AGENT, "c3c3c3c3"), Collector())
        owner = make_id(IdKind.MESSAGE, "d4d4d4d4")
        box = open_reply_inbox(child, owner)
        answers = Collector()
        child.subscribe(owner, answers)
        transport, _ = parent
        transport.publish(owner, message(session_id, "your answer"))
        assert answers.wait_for(1)[0].content == "your answer"  # type: ignore[union-attr]
        child.publish(PARENT_INBOX, message(session_id, "from a child"))  # it may publish
    finally:
        child.close()  # its reply inbox goes with it: nobody else would read it
    box.remove()  # after close: nothing left to do, and it never raises
    probe = open_transport(nats_server.url, session_id)  # asks the server, not a cache
    try:
        assert not probe.has_inbox(owner)
    finally:
        probe.close()


def test_an_answer_left_in_a_removed_reply_inbox_is_swept_and_a_read_one_waits(
    parent: Any, nats_server: NatsServer, session_id: str
) -> None:
    transport, _ = parent
    caller = open_transport(nats_server.url, session_id)
    try:
        gone = make_id(IdKind.MESSAGE, "e5e5e5e5")
        open_reply_inbox(caller, gone)
        transport.publish(gone, message(session_id, "late"))
        waiting = make_id(IdKind.MESSAGE, "f6f6f6f6")
        open_reply_inbox(caller, waiting)
        transport.publish(waiting, message(session_id, "unread yet"))
        assert transport.unread_answers() == 2
        _drop_consumer(nats_server.url, session_id, gone)  # as the server does to a dead caller
        assert transport.sweep_reply_inboxes() == [gone]  # only the one nobody reads
        assert transport.unread_answers() == 1  # the live caller's answer is kept
        assert transport.sweep_reply_inboxes() == []
        with pytest.raises(InvalidHandle, match="no inbox"):  # not remembered as existing
            transport.publish(gone, message(session_id, "later still"))
    finally:
        caller.close()
    assert transport.unread_answers() == 0


def _drop_consumer(url: str, stream: str, name: str) -> None:
    import asyncio

    import nats

    async def drop() -> None:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().delete_consumer(stream, name)
        finally:
            await nc.close()

    asyncio.run(drop())


def test_an_unreachable_server_is_session_unavailable_naming_it(session_id: str) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(SessionUnavailable) as refused:
        open_transport(url, session_id)
    assert url in refused.value.message
    assert time.monotonic() - started < 30


def test_a_child_command_with_the_server_out_of_reach_fails_in_bounded_time(
    session_id: str,
) -> None:
    env = {
        **os.environ,
        "SHEPHERD_SESSION_ID": session_id,
        "SHEPHERD_AGENT_ID": AGENT,
        "SHEPHERD_CAPABILITY": CAPABILITY,
        "SHEPHERD_MAILBOX": f"nats://127.0.0.1:{free_port()}",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "actors.child.cli", "message", "shepherd", "hi", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )
    error = msgspec.json.decode(done.stdout)["error"]
    assert (done.returncode, error["code"]) == (2, "session_unavailable"), done
    assert env["SHEPHERD_MAILBOX"] in error["message"]
    assert time.monotonic() - started < 60


def test_naming_a_cluster_of_three_keeps_the_session_replicated_on_three(
    nats_cluster: list[NatsServer], session_id: str
) -> None:
    import asyncio

    import nats

    url = "nats://" + ",".join(f"127.0.0.1:{server.port}" for server in nats_cluster)
    transport = open_transport(url, session_id, create=True)
    try:
        transport.ensure_inbox(PARENT_INBOX)
    finally:
        transport.close()

    async def replicas() -> tuple[int, int]:
        nc = await nats.connect(nats_cluster[0].url)
        try:
            js = nc.jetstream()
            stream = await js.stream_info(session_id)
            consumer = await js.consumer_info(session_id, PARENT_INBOX)
            return stream.config.num_replicas or 1, consumer.config.num_replicas or 0
        finally:
            await nc.close()

    stream, consumer = asyncio.run(replicas())
    assert stream == 3 and consumer in (0, 3)  # 0: the consumer follows its stream


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"transport": "ftp://host:1"}, "scheme 'ftp'"),
        ({"transport": "nats://host:1", "mailbox_root": "mbox"}, "not both"),
        ({"transport": "nats://" + ",".join(["h:1"] * 17)}, "at most 16"),
    ],
)
def test_the_python_api_refuses_a_bad_transport_before_making_anything(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], words: str
) -> None:
    from actors.session.supervisor import Supervisor

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with pytest.raises(ShepherdError, match=words):
        Supervisor(tmp_path / "session", **kwargs)
    assert not (tmp_path / "session").exists()


def test_a_supervisor_whose_servers_are_out_of_reach_leaves_no_thread_behind(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actors.session.supervisor import Supervisor

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    before = {t.ident for t in threading.enumerate()}
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(SessionUnavailable, match=url):
        Supervisor(tmp_path / "session", transport=url)
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == []
    assert not (tmp_path / "session" / "session.json").exists()
