"""Every task is an actor, from ``delegate`` until the session has taken its settlement.

The census: one live :class:`TaskActor` per open task, owning the record the broker's read
model shows, and none once a task has settled. A parent's call that ends or moves a task is
answered once its task has decided: what ``status`` shows right after agrees with the answer.
"""

from __future__ import annotations

from typing import Any

from actors.session.messages import ParentCall
from actors.session.sinks import CollectingSink
from actors.session.task_actor import TaskActor
from actors.testing import SimSession
from protocol.calls import api
from protocol.records.notifications import Notice, StaleWait
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session.task import DEADLINE_PASSED
from tests.sim.puppet import Puppet
from tests.sim.scenarios import broker

IDLE: dict[str, Any] = {"steps": []}


def task_actors(session: SimSession) -> dict[str, TaskRecord]:
    """Each live task actor's record, by task id (the simulation is single-threaded)."""
    return {
        a.record.task_id: a.record
        for a in session.runtime.actors()
        if isinstance(a, TaskActor) and not a.actor_stopped.is_set()
    }


def open_tasks(session: SimSession) -> dict[str, TaskRecord]:
    return {t: r for t, r in broker(session).tasks.items() if not r.terminal}


def test_one_live_actor_per_open_task_owning_what_the_read_model_shows() -> None:
    session = SimSession.simulated(21, sink=CollectingSink(), trace=False)
    try:
        names = [f"w{i}" for i in range(5)]
        for name in names:
            session.spawn(name, script=IDLE)
        session.sim.run_all(max_time=1)
        before = session.runtime.actor_count
        tasks = [session.delegate(name, f"task {name}").task_id for name in names]
        session.sim.run_all(max_time=1)
        assert session.runtime.actor_count == before + len(tasks)
        assert task_actors(session) == open_tasks(session)
        assert set(task_actors(session)) == set(tasks)
        # one asks a peer: its own actor moves it to waiting, and the read model follows
        asker = Puppet(session, "w0")
        asker.ask(Puppet(session, "w1").agent_id, "which file?")
        session.sim.run_all(max_time=1)
        assert task_actors(session)[tasks[0]].state is TaskState.WAITING
        assert task_actors(session) == open_tasks(session)
        # two settle by their agent's done, one by the parent's cancel
        Puppet(session, "w2").done(tasks[2])
        Puppet(session, "w3").done(tasks[3], "blocked", "no access")
        session.sim.run_all(max_time=1)
        cancelled = session.cancel(tasks[4])
        assert cancelled.status == "cancelled" and not cancelled.already_settled
        session.sim.run_all(max_time=1)
        assert set(task_actors(session)) == {tasks[0], tasks[1]}
        assert task_actors(session) == open_tasks(session)
        assert session.runtime.actor_count == before + 2
    finally:
        session.shutdown()


def test_a_call_is_answered_once_its_task_decided_so_status_agrees_at_once() -> None:
    session = SimSession.simulated(22, sink=CollectingSink(), trace=False)
    try:
        session.spawn("w", script=IDLE)
        session.sim.run_all(max_time=1)
        task_id = session.delegate("w", "x").task_id
        failed = session.fail(task_id, "not needed")
        # no run of the simulation in between: the answer came after the task decided
        (row,) = session.status("w").agents
        assert failed.status == "failed"
        assert row.task is not None and row.task.state is TaskState.FAILED
        assert broker(session).tasks[task_id].state is TaskState.FAILED
        again = session.cancel(task_id)
        assert again.already_settled and again.status == "failed"
    finally:
        session.shutdown()


def test_endings_that_meet_in_a_task_settle_it_once_and_the_later_gets_the_result() -> None:
    """The parent's cancel and the agent's ``done`` both on their way (the cancel asked first,
    the done published before anything ran), and the other way round: the task's own mailbox
    orders them, the first wins, the other is answered with the result that won. (Races
    whose winner the seeded scheduler picks: tests/reliability/test_fault_simulation.py.)"""
    for cancel_first in (True, False):
        for seed in range(20):
            session = SimSession.simulated(100 + seed, sink=CollectingSink(), trace=False)
            try:
                session.spawn("w", script=IDLE)
                session.sim.run_all(max_time=1)
                task_id = session.delegate("w", "x").task_id
                session.sim.run_all(max_time=1)
                worker = Puppet(session, "w")
                if not cancel_first:
                    done = worker.done(task_id)
                    session.sim.run_all(max_time=1)
                call = ParentCall(args=api.CancelArgs(task_id=task_id))
                cancel = session.broker.ask(call, block=False)
                if cancel_first:
                    done = worker.done(task_id)
                session.sim.run_all(max_time=1)
                answer = cancel.get()
                ack = worker.ack_for(done)
                settled = broker(session).tasks[task_id]
                assert settled.result is not None
                assert settled.state is (
                    TaskState.CANCELLED if cancel_first else TaskState.COMPLETED
                )
                assert answer.status == settled.result.status
                assert answer.already_settled is not cancel_first
                assert ack.result is not None and ack.result.status == settled.result.status
                assert task_actors(session) == {}
            finally:
                session.shutdown()


