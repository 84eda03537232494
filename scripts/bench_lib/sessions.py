"""Worker jobs over an in-process session: notification latency, scale, the pykka baseline.

A session here is the production wiring minus the filesystem: ``Session`` on a
``ThreadedRuntime`` with an ``InMemoryTransport`` and ``SimLauncher`` agents (simulated scripted
agents, each an actor). Every agent gets one task and every task one watcher. The agents then
stay quiet; the benchmark speaks for them as a *puppet*: it publishes each agent's
``task_done`` envelope into the parent inbox itself, exactly as the agent would, so the moment
the done is handed to the transport is known and the rate is the benchmark's to choose.

Latency is measured from just before ``transport.publish(done)`` to the moment the sink receives
the ``TaskCompletion`` carrying that task; the 25 ms coalescing window is part of the figure.

``durable`` sessions (the ``settle`` job) are wired as ``shepherd serve`` wires its own, minus
the agents' processes: the journal is a file, fsync'd on every write, and the parent's inbox is
received in batches (what arrived since the last receiving pass, at most 256, handed to the
session in one ask and acknowledged after it returned) by one receiving thread, like the file
mailbox's. The plain sessions keep the journal in memory and hand each envelope over alone.
"""

from __future__ import annotations

import gc
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pykka

from actors.records.journal_file import FileJournal
from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import PARENT_INBOX, BatchHandler, InMemoryTransport, Refusals
from actors.session.session import Session
from actors.testing.simagent import SimLauncher
from bench_lib.common import latency_summary, now_ns, os_threads, rss_bytes
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import AnyNotification, TaskCompletion
from protocol.scripted.script import parse_script
from protocol.wire.envelopes import AnyEnvelope, RuntimeEnvelope, TaskDoneEnvelope

#: each simulated agent takes its task, then waits for anything (it never calls done itself)
QUIET_SCRIPT = {"steps": [{"await": "task"}, {"await": "any"}]}
WAIT_S = 300.0


class ReadyCountingTransport(InMemoryTransport):
    """The in-memory transport, counting the ``ready`` each agent publishes when it is up."""

    def __init__(self, expected: int) -> None:
        super().__init__()
        self._expected = expected
        self._ready: set[str] = set()
        self._lock = threading.Lock()
        self.all_ready = threading.Event()

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        if inbox == PARENT_INBOX:
            self._count_ready(envelope)
        super().publish(inbox, envelope)

    def _count_ready(self, envelope: AnyEnvelope) -> None:
        if isinstance(envelope, RuntimeEnvelope) and envelope.event == "ready":
            with self._lock:
                self._ready.add(envelope.sender_id)
                if len(self._ready) >= self._expected:
                    self.all_ready.set()


#: envelopes of one receiving pass at most (the file mailbox's ``BATCH_MAX``)
BATCH_MAX = 256


class _Sub:
    def __init__(self, cancel: Any) -> None:
        self.cancel = cancel


