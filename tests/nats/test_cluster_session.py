"""A whole session on a cluster of three ``nats-server``s: its envelopes (R3 stream) and its
records (``--journal nats``: R3 journal and record of delivery). The leader of the session's
stream is SIGKILLed in the middle of 1,000 watched tasks: every task settles, each is notified
exactly once, the journal read back afterwards (as a parent resumed on another host reads it)
holds every result, and service comes back. Agents are simulated in-process; the agents'
``done`` travel over NATS from another connection, as a bridge's do."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import PARENT_INBOX
from actors.session.agent import AgentHandle, AgentSpec
from actors.session.records import open_records
from actors.session.session import Session
from actors.session.sinks import FanOut
from actors.testing.simagent import SimLauncher
from actors.transports.nats.journal import NatsJournal
from actors.transports.nats.server import NatsServer
from actors.transports.nats.transport import NatsTransport, stream_name
from actors.transports.wire import NATS_OUTAGE_S
from protocol.core.errors import SessionUnavailable
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import AnyNotification, TaskCompletion
from protocol.records.settings import Settings
from protocol.scripted.script import parse_script
from protocol.session.restore import fold
from protocol.session.state import SessionState
from protocol.wire.envelopes import TaskDoneEnvelope
from tests.nats.test_cluster import leader_of

#: real servers and processes, on a machine that may be busy: waits on events, with ceilings
pytestmark = [pytest.mark.processes, pytest.mark.timeout(1200)]

AGENTS = 20
ROUNDS = 50  # AGENTS x ROUNDS = 1,000 tasks
KILL_AT_ROUND = 20
QUIET = {"steps": [{"await": "task"}, {"await": "any"}]}
#: how long one round may take before the test calls it lost: the failover itself takes seconds
#: (its figure is bench.py's), but every step of the round may wait out the election (the
#: parent's publishes and appends, for at most a minute each) on a machine that may be busy
ROUND_CEILING_S = 300.0


class NatsSimLauncher(SimLauncher):
    """Simulated agents whose inboxes are on NATS: each inbox is made before the agent reads
    it, as the process launcher makes a bridge's."""

    def __init__(self, runtime: ThreadedRuntime, transport: NatsTransport) -> None:
        super().__init__(runtime, transport)
        self._nats = transport

    def launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        self._nats.ensure_inbox(spec.agent_id)
        return super().launch(spec, on_exit)


class Completions:
    """Every task completion the parent's sinks showed, counted per task."""

    def __init__(self) -> None:
        self.per_task: Counter[str] = Counter()
        self._cond = threading.Condition()

    def __call__(self, note: AnyNotification) -> None:
        if isinstance(note, TaskCompletion):
            with self._cond:
                self.per_task.update(r.task_id for r in note.results)
                self._cond.notify_all()

    def wait_for(self, task_ids: list[str], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: all(self.per_task[t] for t in task_ids), timeout=timeout
            )


def _publish_retrying(transport: NatsTransport, envelope: TaskDoneEnvelope) -> None:
    """A refused publish was not accepted: the sender tries the same envelope again."""
    started = time.monotonic()
    while True:
        try:
            transport.publish(PARENT_INBOX, envelope)
            return
        except SessionUnavailable:
            assert time.monotonic() - started < ROUND_CEILING_S


def test_the_stream_leaders_sigkill_during_a_thousand_tasks_loses_and_repeats_nothing(
    nats_cluster: list[NatsServer], session_id: str, tmp_path: Path
) -> None:
    urls = [server.url for server in nats_cluster]
    descriptor = "nats://" + ",".join(url.removeprefix("nats://") for url in urls)
    runtime = ThreadedRuntime()
    transport = NatsTransport(
        urls, session_id, replicas=3, request_timeout_s=1.0, create=True, outage_s=NATS_OUTAGE_S
    )  # as `serve` opens it (actors.transports.wire.open_transport)
    transport.ensure_inbox(PARENT_INBOX)
    records = open_records("nats", tmp_path, descriptor, session_id, existing=False)
    launcher = NatsSimLauncher(runtime, transport)
    shown = Completions()
    session = Session(
        runtime,
        transport,
        launcher,
        sink=FanOut(records.record, [shown]),
        journal=records.journal,
        session_id=session_id,
    )
    # the agents' side: a process that did not create the session makes no stream
    children = NatsTransport(urls, session_id, request_timeout_s=1.0, create=False)
    script = parse_script(QUIET)
    rounds_s: list[float] = []
    tasks: list[str] = []
    try:
        agents = [session.spawn(f"a{i}", script=script) for i in range(AGENTS)]
        victim_name = leader_of(transport, session_id)
        for round_ in range(ROUNDS):
            if round_ == KILL_AT_ROUND:
                next(s for s in nats_cluster if s.name == victim_name).kill()
            started = time.monotonic()
            batch = []
            for agent in agents:
                task_id = session.delegate(agent.agent_id, f"round {round_}").task_id
                session.watch(task_id)
                batch.append((agent, task_id))
            for agent, task_id in batch:
                _publish_retrying(
                    children,
                    TaskDoneEnvelope(
                        message_id=runtime.ids.new(IdKind.MESSAGE),
                        session_id=session_id,
                        sender_id=agent.agent_id,
                        target_id=PARENT_ID,
                        created_at=time.time(),
                        capability=launcher.driver(agent.name).identity.capability,
                        task_id=task_id,
                        status="completed",
                        summary=f"{task_id} done",
                    ),
                )
            ids = [task_id for _, task_id in batch]
            assert shown.wait_for(ids, timeout=ROUND_CEILING_S), f"round {round_} never settled"
            tasks += ids
            rounds_s.append(time.monotonic() - started)
    finally:
        children.close()
        session.shutdown()
        records.close()
    assert len(tasks) == AGENTS * ROUNDS
    assert set(shown.per_task) == set(tasks)
    twice = {t: n for t, n in shown.per_task.items() if n != 1}
    assert twice == {}, f"notified more than once: {twice}"
    # what a parent resumed on another host reads back: every result, from a surviving server
    alive = next(s for s in nats_cluster if s.name != victim_name)
    again = NatsJournal([alive.url], session_id, replicas=3, create=False)
    try:
        state = fold(again.read(), SessionState(session_id, Settings()))
        assert again.problems == []
    finally:
        again.close()
    settled = {t: r.result.text for t, r in state.tasks.items() if r.result is not None}
    odd = {t: state.tasks[t].result for t in tasks if settled.get(t) != f"{t} done"}
    assert odd == {}
    assert max(rounds_s) < ROUND_CEILING_S  # service came back (how soon: bench.py's figure)
    assert stream_name(session_id) == session_id