def test_a_task_times_out_by_its_own_actors_timer_with_what_it_spent() -> None:
    """The deadline is the task's own: its actor arms a timer for it (the broker arms none),
    and when it goes off the actor decides the time-out, with what the task spent as the
    session told it (``Spent``), and stops once the session has taken it."""
    session = SimSession.simulated(23, sink=CollectingSink(), trace=False)
    try:
        session.spawn("w", script=IDLE)
        session.sim.run_all(max_time=1)
        task_id = session.delegate("w", "x", timeout_minutes=1).task_id
        session.sim.run_all(max_time=1)
        (actor,) = [a for a in session.runtime.actors() if isinstance(a, TaskActor)]
        deadline = broker(session).tasks[task_id].deadline_at
        assert deadline is not None and actor.armed == deadline
        assert [key for key in broker_actor(session)._timers if key[0] == "deadline"] == []
        Puppet(session, "w").runtime("usage", tokens=1234, cost=0.5)
        session.sim.advance(30)
        assert task_actors(session)[task_id].state is TaskState.RUNNING
        session.sim.advance(31)
        result = broker(session).results[task_id]
        assert (result.status, result.error) == ("timed_out", DEADLINE_PASSED)
        assert result.usage is not None and (result.usage.tokens, result.usage.cost) == (1234, 0.5)
        assert session.sim.vclock.now() >= deadline
        assert task_actors(session) == {}
    finally:
        session.shutdown()


def test_a_deadline_from_the_start_is_armed_by_the_actor_when_the_task_starts() -> None:
    """A queued task with ``timeout_from="start"`` has no deadline until its slot frees: its
    actor arms one then, counted from the start, and the task times out by it."""
    settings = Settings(max_running=1)
    session = SimSession.simulated(24, sink=CollectingSink(), trace=False, settings=settings)
    try:
        for name in ("a", "b"):
            session.spawn(name, script=IDLE)
        session.sim.run_all(max_time=1)
        first = session.delegate("a", "first").task_id
        later = session.delegate("b", "later", timeout_minutes=1, timeout_from="start").task_id
        session.sim.run_all(max_time=1)
        assert armed(session, later) is None  # queued: nothing counts yet
        session.sim.advance(300)
        assert broker(session).tasks[later].state is TaskState.QUEUED
        Puppet(session, "a").done(first)
        session.sim.advance(1)
        started = broker(session).tasks[later]
        assert started.state is TaskState.RUNNING and started.started_at is not None
        assert armed(session, later) == started.started_at + 60.0
        session.sim.advance(61)
        assert broker(session).results[later].status == "timed_out"
    finally:
        session.shutdown()


def armed(session: SimSession, task_id: str) -> float | None:
    (actor,) = [
        a
        for a in session.runtime.actors()
        if isinstance(a, TaskActor) and a.record.task_id == task_id
    ]
    return actor.armed


def broker_actor(session: SimSession) -> Any:
    actor = session.broker._actor_weakref()
    assert actor is not None
    return actor


def test_a_tasks_budget_of_minutes_ends_it_by_its_own_timer_and_the_parent_is_told() -> None:
    """The end of ``max_minutes``, and their soft share, are the task's own timer too: its
    actor warns once, then fails it ``budget_exceeded`` (with what it spent), and the
    session tells the parent each (the broker arms no timer for them)."""
    sink = CollectingSink()
    session = SimSession.simulated(25, sink=sink, trace=False)
    try:
        session.spawn("w", script=IDLE)
        session.sim.run_all(max_time=1)
        task_id = session.delegate("w", "x", max_minutes=1, timeout_minutes=5).task_id
        session.sim.run_all(max_time=1)
        started = broker(session).tasks[task_id]
        begun = started.started_at or started.created_at
        assert armed(session, task_id) == begun + 48.0  # their soft share first, then the end
        assert [key for key in broker_actor(session)._timers if "budget" in key[0]] == []
        Puppet(session, "w").runtime("usage", tokens=10)
        session.sim.advance(50)
        assert armed(session, task_id) == begun + 60.0
        session.sim.advance(11)
        result = broker(session).results[task_id]
        assert (result.status, result.reason) == ("failed", "budget_exceeded")
        assert result.usage is not None and result.usage.tokens == 10
        told = [n for n in sink.items if isinstance(n, Notice) and n.code == "budget_exceeded"]
        assert [n.task_id for n in told] == [task_id]
        soft = [n for n in sink.items if isinstance(n, Notice) and n.code == "budget_soft_limit"]
        assert [(n.task_id, n.refs) for n in soft] == [(task_id, ("max_minutes",))]
        assert task_actors(session) == {}
    finally:
        session.shutdown()


