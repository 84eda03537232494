"""The journal's one writer, with group commit (actors/session/journal_writer.py), and the
broker's held runs: records that arrive while a write runs go in the next write; nothing is
told before its record is durable; nothing decided later overtakes a held run; a write that
fails fails every held call; the session's edge drains what was decided before it stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pykka
import pytest

from actors.records import journal as journal_module
from actors.records.journal import MemoryJournal
from actors.runtime.runtime import ShepherdActor, ThreadedRuntime
from actors.runtime.transport import InMemoryTransport
from actors.session import journal_writer as writer_module
from actors.session.journal_writer import Append, Committed, JournalFailed, JournalWriter
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from actors.testing.simagent import SimLauncher
from protocol.core.errors import SessionUnavailable
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import AgentMessage, TaskCompletion
from protocol.records.tasks import TaskRecord
from protocol.scripted.script import parse_script
from protocol.wire.envelopes import MessageEnvelope

QUIET = {"steps": [{"await": "task"}, {"await": "any"}]}
WAIT_S = 30.0


class GatedJournal(MemoryJournal):
    """A journal whose appends wait for ``gate`` while it is closed (a slow disk or server):
    ``entered`` is set when one is waiting; every write is kept as one list."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.writes: list[list[Any]] = []

    def _wait(self, records: Sequence[Any]) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        self.writes.append(list(records))

    def append(self, record: Any) -> None:
        self._wait([record])
        super().append(record)

    def append_many(self, records: Sequence[Any]) -> None:
        self._wait(records)
        super().append_many(records)


class Collector(ShepherdActor):
    """Stands in for the broker: keeps what the writer tells it."""

    def __init__(self, told: list[Any], changed: threading.Condition) -> None:
        super().__init__()
        self._told = told
        self._changed = changed

    def on_receive(self, message: Any) -> Any:
        with self._changed:
            self._told.append(message)
            self._changed.notify_all()
        return None


def test_records_that_arrive_while_a_write_runs_go_in_the_next_write() -> None:
    runtime = ThreadedRuntime(workers=2)
    journal = GatedJournal()
    told: list[Any] = []
    changed = threading.Condition()
    try:
        broker = runtime.spawn(Collector, told, changed)
        writer = runtime.spawn(JournalWriter, journal, broker)
        journal.gate.clear()
        writer.tell(Append(1, ["r1"]))
        assert journal.entered.wait(WAIT_S)  # the first write runs, and waits for the disk
        writer.tell(Append(2, ["r2"]))
        writer.tell(Append(3, ["r3", "r4"]))
        journal.gate.set()
        with changed:
            assert changed.wait_for(lambda: len(told) == 2, WAIT_S), told
        assert journal.writes == [["r1"], ["r2", "r3", "r4"]]  # two writes for three runs
        assert [type(m) for m in told] == [Committed, Committed]
        assert [m.upto for m in told] == [1, 3]
    finally:
        runtime.shutdown()


def test_a_write_that_fails_is_told_once_and_nothing_after_it_is_written() -> None:
    runtime = ThreadedRuntime(workers=2)
    told: list[Any] = []
    changed = threading.Condition()

    class Broken(MemoryJournal):
        def append(self, record: Any) -> None:
            raise OSError("the disk is full")

    journal = Broken()
    try:
        broker = runtime.spawn(Collector, told, changed)
        writer = runtime.spawn(JournalWriter, journal, broker)
        writer.tell(Append(1, ["r1"]))
        with changed:
            assert changed.wait_for(lambda: len(told) == 1, WAIT_S)
        writer.tell(Append(2, ["r2"]))
        writer.ask(Append(3, []), timeout=WAIT_S)  # the writer handled everything before it
        (failed,) = told
        assert isinstance(failed, JournalFailed) and "disk is full" in str(failed.error)
        assert journal.records == []
    finally:
        runtime.shutdown()


# ---------------------------------------------------------------------- the session


@pytest.fixture
def threaded() -> Iterator[tuple[Session, GatedJournal, CollectingSink]]:
    runtime = ThreadedRuntime(workers=2)
    transport = InMemoryTransport()
    sink = CollectingSink()
    journal = GatedJournal()
    session = Session(
        runtime, transport, SimLauncher(runtime, transport), sink=sink, journal=journal
    )
    try:
        yield session, journal, sink
    finally:
        journal.gate.set()
        session.shutdown()


def _held(session: Session) -> int:
    """How many runs the broker holds (its internals: the one way to see that a call waits)."""
    actor = session.broker._actor_weakref()
    assert actor is not None
    return len(actor._held)


def _worker_then_a_slow_disk(session: Session, journal: GatedJournal) -> Any:
    """An agent up (its records written), then every later write waits for the gate."""
    agent = session.spawn("worker", script=parse_script(QUIET))
    session.status()
    journal.gate.clear()
    journal.entered.clear()
    return agent


