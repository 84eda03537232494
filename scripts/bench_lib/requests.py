"""Worker job: what one request costs the broker once a session has made many of them.

The broker keeps the session's requests (a message sent with ``expects_reply`` opens one; its
reply closes it) in ``protocol.records.request_table.RequestTable``: pending requests, the last
``Settings.closed_requests_kept`` closed ones, and the wait-for edges of the pending ones
counted as they open and close, so checking a new request for a wait cycle costs the size of
the graph of agents. The baseline, :class:`PreviousDesignTable`, is *the previous design*,
reproduced here only to measure against it (never used by Shepherd itself): the wait-for graph
rebuilt from every request ever made on each new request, and closed requests kept forever.
It is injected into the broker actor of an otherwise identical session before any request.

Why this workload: the production wiring minus the filesystem, as in ``bench_lib/sessions.py``
(``Session`` on ``ThreadedRuntime`` with an ``InMemoryTransport`` and ``SimLauncher`` agents),
with the benchmark speaking for the agents as a *puppet*: it publishes each agent's question and
reply into the parent inbox exactly as the agent would. The journal and the task notes are
discarded (in production they are appended to files; kept in memory they would grow with every
request in both designs alike), so what grows is the broker's own state.

The load: ``AGENTS`` agents, each with one task. First ``AGENTS - 1`` standing questions form a
chain ``a00 -> a01 -> ... -> a19`` that stays pending until the end, so every cycle check walks
a real wait-for graph; then questions from a random agent to a random higher-numbered one (so no
question ever closes a cycle: no cycle report in either design), one request at a time: the
question is published, its target answers it as soon as it is handed to its inbox, and the next
question goes once the reply is handed to the asker's inbox. ``requests`` counts every question,
the standing ones included; the standing ones are answered at the end, before the table is
counted.

Measured, per request, over the last ``window`` requests:

- ``open_cpu_ms``: CPU time of the broker's thread handling the question (``Inbound`` of a
  ``MessageEnvelope`` with ``expects_reply``: sender check, the request opened and checked for
  a wait cycle, journaled, the question forwarded, the receipt sent) — ``time.thread_time``
  around the broker's ``on_receive``, so other threads of a busy machine do not count;
- ``round_trip_ms``: wall time from just before the question is published to the moment its
  reply is handed to the asker's inbox (broker, agent actors and the puppet's wake-ups);
- ``held``: ``len(broker.requests)`` at the end, after every request closed (memory held).
"""

from __future__ import annotations

import gc
import random
import statistics
import threading
import time
from collections.abc import Iterator, KeysView
from typing import Any

from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import PARENT_INBOX
from actors.session.broker import BrokerActor
from actors.session.messages import Inbound
from actors.session.session import Session
from actors.testing.simagent import SimLauncher
from bench_lib.report import PREVIOUS_DESIGN, SHEPHERD
from bench_lib.sessions import QUIET_SCRIPT, ReadyCountingTransport
from protocol.core.ids import IdKind
from protocol.records.notifications import AnyNotification, WaitCycle
from protocol.records.request_table import RequestTable
from protocol.records.requests import RequestRecord
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord
from protocol.scripted.script import parse_script
from protocol.wire.envelopes import AckEnvelope, AnyEnvelope, MessageEnvelope, ReplyEnvelope

AGENTS = 20
WAIT_S = 60.0
DESIGNS = (SHEPHERD, PREVIOUS_DESIGN)


