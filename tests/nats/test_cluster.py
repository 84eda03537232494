"""Three ``nats-server``s on 127.0.0.1 with a replicated (R3) session stream: SIGKILL of the
stream's leader in the middle of a run loses nothing that was accepted and hands nothing over
twice, and service comes back."""

from __future__ import annotations

import threading
import time

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.nats.server import NatsServer
from actors.transports.nats.transport import NatsTransport, stream_name
from protocol.core.errors import SessionUnavailable
from tests.nats.test_transport import AGENT, CAPABILITY, Collector, message

pytestmark = pytest.mark.processes

RUN = 300
KILL_AFTER = 100
#: how long a publish may keep failing while the cluster elects a new leader
FAILOVER_CEILING_S = 60.0


def leader_of(transport: NatsTransport, session_id: str) -> str:
    info = transport._thread.run(transport._js.stream_info(stream_name(session_id)), 30)
    assert info.cluster is not None and info.cluster.leader
    return str(info.cluster.leader)


def test_leader_sigkill_mid_run_loses_nothing_and_repeats_nothing(
    nats_cluster: list[NatsServer], session_id: str
) -> None:
    transport = NatsTransport(
        [server.url for server in nats_cluster], session_id, replicas=3, request_timeout_s=2.0
    )
    transport.admit(AGENT, session_id, CAPABILITY)
    try:
        got = Collector()
        transport.subscribe(PARENT_INBOX, got)
        leader = leader_of(transport, session_id)
        victim = next(server for server in nats_cluster if server.name == leader)
        sent = [message(session_id, f"m{index}") for index in range(RUN)]
        outage = {"refused": 0, "longest": 0.0}
        killed = threading.Event()
        for index, envelope in enumerate(sent):
            if index == KILL_AFTER:
                victim.kill()
                killed.set()
            started = time.monotonic()
            while True:  # a refused publish was not accepted: the sender tries again
                try:
                    transport.publish(PARENT_INBOX, envelope)
                    break
                except SessionUnavailable:
                    outage["refused"] += 1
                    assert time.monotonic() - started < FAILOVER_CEILING_S
            outage["longest"] = max(outage["longest"], time.monotonic() - started)
        received = got.wait_for(RUN, timeout=FAILOVER_CEILING_S)
        assert killed.is_set()
        ids = [item.message_id for item in received]
        assert len(ids) == RUN == len(set(ids)), "an envelope was handed over twice"
        assert set(ids) == {envelope.message_id for envelope in sent}
        assert leader_of(transport, session_id) != leader
    finally:
        transport.close()