def test_a_status_asked_while_a_delegation_is_being_written_waits_for_it(
    threaded: tuple[Session, GatedJournal, CollectingSink],
) -> None:
    session, journal, _ = threaded
    agent = _worker_then_a_slow_disk(session, journal)
    answers: dict[str, Any] = {}

    def call(name: str, run: Any) -> None:
        answers[name] = run()
        answers[f"{name}_durable"] = journal.gate.is_set()

    delegating = threading.Thread(
        target=call, args=("delegate", lambda: session.delegate(agent.agent_id, "work"))
    )
    delegating.start()
    assert journal.entered.wait(WAIT_S)
    asking = threading.Thread(target=call, args=("status", session.status))
    asking.start()
    # both held (a late event of the agent's may be held behind them too: at least two)
    assert session.runtime.wait_until(lambda: _held(session) >= 2, WAIT_S)
    journal.gate.set()
    delegating.join(WAIT_S)
    asking.join(WAIT_S)
    assert answers["delegate_durable"] and answers["status_durable"]  # neither answered before
    (row,) = answers["status"].agents
    assert row.task is not None and row.task.task_id == answers["delegate"].task_id


def test_nothing_is_told_before_its_record_is_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    journaled: set[str] = set()
    told_before: list[str] = []
    real = journal_module.append_all

    def watching(journal: Any, records: Any) -> None:
        real(journal, records)
        journaled.update(r.task_id for r in records if isinstance(r, TaskRecord) and r.terminal)

    class Checking(CollectingSink):
        def __call__(self, note: Any) -> None:
            if isinstance(note, TaskCompletion):
                told_before.extend(r.task_id for r in note.results if r.task_id not in journaled)
            super().__call__(note)

    monkeypatch.setattr(writer_module, "append_all", watching)
    sink = Checking()
    session = SimSession.simulated(4, sink=sink, trace=False)
    try:
        script = {
            "steps": [
                {"await": "task"},
                {"await": "message"},
                {"done": {"status": "completed"}},
            ]
        }
        ids = []
        for i in range(5):
            session.spawn(f"w{i}", script=script)
            ids.append(session.delegate(f"w{i}", "go").task_id)
        session.watch(ids)
        for i in range(5):
            session.message(f"w{i}", "finish")
        session.sim.run_all(max_time=30)
        told = {r.task_id for n in sink.items if isinstance(n, TaskCompletion) for r in n.results}
        assert told == set(ids)
        assert told_before == []
    finally:
        session.shutdown()


def test_a_call_held_when_the_write_fails_is_told_session_unavailable_and_nothing_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = CollectingSink()
    session = SimSession.simulated(8, sink=sink, trace=False)
    try:
        session.spawn("worker", script=QUIET)
        session.sim.run_all(max_time=1)

        def broken(journal: Any, records: Any) -> None:
            raise OSError("the disk is full")

        monkeypatch.setattr(writer_module, "append_all", broken)
        with pytest.raises(SessionUnavailable, match="journal could not be written"):
            session.delegate("worker", "work")
        session.sim.run_all(max_time=5)
        assert (
            session.sim_launcher.driver("worker").received == []
        )  # the task was never handed over
    finally:
        session.shutdown()


def test_what_was_decided_before_the_session_stops_is_run_before_it_stops(
    threaded: tuple[Session, GatedJournal, CollectingSink],
) -> None:
    session, journal, sink = threaded
    agent = _worker_then_a_slow_disk(session, journal)
    question = MessageEnvelope(
        message_id=session.runtime.ids.new(IdKind.MESSAGE),
        session_id=session.session_id,
        sender_id=agent.agent_id,
        target_id=PARENT_ID,
        created_at=session.runtime.clock.now(),
        capability=session.launcher.driver("worker").identity.capability,  # type: ignore[attr-defined]
        content="which module first?",
        expects_reply=True,
    )
    session.transport.publish("parent", question)  # its request is journaled: held
    assert journal.entered.wait(WAIT_S)
    stopping = threading.Thread(target=session.shutdown)
    stopping.start()
    journal.gate.set()
    stopping.join(WAIT_S)
    assert not stopping.is_alive()
    told = [n for n in sink.items if isinstance(n, AgentMessage)]
    assert [n.content for n in told] == ["which module first?"]


def test_a_held_reply_is_a_plain_value_to_whoever_asked() -> None:
    """``answer_later``: an ask of a handler that took its reply gets what the actor set."""
    runtime = ThreadedRuntime(workers=2)

    class Later(ShepherdActor):
        def __init__(self) -> None:
            super().__init__()
            self.owed: list[pykka.Future[Any]] = []

        def on_receive(self, message: Any) -> Any:
            if message == "ask":
                reply = self.answer_later()
                assert reply is not None
                self.owed.append(reply)
                return "not this"
            if message == "answer":
                self.owed.pop().set(42)
            return None

    try:
        ref = runtime.spawn(Later)
        future = ref.ask("ask", block=False)
        ref.tell("answer")
        assert future.get(timeout=WAIT_S) == 42
    finally:
        runtime.shutdown()
