"""The NATS JetStream transport beside the file mailbox, in one worker process.

Both subjects are durable the same way: the file mailbox with ``fsync`` on (each envelope and
its directory synced before ``publish`` returns), JetStream with ``sync_interval: always``
(the server fsyncs before it acknowledges). Both keep their files under the same temporary
directory (one disk), and the publisher and the receiver are the same process for both, so the
difference is the transport alone.

- ``delivery``: one envelope at a time, 2-8 ms apart: ``publish`` called -> the receiver's
  handler ran (the publish's own durable write and acknowledgement included).
- ``durable_per_s``: envelopes one after another, each ``publish`` returning only once durable,
  divided by the wall time until the receiver handled the last.
- The floor of both, ``raw``: nats-py alone on the same kind of server, stream and consumer
  (work queue, explicit acks), the same bytes published the same way, each awaiting its
  acknowledgement, and a pull consumer in the same process (and event loop) fetching and
  acking them; no envelope is encoded or checked, no thread is crossed.
- ``failover_s``: a 3-server cluster (R3 stream) on 127.0.0.1; the stream leader is killed with
  SIGKILL while a publisher publishes; the time from the kill to the first publish accepted
  after it. Nothing accepted may be lost or handed over twice (``lost``, ``duplicates``).
"""

from __future__ import annotations

import contextlib
import operator
import random
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from actors.runtime.transport import PARENT_INBOX
from bench_lib.common import latency_summary, new_ids, temp_dir
from protocol.core.errors import SessionUnavailable
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope


class _Sink:
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.arrived: dict[str, int] = {}
        self._cond = threading.Condition()

    def __call__(self, envelope: AnyEnvelope) -> None:
        now = time.perf_counter_ns()
        with self._cond:
            self.ids.append(envelope.message_id)
            self.arrived[envelope.message_id] = now
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 120.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.ids) >= count, timeout):
                raise TimeoutError(f"{len(self.ids)} of {count} envelopes arrived")


def _envelopes(session_id: str, agent_id: str, capability: str, n: int) -> list[MessageEnvelope]:
    from actors.runtime.ids import IdSource

    ids = IdSource()
    return [
        MessageEnvelope(
            message_id=ids.new(IdKind.MESSAGE),
            session_id=session_id,
            sender_id=agent_id,
            target_id=PARENT_ID,
            created_at=0.0,
            capability=capability,
            content=f"envelope {index}",
        )
        for index in range(n)
    ]


def _measure(
    transport: Any, session_id: str, agent: str, capability: str, params: dict[str, Any]
) -> dict[str, Any]:
    sink = _Sink()
    transport.subscribe(PARENT_INBOX, sink)
    rng = random.Random(7)
    latencies: list[int] = []
    for envelope in _envelopes(session_id, agent, capability, params["latency_n"]):
        time.sleep(rng.uniform(0.002, 0.008))  # the pace of an idle session, not a wait
        started = time.perf_counter_ns()
        transport.publish(PARENT_INBOX, envelope)
        sink.wait_for(len(latencies) + 1)
        latencies.append(sink.arrived[envelope.message_id] - started)
    batch = _envelopes(session_id, agent, capability, params["throughput_n"])
    before = len(sink.ids)
    started = time.perf_counter_ns()
    for envelope in batch:
        transport.publish(PARENT_INBOX, envelope)
    sink.wait_for(before + len(batch))
    elapsed = (time.perf_counter_ns() - started) / 1e9
    return {
        "delivery": latency_summary(latencies),
        "durable_per_s": len(batch) / elapsed,
        "duplicates": len(sink.ids) - len(set(sink.ids)),
    }