class PreviousDesignTable(RequestTable):
    """The previous design (baseline only): every request ever made kept in one dict, closed
    ones never forgotten, and the wait-for edges rebuilt from all of them on every new request
    — what ``actors/broker_routing.py`` did before ``RequestTable``:
    ``find_cycle([(r.sender_id, r.target_id) for r in requests.values() if r.pending], ...)``.
    """

    def __init__(self) -> None:
        super().__init__(closed_kept=0)
        mine = set(vars(PreviousDesignTable))
        grown = sorted(
            name
            for name, value in vars(RequestTable).items()
            if callable(value) and not name.startswith("_") and name not in mine
        )
        if grown:  # the baseline would silently use the new design's half-empty state
            raise RuntimeError(f"RequestTable grew {grown}; reproduce them in the baseline")
        self._all: dict[str, RequestRecord] = {}

    def __getitem__(self, request_id: str) -> RequestRecord:
        return self._all[request_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def put(self, record: RequestRecord) -> None:
        self._all[record.request_id] = record

    def pending(self) -> list[RequestRecord]:
        return [r for r in self._all.values() if r.pending]

    def wait_edges(self) -> KeysView[tuple[str, str]]:
        # rebuilt from every request ever made, as before (a list; find_cycle only iterates)
        return [(r.sender_id, r.target_id) for r in self._all.values() if r.pending]  # type: ignore[return-value]


class NullJournal:
    def __init__(self) -> None:
        self.count = 0

    def append(self, record: Any) -> None:
        self.count += 1


class NullNotes:
    def open(self, record: TaskRecord) -> None:
        pass

    def append(self, task_id: str, line: str) -> None:
        pass

    def finalise(self, record: TaskRecord) -> None:
        pass


class TrackingTransport(ReadyCountingTransport):
    """Notes when the awaited question reaches its target's inbox and when its reply reaches
    the asker's (the agent actors hand envelopes to agent inboxes through ``publish``)."""

    def __init__(self, expected: int) -> None:
        super().__init__(expected)
        self._question_id = ""
        self.question_arrived = threading.Event()
        self.reply_arrived = threading.Event()
        self.reply_at = 0
        self.late_replies = 0
        self.refused: list[str] = []

    def expect(self, question_id: str) -> None:
        self.question_arrived.clear()
        self.reply_arrived.clear()
        self._question_id = question_id

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        if inbox != PARENT_INBOX:
            if isinstance(envelope, ReplyEnvelope):
                if envelope.late:
                    self.late_replies += 1
                if envelope.reply_to == self._question_id:
                    self.reply_at = time.perf_counter_ns()
                    self.reply_arrived.set()
            elif isinstance(envelope, MessageEnvelope):
                if envelope.message_id == self._question_id:
                    self.question_arrived.set()
            elif isinstance(envelope, AckEnvelope) and not envelope.accepted:
                self.refused.append(str(envelope.error))
        super().publish(inbox, envelope)


class CycleCounter:
    def __init__(self) -> None:
        self.cycles = 0

    def __call__(self, note: AnyNotification) -> None:
        if isinstance(note, WaitCycle):
            self.cycles += 1


def _time_questions(broker: BrokerActor) -> dict[str, tuple[int, int]]:
    """Wrap the broker actor's ``on_receive`` (this instance only): for each question with
    ``expects_reply``, (CPU ns of the broker's thread, wall ns) spent handling it."""
    handled: dict[str, tuple[int, int]] = {}
    receive = broker.on_receive

    def timed(message: Any) -> Any:
        env = message.envelope if isinstance(message, Inbound) else None
        if not (isinstance(env, MessageEnvelope) and env.expects_reply):
            return receive(message)
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return receive(message)
        finally:
            handled[env.message_id] = (
                time.thread_time_ns() - cpu,
                time.perf_counter_ns() - wall,
            )

    broker.on_receive = timed  # type: ignore[method-assign]
    return handled


def _summary(values_ns: list[int]) -> dict[str, float]:
    ordered = sorted(values_ns)
    return {
        "mean_ms": statistics.fmean(values_ns) / 1e6,
        "p50_ms": ordered[len(ordered) // 2] / 1e6,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e6,
        "max_ms": ordered[-1] / 1e6,
    }


def requests_job(params: dict[str, Any]) -> dict[str, Any]:
    design, total, window = params["design"], params["requests"], params["window"]
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}")
    loop_n = total - (AGENTS - 1)
    if loop_n < window or window < 1:
        raise ValueError(f"{total} requests leave fewer than the window ({window}) measured")
    rng = random.Random(params.get("seed", 0))
    settings = Settings()
    runtime = ThreadedRuntime()
    transport = TrackingTransport(AGENTS)
    launcher = SimLauncher(runtime, transport)
    cycles = CycleCounter()
    session = Session(
        runtime,
        transport,
        launcher,
        settings=settings,
        sink=cycles,
        journal=NullJournal(),
        notes=NullNotes(),
    )
    try:
        script = parse_script(QUIET_SCRIPT)
        agents = [session.spawn(f"a{i:02d}", script=script) for i in range(AGENTS)]
        for agent in agents:
            session.delegate(agent.agent_id, "answer and ask questions")
        if not transport.all_ready.wait(WAIT_S):
            raise RuntimeError("the simulated agents did not all start")
        session.status()  # the broker has handled every ready before it answers
        actor = session.broker._actor_weakref()
        assert isinstance(actor, BrokerActor)
        broker: BrokerActor = actor
        if design == PREVIOUS_DESIGN:
            table = PreviousDesignTable()
            for record in broker.state.requests.values():
                table.put(record)
            broker.state.requests = table  # before any request; the broker is idle here
        handled = _time_questions(broker)
        caps = [launcher.driver(a.name).identity.capability for a in agents]
        ids, session_id = runtime.ids, session.session_id

        def envelopes(asker: int, target: int, text: str) -> tuple[MessageEnvelope, ReplyEnvelope]:
            question = MessageEnvelope(
                message_id=ids.new(IdKind.MESSAGE),
                session_id=session_id,
                sender_id=agents[asker].agent_id,
                target_id=agents[target].agent_id,
                created_at=time.time(),
                capability=caps[asker],
                content=text,
                expects_reply=True,
            )
            reply = ReplyEnvelope(
                message_id=ids.new(IdKind.MESSAGE),
                session_id=session_id,
                sender_id=agents[target].agent_id,
                target_id=agents[asker].agent_id,
                created_at=time.time(),
                capability=caps[target],
                content=f"answer to {text}",
                reply_to=question.message_id,
            )
            return question, reply

        def wait(event: threading.Event, what: str) -> None:
            if not event.wait(WAIT_S):
                raise RuntimeError(f"{what} not delivered in {WAIT_S} s ({transport.refused[:3]})")

        publish = transport.publish
        standing = []
        for i in range(AGENTS - 1):  # the chain a00 -> a01 -> ... -> a19, pending to the end
            question, reply = envelopes(i, i + 1, f"standing question {i}")
            transport.expect(question.message_id)
            publish(PARENT_INBOX, question)
            wait(transport.question_arrived, "a standing question")
            standing.append(reply)

        gc.collect()
        started = time.perf_counter()
        asked: list[str] = []
        round_trips: list[int] = []
        for n in range(loop_n):
            asker = rng.randrange(AGENTS - 1)
            target = rng.randrange(asker + 1, AGENTS)  # downhill: never closes a cycle
            question, reply = envelopes(asker, target, f"question {n}")
            transport.expect(question.message_id)
            sent = time.perf_counter_ns()
            publish(PARENT_INBOX, question)
            wait(transport.question_arrived, "a question")
            publish(PARENT_INBOX, reply)
            wait(transport.reply_arrived, "a reply")
            round_trips.append(transport.reply_at - sent)
            asked.append(question.message_id)
        load_s = time.perf_counter() - started
        pending_edges = len(
            list(broker.state.requests.wait_edges())
        )  # with the chain still waiting

        for reply in standing:
            transport.expect(reply.reply_to)
            publish(PARENT_INBOX, reply)
            wait(transport.reply_arrived, "a standing reply")
        session.status()  # every question and reply handled
        held = len(broker.state.requests)
        pending_left = len(broker.state.requests.pending())
        table_type = type(broker.state.requests).__name__

        opens = [handled[q] for q in asked]
        last, first = slice(loop_n - window, loop_n), slice(0, window)
        return {
            "design": design,
            "table": table_type,
            "agents": AGENTS,
            "requests": total,
            "standing_requests": AGENTS - 1,
            "window": window,
            "closed_requests_kept": settings.closed_requests_kept,
            "load_s": load_s,
            "open_cpu": _summary([c for c, _ in opens[last]]),
            "open_wall": _summary([w for _, w in opens[last]]),
            "round_trip": _summary(round_trips[last]),
            "first_window": {
                "open_cpu": _summary([c for c, _ in opens[first]]),
                "round_trip": _summary(round_trips[first]),
            },
            "held": held,
            "pending_after": pending_left,
            "wait_edges_during_load": pending_edges,
            "wait_cycles": cycles.cycles,
            "late_replies": transport.late_replies,
            "refused": transport.refused[:5],
        }
    finally:
        session.shutdown()