def test_a_task_over_its_tokens_is_ended_by_its_actor_and_a_done_before_it_wins() -> None:
    """What a task spent is told to its actor, which ends it past its budget and is the only
    one to: an agent's ``done`` sent before the usage that passes the limit completes the
    task, in every interleaving the seeds give, and the parent hears of no budget's end;
    the same usage alone fails it ``budget_exceeded``, told once."""
    for seed in range(12):
        for done_first in (True, False):
            sink = CollectingSink()
            session = SimSession.simulated(seed, sink=sink, trace=False)
            try:
                session.spawn("w", script=IDLE)
                session.sim.run_all(max_time=1)
                task_id = session.delegate("w", "x", max_tokens=10).task_id
                session.sim.run_all(max_time=1)
                puppet = Puppet(session, "w")
                if done_first:
                    puppet.done(task_id, "completed")
                puppet.runtime("usage", tokens=11)
                session.sim.run_all(max_time=5)
                result = broker(session).results[task_id]
                told = [
                    n for n in sink.items if isinstance(n, Notice) and n.code == "budget_exceeded"
                ]
                if done_first:
                    assert result.status == "completed", seed
                    assert told == [], (seed, told)
                else:
                    assert (result.status, result.reason) == ("failed", "budget_exceeded"), seed
                    assert result.usage is not None and result.usage.tokens == 11
                    assert [n.task_id for n in told] == [task_id], seed
                assert task_actors(session) == {}
            finally:
                session.shutdown()


def test_a_tasks_soft_warnings_are_its_actors_and_the_session_keeps_none() -> None:
    """What a task spent past the soft share of a limit is warned of by its actor, once per
    limit: the session's state holds no task's warnings (only its own budget's), and the
    warning comes after the usage that passed the share, whatever the interleaving."""
    for seed in range(6):
        sink = CollectingSink()
        session = SimSession.simulated(seed, sink=sink, trace=False)
        try:
            session.spawn("w", script=IDLE)
            session.sim.run_all(max_time=1)
            task_id = session.delegate("w", "x", max_tokens=100, max_cost=1.0).task_id
            session.sim.run_all(max_time=1)
            puppet = Puppet(session, "w")
            for tokens, cost in ((50, 0.1), (35, 0.1), (5, 0.7), (5, 0.0)):
                puppet.runtime("usage", tokens=tokens, cost=cost)
                session.sim.run_all(max_time=5)
            soft = [
                (n.task_id, n.refs)
                for n in sink.items
                if isinstance(n, Notice) and n.code == "budget_soft_limit"
            ]
            assert soft == [(task_id, ("max_tokens",)), (task_id, ("max_cost",))], seed
            assert broker(session).budget_warned == set()
            (actor,) = [a for a in session.runtime.actors() if isinstance(a, TaskActor)]
            assert actor.soft is not None
            assert actor.soft.told == {"max_tokens", "max_cost"}
            assert not broker(session).tasks[task_id].terminal
        finally:
            session.shutdown()


def test_a_tasks_stale_wait_is_its_actors_timer_told_once_per_episode() -> None:
    """The point where a task's wait is stale is its actor's one timer too: armed when the
    task begins to wait, told to the parent once (the broker arms no stale timer), gone when
    the episode ends; the next episode is told again."""
    for seed in range(6):
        sink = CollectingSink()
        settings = Settings(stale_wait_threshold_s=30.0)
        session = SimSession.simulated(seed, sink=sink, trace=False, settings=settings)
        try:
            session.spawn("w", script=IDLE)
            session.spawn("peer", script=IDLE)
            session.sim.run_all(max_time=1)
            task_id = session.delegate("w", "x").task_id
            session.sim.run_all(max_time=1)
            assert armed(session, task_id) is None  # running: nothing to go off
            w, peer = Puppet(session, "w"), Puppet(session, "peer")
            w.ask("peer", "which grammar?")
            session.sim.run_all(max_time=2)
            since = broker(session).tasks[task_id].waiting_since
            assert since is not None and armed(session, task_id) == since + 30.0
            assert [key for key in broker_actor(session)._timers if key[0] == "stale"] == []
            session.sim.advance(60)
            told = [n for n in sink.items if isinstance(n, StaleWait)]
            assert [(n.task_id, n.waiting_since) for n in told] == [(task_id, since)], seed
            assert armed(session, task_id) is None  # told: never twice for the episode
            (request_id,) = broker(session).tasks[task_id].pending_requests
            peer.reply(w.agent_id, request_id)
            session.sim.run_all(max_time=2)
            assert broker(session).tasks[task_id].state is TaskState.RUNNING
            w.ask("peer", "and the lexer?")
            session.sim.run_all(max_time=2)
            again = broker(session).tasks[task_id].waiting_since
            assert again is not None and again > since and armed(session, task_id) == again + 30
            session.sim.advance(60)
            told = [n for n in sink.items if isinstance(n, StaleWait)]
            assert [n.waiting_since for n in told] == [since, again], seed
        finally:
            session.shutdown()