def _file(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    from actors.transports.mailbox.mailbox import Mailbox

    session_id, agent, _ = new_ids()
    mailbox = Mailbox.create(root / "mailbox", session_id, Settings(fsync=True))
    try:
        mailbox.ensure_inbox(PARENT_INBOX)
        return _measure(mailbox, session_id, agent, "", params)
    finally:
        mailbox.close()


def _nats(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    from actors.transports.nats.server import start_server
    from actors.transports.nats.transport import NatsTransport

    server = start_server(root / "nats")
    try:
        session_id, agent, capability = new_ids()
        transport = NatsTransport([server.url], session_id)
        transport.admit(agent, session_id, capability)
        try:
            return _measure(transport, session_id, agent, capability, params)
        finally:
            transport.close()
    finally:
        server.kill()


def _raw(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    """The floors of ``delivery`` and ``durable_per_s``: what nats-py itself does on this
    machine (module doc), measured as Shepherd's are: one publish at a time, 2-8 ms apart,
    until the receiver has it; then one after another until the receiver had the last."""
    import asyncio

    import msgspec

    from actors.transports.nats.server import start_server
    from actors.transports.nats.setup import inbox_stream

    server = start_server(root / "raw")
    session_id, agent, capability = new_ids()
    n_latency, n_throughput = params["latency_n"], params["throughput_n"]
    payloads = [
        msgspec.json.encode(e)
        for e in _envelopes(session_id, agent, capability, n_latency + n_throughput)
    ]

    async def run() -> tuple[list[int], float]:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig

        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(inbox_stream("RAW", "raw.>", Settings(), 1))
            config = ConsumerConfig(durable_name="parent", ack_policy=AckPolicy.EXPLICIT)
            sub = await js.pull_subscribe("raw.parent", "parent", config=config)
            arrived: dict[int, int] = {}
            got = asyncio.Condition()

            async def receive() -> None:
                while len(arrived) < len(payloads):
                    with contextlib.suppress(asyncio.TimeoutError, nats.errors.TimeoutError):
                        for msg in await sub.fetch(256, timeout=1.0):
                            assert msg.headers is not None  # each payload is sent with its id
                            arrived[int(msg.headers["Nats-Msg-Id"])] = time.perf_counter_ns()
                            await msg.ack()
                        async with got:
                            got.notify_all()

            async def publish(index: int) -> None:
                data = payloads[index]
                await js.publish("raw.parent", data, headers={"Nats-Msg-Id": str(index)})

            receiver = asyncio.create_task(receive())
            rng = random.Random(7)
            latencies = []
            for index in range(n_latency):
                await asyncio.sleep(rng.uniform(0.002, 0.008))  # the pace of an idle session
                started = time.perf_counter_ns()
                await publish(index)
                async with got:
                    await asyncio.wait_for(
                        got.wait_for(partial(operator.contains, arrived, index)), 60
                    )
                latencies.append(arrived[index] - started)
            started_s = time.perf_counter()
            for index in range(n_latency, len(payloads)):
                await publish(index)
            await asyncio.wait_for(receiver, 120)
            return latencies, time.perf_counter() - started_s
        finally:
            await nc.close()

    try:
        latencies, elapsed = asyncio.run(run())
        return {"delivery": latency_summary(latencies), "durable_per_s": n_throughput / elapsed}
    finally:
        server.kill()


def _failover(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    from actors.transports.nats.server import start_cluster
    from actors.transports.nats.transport import NatsTransport, stream_name

    servers = start_cluster(root / "cluster")
    try:
        session_id, agent, capability = new_ids()
        transport = NatsTransport(
            [server.url for server in servers], session_id, replicas=3, request_timeout_s=1.0
        )
        transport.admit(agent, session_id, capability)
        try:
            sink = _Sink()
            transport.subscribe(PARENT_INBOX, sink)
            info = transport._thread.run(transport._js.stream_info(stream_name(session_id)), 30)
            assert info.cluster is not None  # a stream with replicas has a cluster
            leader = next(server for server in servers if server.name == info.cluster.leader)
            sent = _envelopes(session_id, agent, capability, params["failover_n"])
            killed_at = back_at = 0.0
            for index, envelope in enumerate(sent):
                if index == len(sent) // 4:
                    leader.kill()
                    killed_at = time.perf_counter()
                while True:  # not accepted: the sender tries again, with the same message id
                    try:
                        transport.publish(PARENT_INBOX, envelope)
                        break
                    except SessionUnavailable:
                        continue
                if killed_at and not back_at:
                    back_at = time.perf_counter()
            sink.wait_for(len(sent))
            return {
                "failover_s": back_at - killed_at,
                "lost": len({e.message_id for e in sent} - set(sink.ids)),
                "duplicates": len(sink.ids) - len(set(sink.ids)),
            }
        finally:
            transport.close()
    finally:
        for server in servers:
            server.kill()


def nats_job(params: dict[str, Any]) -> dict[str, Any]:
    try:
        from actors.transports.nats.server import nats_server_binary

        nats_server_binary()
    except Exception as exc:
        return {"unavailable": str(exc)}
    with temp_dir("shepherd-bench-nats-") as root:
        order = [("file", _file), ("nats", _nats), ("raw", _raw)]
        if params.get("turn", 0) % 2:
            order.reverse()
        out: dict[str, Any] = {name: run(root / name, params) for name, run in order}
        out["failover"] = _failover(root / "failover", params)
        return out
