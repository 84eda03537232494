"""The broker's batch of inbound envelopes (``InboundBatch``, what the parent's mailbox hands
over per receiving pass): each envelope through the same rule as one alone, in order, and the
batch's effects as one run (its records in one journal write); one the session fails on is
refused alone (the transport quarantines it), the others stay handled."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from actors.records import journal as journal_module
from actors.runtime.transport import DeliveryFailed, NotHandled
from actors.session import journal_writer as writer_module
from actors.session import watcher_routes as routes_module
from actors.session.messages import InboundBatch
from actors.session.sinks import CollectingSink
from actors.session.watcher import Results
from actors.testing import SimSession
from protocol.core.errors import SessionUnavailable
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.notifications import AgentMessage, Notice, TaskCompletion
from protocol.records.tasks import TaskRecord
from protocol.session import effects as fx
from protocol.session import inbound
from protocol.wire.envelopes import MessageEnvelope, TaskDoneEnvelope

IDLE: dict[str, Any] = {"steps": []}


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
        rule = inbound.envelope

        def envelope(state: Any, env: Any, cx: Any) -> Any:
            if env.message_id == failing:
                raise RuntimeError("the rule broke on this one")
            return rule(state, env, cx)

        monkeypatch.setattr(inbound, "envelope", envelope)
        refused = session.broker.ask(InboundBatch(envelopes=tuple(batch)), block=True, timeout=30)
        session.sim.run_all(max_time=1)
        assert set(refused) == {failing}
        assert isinstance(refused[failing], DeliveryFailed)
        assert "the rule broke on this one" in refused[failing].message
        told = [n.content for n in sink.items if isinstance(n, AgentMessage)]
        assert told == ["m0", "m1", "m3"]
        # nothing refused: the answer is None
        monkeypatch.setattr(inbound, "envelope", rule)
        again = [_message(session, agent_id, "m4")]
        assert session.broker.ask(InboundBatch(envelopes=tuple(again)), timeout=30) is None
    finally:
        session.shutdown()


def _done(session: SimSession, sender_id: str, task_id: str) -> TaskDoneEnvelope:
    return TaskDoneEnvelope(
        message_id=make_id(IdKind.MESSAGE, secrets.token_hex(8)),
        session_id=session.session_id,
        sender_id=sender_id,
        target_id=PARENT_ID,
        created_at=0.0,
        task_id=task_id,
        status="completed",
        summary=f"done {task_id}",
    )


def _with_tasks(session: SimSession, count: int, watch: bool = True) -> list[tuple[str, str]]:
    """(agent id, task id) of ``count`` agents, each with a task it does not finish (``watch``:
    all of them watched by one watcher, the parent's sink)."""
    pairs = []
    for i in range(count):
        agent_id = session.spawn(f"w{i}", script=IDLE).agent_id
        pairs.append((agent_id, ""))
    session.sim.run_all(max_time=1)
    pairs = [(a, session.delegate(a, f"task {i}").task_id) for i, (a, _) in enumerate(pairs)]
    if watch:
        session.watch([t for _, t in pairs])
    session.sim.run_all(max_time=1)
    return pairs


def _counting_writes(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> list[list[Any]]:
    writes: list[list[Any]] = []

    def counted(journal: Any, records: Any) -> None:
        if fail:
            raise OSError("the disk is full")
        writes.append(list(records))
        journal_module.append_all(journal, records)

    monkeypatch.setattr(writer_module, "append_all", counted)  # the journal's one writer
    return writes


def _settled(sink: CollectingSink) -> list[str]:
    return [r.task_id for n in sink.items if isinstance(n, TaskCompletion) for r in n.results]


def test_a_batch_of_settlements_is_one_journal_write_and_each_is_told_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One receiving pass of ``done`` envelopes: their records are durable in one write (one
    fsync), before anyone hears; each task's completion is told exactly once."""
    sink = CollectingSink()
    session = SimSession.simulated(5, sink=sink, trace=False)
    try:
        pairs = _with_tasks(session, 6)
        writes = _counting_writes(monkeypatch)
        batch = tuple(_done(session, a, t) for a, t in pairs)
        assert session.broker.ask(InboundBatch(envelopes=batch), timeout=30) is None
        assert len(writes) == 1
        settled = [r.task_id for r in writes[0] if isinstance(r, TaskRecord) and r.terminal]
        # each task's actor decides its own: they settle in the order they decided
        assert sorted(settled) == sorted(t for _, t in pairs)
        session.sim.run_all(max_time=5)
        assert sorted(_settled(sink)) == sorted(t for _, t in pairs)
        # the same batch handed over again (a crash before its acknowledgement): told once
        assert session.broker.ask(InboundBatch(envelopes=batch), timeout=30) is None
        session.sim.run_all(max_time=5)
        assert sorted(_settled(sink)) == sorted(t for _, t in pairs)
    finally:
        session.shutdown()


def test_a_journal_write_that_fails_stops_the_session_and_takes_none_of_the_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rules ran (the state in memory moved) but the records did not take it: the session
    stops deciding. The batch is not taken (the transport keeps it for the next parent), no
    completion is told, the parent is told the session stopped, and every later call or
    envelope is refused with session_unavailable naming why."""
    sink = CollectingSink()
    session = SimSession.simulated(6, sink=sink, trace=False)
    try:
        pairs = _with_tasks(session, 3)
        _counting_writes(monkeypatch, fail=True)
        batch = tuple(_done(session, a, t) for a, t in pairs)
        with pytest.raises(NotHandled, match="the disk is full"):
            session.broker.ask(InboundBatch(envelopes=batch), timeout=30)
        session.sim.run_all(max_time=5)
        assert _settled(sink) == []
        stopped = [n for n in sink.items if isinstance(n, Notice)]
        assert [n.code for n in stopped] == ["session_stopped"]
        assert "journal could not be written" in stopped[0].text
        with pytest.raises(SessionUnavailable, match="journal could not be written"):
            session.status()
        later = (_done(session, *pairs[0]),)
        with pytest.raises(NotHandled):
            session.broker.ask(InboundBatch(envelopes=later), timeout=30)
    finally:
        session.shutdown()


def test_an_effect_that_fails_refuses_its_envelope_alone() -> None:
    """Running one envelope's effects raises: it is refused; the batch's others are told."""
    sink = CollectingSink()
    session = SimSession.simulated(7, sink=sink, trace=False)
    try:
        agent_id = session.spawn("scout", script=IDLE).agent_id
        session.sim.run_all(max_time=1)
        actor = session.broker._actor_weakref()
        assert actor is not None  # the broker is running
        notify = actor._runners[fx.Notify]

        def failing(effect: Any, run: Any) -> None:
            if getattr(effect.note, "content", None) == "m1":
                raise RuntimeError("the sink broke on this one")
            notify(effect, run)

        actor._runners[fx.Notify] = failing
        batch = tuple(_message(session, agent_id, f"m{i}") for i in range(3))
        refused = session.broker.ask(InboundBatch(envelopes=batch), timeout=30)
        session.sim.run_all(max_time=1)
        assert set(refused) == {batch[1].message_id}
        told = [n.content for n in sink.items if isinstance(n, AgentMessage)]
        assert told == ["m0", "m2"]
    finally:
        session.shutdown()


def test_results_routed_to_one_watcher_in_one_batch_reach_it_in_one_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two tasks of one watcher settling in one batch: one run, so one message to the
    watcher's actor with both results, and one notification with both (exactly once)."""
    sink = CollectingSink()
    session = SimSession.simulated(8, sink=sink, trace=False)
    try:
        pairs = _with_tasks(session, 2, watch=False)
        watcher = session.watch([t for _, t in pairs]).watcher_id
        session.sim.run_all(max_time=1)
        routed: list[int] = []
        real = Results

        def counted(results: Any) -> Any:
            routed.append(len(results))
            return real(results)

        monkeypatch.setattr(routes_module, "Results", counted)  # the broker's routes to watchers
        batch = tuple(_done(session, a, t) for a, t in pairs)
        assert session.broker.ask(InboundBatch(envelopes=batch), timeout=30) is None
        session.sim.run_all(max_time=5)
        assert routed == [2]
        (note,) = [n for n in sink.items if isinstance(n, TaskCompletion)]
        assert note.watcher_id == watcher and note.pending == ()
        assert [r.task_id for r in note.results] == [t for _, t in pairs]
    finally:
        session.shutdown()
