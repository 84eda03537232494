"""Every watcher is an actor: one live actor per watcher with something still to deliver, none
left once it has delivered everything; the broker keeps only its address until then."""

from __future__ import annotations

from typing import Any

import pytest

from actors.session.sinks import CollectingSink, GuardedSink
from actors.session.watcher import _DEADLINE, Results, Waiting, WatcherActor
from actors.testing import SimSession
from actors.testing.simulation import SimRuntime
from protocol.calls import api
from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TaskResult
from protocol.session.effects import Flush
from protocol.session.state import WatcherState
from tests.sim.scenarios import live_watchers, publish_done

IDLE: dict[str, Any] = {"steps": []}


def broker_actor(session: SimSession) -> Any:
    actor = session.broker._actor_weakref()  # the simulation is single-threaded
    assert actor is not None
    return actor


def test_one_live_actor_per_watcher_still_owing_and_none_left_when_all_are_delivered() -> None:
    sink = CollectingSink()
    session = SimSession.simulated(11, sink=sink, trace=False)
    try:
        agents = [session.spawn(f"w{i}", script=IDLE).agent_id for i in range(3)]
        session.sim.run_all(max_time=1)
        tasks = [session.delegate(a, f"task {i}").task_id for i, a in enumerate(agents)]
        before = session.runtime.actor_count
        first = session.watch([tasks[0], tasks[1]]).watcher_id
        second = session.watch([tasks[1]]).watcher_id
        third = session.watch([tasks[2], tasks[0]]).watcher_id
        session.sim.run_all(max_time=1)
        assert live_watchers(session.runtime) == sorted([first, second, third])
        assert session.runtime.actor_count == before + 3
        publish_done(session, agents[1], tasks[1])
        session.sim.run_all(max_time=5)
        # the second watched only that task: delivered, its actor is gone (and its address)
        assert live_watchers(session.runtime) == sorted([first, third])
        assert second not in broker_actor(session)._watchers
        publish_done(session, agents[0], tasks[0])
        publish_done(session, agents[2], tasks[2])
        session.sim.run_all(max_time=5)
        assert live_watchers(session.runtime) == []
        # no watcher left, and no task's actor either (each stopped once its task settled)
        assert session.runtime.actor_count == before - len(tasks)
        assert len(broker_actor(session)._watchers) == 0
        got = {
            n.watcher_id: [r.task_id for r in n.results]
            for n in sink.items
            if isinstance(n, TaskCompletion) and n.pending == ()
        }
        assert got[third] == [tasks[2], tasks[0]]  # the order the caller named them
    finally:
        session.shutdown()


def test_a_watch_of_settled_tasks_only_starts_no_actor() -> None:
    session = SimSession.simulated(12, sink=CollectingSink(), trace=False)
    try:
        agent = session.spawn("w", script=IDLE).agent_id
        session.sim.run_all(max_time=1)
        task = session.delegate(agent, "task").task_id
        publish_done(session, agent, task)
        session.sim.run_all(max_time=5)
        before = session.runtime.actor_count
        result = session.watch([task])
        assert result.pending == () and [r.task_id for r in result.completed] == [task]
        session.sim.run_all(max_time=1)
        assert live_watchers(session.runtime) == [] and session.runtime.actor_count == before
    finally:
        session.shutdown()


def test_a_wait_answered_at_its_deadline_hands_a_window_closing_with_it_to_nobody() -> None:
    """The deadline and the window close together (both timers fired, their events in the
    mailbox in that order, as the threaded clock may do): the wait answers once, with the
    result, and the window's flush behind it reaches no sink."""
    runtime = SimRuntime(13, trace=False)
    sink = CollectingSink()
    answers: list[api.WaitResult] = []
    task_id = "shepherd-task-00000001"
    watcher_id = "shepherd-watcher-00000001"
    state = WatcherState(watcher_id=watcher_id, ids=(task_id,), pending=frozenset({task_id}))
    result = TaskResult(
        task_id=task_id, agent_id="a", status="completed", ok=True, return_code=0, completed_at=0.0
    )
    ref = runtime.spawn(
        WatcherActor, state, GuardedSink(sink), 60.0, Waiting(answers.append, (), 60.0)
    )
    ref.tell(Results([(result, result.completed_at)]))
    runtime.run_until_idle()
    ref.tell(_DEADLINE)  # the two timers' events, as both timers fired
    ref.tell(Flush(watcher_id=watcher_id))
    runtime.run_until_idle()
    assert [(a.pending, a.timed_out, a.completed) for a in answers] == [((), False, (result,))]
    assert sink.items == []
    assert live_watchers(runtime) == []


def test_a_result_that_took_time_to_reach_its_watcher_waits_only_the_rest_of_its_window() -> None:
    """Settled at t, handed to the watcher at t + 20 ms (its journal write, the routing): with
    a 25 ms window the caller hears of it at t + 25 ms, not at t + 45 ms."""
    runtime = SimRuntime(14, trace=False)
    sink = CollectingSink()
    task_id = "shepherd-task-00000001"
    watcher_id = "shepherd-watcher-00000001"
    start = runtime.vclock.now()
    state = WatcherState(
        watcher_id=watcher_id, ids=(task_id,), pending=frozenset({task_id}), since=start
    )
    ref = runtime.spawn(WatcherActor, state, GuardedSink(sink), 0.025)
    runtime.advance(1.0)
    settled = runtime.vclock.now()
    result = TaskResult(
        task_id=task_id,
        agent_id="a",
        status="completed",
        ok=True,
        return_code=0,
        completed_at=settled,
    )
    runtime.advance(0.020)
    ref.tell(Results([(result, settled)]))
    runtime.advance(0.004)
    assert sink.items == []  # still within its window
    runtime.advance(0.002)
    (note,) = sink.items
    assert isinstance(note, TaskCompletion) and note.results == (result,)
    assert note.created_at == pytest.approx(settled + 0.025)
    assert live_watchers(runtime) == []


def test_a_watcher_hears_of_a_done_its_window_after_the_agent_said_it() -> None:
    """Through the whole session: a ``done`` sent 20 ms before the parent took it reaches the
    watcher's caller 25 ms after it was sent, not 25 ms after it settled."""
    sink = CollectingSink()
    session = SimSession.simulated(15, sink=sink, trace=False)
    try:
        agent = session.spawn("w", script=IDLE).agent_id
        session.sim.run_all(max_time=1)
        task = session.delegate(agent, "task").task_id
        session.watch([task])
        session.sim.run_all(max_time=1)
        said = session.runtime.vclock.now() - 0.020
        publish_done(session, agent, task, created_at=said)
        session.sim.run_all(max_time=5)
        (note,) = [n for n in sink.items if isinstance(n, TaskCompletion)]
        assert [r.task_id for r in note.results] == [task]
        assert note.created_at == pytest.approx(said + 0.025)
    finally:
        session.shutdown()