class BatchReceivingTransport(ReadyCountingTransport):
    """The parent's inbox received as the file mailbox receives it: publishing queues the
    envelope (after the same checks); one receiving thread hands what queued up since its last
    pass, at most :data:`BATCH_MAX`, to the batch handler in one call."""

    def __init__(self, expected: int) -> None:
        super().__init__(expected)
        self._queue: deque[AnyEnvelope] = deque()
        self._wake = threading.Condition()
        self._handler: BatchHandler | None = None
        self._stop = False
        self.refused = 0

    def subscribe_batch(self, inbox: str, handler: BatchHandler) -> _Sub:
        assert inbox == PARENT_INBOX
        self._handler = handler
        threading.Thread(target=self._receive, name="bench-receiver", daemon=True).start()
        return _Sub(self._cancel)

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        if inbox != PARENT_INBOX or self._handler is None:
            super().publish(inbox, envelope)
            return
        self._count_ready(envelope)
        checked = self.gate.check(inbox, envelope)
        if checked is not None:
            with self._wake:
                self._queue.append(checked)
                self._wake.notify()

    def _receive(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                take = min(len(self._queue), BATCH_MAX)
                batch: Sequence[AnyEnvelope] = [self._queue.popleft() for _ in range(take)]
            assert self._handler is not None
            refused: Refusals | None = self._handler(batch)
            self.refused += len(refused or {})

    def _cancel(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()


class CompletionSink:
    """Records when each task's completion reached the parent's sink."""

    def __init__(self, expected: int) -> None:
        self.arrived: dict[str, int] = {}
        self.notifications = 0
        self._expected = expected
        self._lock = threading.Lock()
        self.all_arrived = threading.Event()

    def __call__(self, note: AnyNotification) -> None:
        if not isinstance(note, TaskCompletion):
            return
        at = now_ns()
        with self._lock:
            self.notifications += 1
            for result in note.results:
                self.arrived.setdefault(result.task_id, at)
            if len(self.arrived) >= self._expected:
                self.all_arrived.set()


def done_envelope(
    message_id: str, session_id: str, agent_id: str, capability: str, task_id: str
) -> TaskDoneEnvelope:
    """An agent's ``task_done`` of its task, completed, stamped now (a benchmark stamps it
    again when it sends it, as a child does)."""
    return TaskDoneEnvelope(
        message_id=message_id,
        session_id=session_id,
        sender_id=agent_id,
        target_id=PARENT_ID,
        created_at=time.time(),
        capability=capability,
        task_id=task_id,
        status="completed",
        summary="done",
    )


class Bench:
    """One session with ``n`` agents, each with one task and one watcher on it (``durable``:
    a fsync'd journal file and batched receiving, see the module's docstring)."""

    def __init__(self, n: int, durable: bool = False) -> None:
        self.n = n
        self.runtime = ThreadedRuntime()
        self.transport = BatchReceivingTransport(n) if durable else ReadyCountingTransport(n)
        self.launcher = SimLauncher(self.runtime, self.transport)
        self.sink = CompletionSink(n)
        self._dir = tempfile.TemporaryDirectory(prefix="shepherd-bench-") if durable else None
        journal = FileJournal(Path(self._dir.name) / "journal.jsonl") if self._dir else None
        self.session = Session(
            self.runtime,
            self.transport,
            self.launcher,
            sink=self.sink,
            journal=journal,
            sync_inbound=durable,
        )
        self.tasks: list[tuple[str, str, str]] = []  # (name, agent id, task id)
        self.phases: dict[str, float] = {}

    def populate(self) -> None:
        """Spawn, delegate, watch; return once every agent is up and the broker caught up."""
        script = parse_script(QUIET_SCRIPT)
        session = self.session
        mark = time.perf_counter()
        agents = [session.spawn(f"a{i}", script=script) for i in range(self.n)]
        self.phases["spawn_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        delegated = [session.delegate(a.agent_id, "benchmark task") for a in agents]
        self.phases["delegate_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        for d in delegated:
            session.watch(d.task_id)
        self.phases["watch_s"] = time.perf_counter() - mark
        mark = time.perf_counter()
        if not self.transport.all_ready.wait(WAIT_S):
            raise RuntimeError("the simulated agents did not all start")
        session.status()  # the broker has handled every ready before it answers
        self.phases["ready_wait_s"] = time.perf_counter() - mark
        self.tasks = [
            (a.name, a.agent_id, d.task_id) for a, d in zip(agents, delegated, strict=True)
        ]

    def done_envelopes(self) -> list[TaskDoneEnvelope]:
        """Each agent's ``task_done``, built ahead (building it is the child's work)."""
        ids = self.runtime.ids
        session_id, driver = self.session.session_id, self.launcher.driver
        return [
            done_envelope(
                ids.new(IdKind.MESSAGE),
                session_id,
                agent_id,
                driver(name).identity.capability,
                task_id,
            )
            for name, agent_id, task_id in self.tasks
        ]

    def settle(self, rate: float | None) -> dict[str, Any]:
        """Publish every done (paced at ``rate`` per second, or flat out) and wait for every
        completion; per-task latency from the hand-off to the sink."""
        envelopes = self.done_envelopes()
        sent: dict[str, int] = {}
        publish = self.transport.publish
        start = time.perf_counter()
        for i, built in enumerate(envelopes):
            if rate is not None:
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)  # pacing: the offered rate is the workload
            assert built.task_id is not None
            # stamped as the child stamps it, when it sends it (a watcher's window counts
            # from it): not when it was built ahead
            envelope = msgspec.structs.replace(built, created_at=time.time())
            sent[built.task_id] = now_ns()
            publish(PARENT_INBOX, envelope)
        offered_s = time.perf_counter() - start
        complete = self.sink.all_arrived.wait(WAIT_S)
        arrived = self.sink.arrived
        samples = [arrived[t] - s for t, s in sent.items() if t in arrived]
        last = max(arrived.values(), default=0)
        return {
            "complete": complete,
            "settled": len(samples),
            "notifications": self.sink.notifications,
            "offered_rate": len(envelopes) / offered_s if offered_s > 0 else None,
            "settle_all_s": (last - min(sent.values())) / 1e9 if samples else None,
            "first_ms": min(samples) / 1e6 if samples else None,
            **latency_summary(samples),
        }

    def close(self) -> None:
        self.session.shutdown()
        if self._dir is not None:
            self._dir.cleanup()


def notify_job(params: dict[str, Any]) -> dict[str, Any]:
    """Settlement → watcher notification latency at each offered rate (a fresh session each)."""
    out = []
    for spec in params["rates"]:
        bench = Bench(spec["count"])
        try:
            bench.populate()
            out.append({"rate": spec["rate"], **bench.settle(float(spec["rate"]))})
        finally:
            bench.close()
        gc.collect()
    return {"rates": out}


def scale_job(params: dict[str, Any]) -> dict[str, Any]:
    """``n`` agents, ``n`` live tasks and ``n`` watchers in one session: start time (session
    built, all spawned, delegated, watched, every agent up), memory per actor (RSS growth over
    that, after a GC, divided by the actors the runtime holds), OS threads (the most seen while
    live or settling); then all of them settle at once, flat out."""
    n = params["n"]
    gc.collect()
    rss0, threads0 = rss_bytes(), os_threads()
    start = time.perf_counter()
    bench = Bench(n)
    try:
        bench.populate()
        start_s = time.perf_counter() - start
        actors = bench.runtime.actor_count
        gc.collect()
        rss1 = rss_bytes()
        python_threads, threads = threading.active_count(), os_threads()
        settled = bench.settle(None)
        threads_settling = os_threads()  # the timer thread exists once watchers coalesce
    finally:
        bench.close()
    return {
        "n": n,
        "start_s": start_s,
        "phases": bench.phases,
        "actors": actors,
        "rss_delta_mb": (rss1 - rss0) / 2**20,
        "bytes_per_actor": (rss1 - rss0) / actors,
        "python_threads": python_threads,
        "os_threads": max(threads, threads_settling),
        "os_threads_live": threads,
        "os_threads_after_settling": threads_settling,
        "os_threads_before": threads0,
        "settle": settled,
    }


def settle_job(params: dict[str, Any]) -> dict[str, Any]:
    """``n`` agents, each with a task and a watcher, in a ``durable`` session or not; all the
    tasks settle at once, flat out: latency of each completion, and the journal writes."""
    n, durable = params["n"], params["durable"]
    bench = Bench(n, durable=durable)
    try:
        bench.populate()
        gc.collect()
        settled = bench.settle(None)
    finally:
        bench.close()
    refused = getattr(bench.transport, "refused", 0)
    return {"n": n, "durable": durable, "refused": refused, **settled}


def settle_floor_job(params: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``settle``: what any design must do to tell ``n`` settlements that arrive at
    once, with none of the session's own work. Timed: reading and decoding the ``n`` done
    envelopes from a mailbox directory (one file each, as the file mailbox keeps them), one
    journal line each written in ONE write and ONE fsync; then the coalescing window (25 ms) is
    added. The ``settle`` job's in-memory transport does not read files, so this floor holds
    work that the measured session skips: a ratio below 1 is possible."""
    from protocol.core.ids import make_id
    from protocol.wire.envelopes import decode_envelope, encode_envelope

    n = params["n"]
    window_ms = float(params.get("window_ms", 25.0))
    with tempfile.TemporaryDirectory(prefix="shepherd-floor-") as tmp:
        inbox = Path(tmp) / "inbox" / "new"
        inbox.mkdir(parents=True)
        session_id = make_id(IdKind.SESSION, "f" * 16)
        for i in range(n):
            token = f"{i:016x}"
            env = done_envelope(
                make_id(IdKind.MESSAGE, token),
                session_id,
                make_id(IdKind.AGENT, token),
                "c",
                make_id(IdKind.TASK, token),
            )
            (inbox / env.message_id).write_bytes(encode_envelope(env))
        journal = Path(tmp) / "journal.jsonl"
        gc.collect()
        started = time.perf_counter()
        lines = []
        with os.scandir(inbox) as entries:
            for entry in entries:
                with open(entry.path, "rb") as file:
                    received = decode_envelope(file.read())
                lines.append(encode_envelope(received) + b"\n")
        fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, b"".join(lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        work_ms = (time.perf_counter() - started) * 1000.0
    return {"n": n, "work_ms": work_ms, "floor_ms": work_ms + window_ms}


def create_job(params: dict[str, Any]) -> dict[str, Any]:
    """``n`` tasks, each watched, created in a session whose ``n`` agents are already up:
    ``batched`` with ``delegate_many(items, watch=True)`` of ``batch`` items per call (one
    broker message and one journal write per call, one watcher per call), else one by one
    (``delegate`` then ``watch`` per task: the previous path, the baseline). Only the creation
    is timed; the broker has handled everything when the last call returns (each call is
    answered by it). ``durable``: a session wired as ``serve`` wires its own (the module's
    docstring)."""
    n, batch, batched = params["n"], params["batch"], params["batched"]
    bench = Bench(n, durable=params.get("durable", False))
    try:
        script = parse_script(QUIET_SCRIPT)
        session = bench.session
        agents = [session.spawn(f"a{i}", script=script).agent_id for i in range(n)]
        if not bench.transport.all_ready.wait(WAIT_S):
            raise RuntimeError("the simulated agents did not all start")
        session.status()
        gc.collect()
        actors_before = bench.runtime.actor_count
        start = time.perf_counter()
        cpu = time.process_time()
        if batched:
            accepted = 0
            for i in range(0, n, batch):
                items = [{"target": a, "task": "benchmark task"} for a in agents[i : i + batch]]
                got = session.delegate_many(items, watch=True)
                accepted += sum(t is not None for t in got.task_ids)
        else:
            accepted = 0
            for a in agents:
                session.watch(session.delegate(a, "benchmark task").task_id)
                accepted += 1
        create_s = time.perf_counter() - start
        cpu_s = time.process_time() - cpu
        actors_added = bench.runtime.actor_count - actors_before
    finally:
        bench.close()
    return {
        "n": n,
        "batch": batch if batched else 1,
        "batched": batched,
        "accepted": accepted,
        "create_s": create_s,
        "cpu_s": cpu_s,
        "actors_added": actors_added,
    }


class _Plain(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def pykka_baseline_job(params: dict[str, Any]) -> dict[str, Any]:
    """``n`` plain ``pykka.ThreadingActor``s (one OS thread each): start time, memory, threads."""
    n = params["n"]
    gc.collect()
    rss0 = rss_bytes()
    start = time.perf_counter()
    refs = [_Plain.start() for _ in range(n)]
    start_s = time.perf_counter() - start
    try:
        for ref in refs[:: max(1, n // 100)]:  # a sample of them answer: they are running
            ref.ask("ping", timeout=60)
        gc.collect()
        rss1 = rss_bytes()
        python_threads, threads = threading.active_count(), os_threads()
    finally:
        futures = [ref.stop(block=False) for ref in refs]
        for future in futures:
            future.get(timeout=60)
    return {
        "n": n,
        "start_s": start_s,
        "actors": n,
        "rss_delta_mb": (rss1 - rss0) / 2**20,
        "bytes_per_actor": (rss1 - rss0) / n,
        "python_threads": python_threads,
        "os_threads": threads,
    }
