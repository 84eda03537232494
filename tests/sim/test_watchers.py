"""Task watchers and parent notifications."""

from __future__ import annotations

import pytest

from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from protocol.calls.render import render_notification
from protocol.core.errors import DuplicateIds, InvalidArgument, InvalidHandle
from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TaskState
from tests.sim.puppet import Puppet
from tests.sim.scenarios import (
    IDLE,
    broker,
    completions,
    delivered_results,
    done_script,
    new_session,
)


def _agents(s, n: int):  # type: ignore[no-untyped-def]
    names = [f"a{i}" for i in range(n)]
    for name in names:
        s.spawn(name, script=IDLE)
    tasks = [s.delegate(name, f"task for {name}").task_id for name in names]
    s.sim.run_all()
    return [Puppet(s, name) for name in names], tasks


def test_registration_is_immediate_and_pending_tasks_do_not_complete() -> None:
    s, sink = new_session(1)
    (a,), (t,) = _agents(s, 1)
    w = s.watch(t)
    assert w.ids == (t,) and w.pending == (t,) and w.completed == ()
    assert w.watcher_id.startswith("shepherd-watcher-")
    a.runtime("turn_start")
    a.runtime("turn_end")  # a turn ending is not completion
    s.sim.advance(3600)
    assert completions(sink) == []


def test_a_waiting_task_keeps_its_watcher_pending() -> None:
    s, sink = new_session(2)
    (a, _b), (t, _) = _agents(s, 2)
    s.watch(t)
    a.ask("a1")
    s.sim.advance(600)
    assert broker(s).tasks[t].state is TaskState.WAITING
    assert completions(sink) == []


def test_completion_is_delivered_exactly_once_with_its_details() -> None:
    s, sink = new_session(3)
    (a,), (t,) = _agents(s, 1)
    w = s.watch(t)
    a.done(t, "completed", "all good")
    s.sim.run_all()
    (note,) = completions(sink)
    assert note.watcher_id == w.watcher_id and note.pending == ()
    (r,) = note.results
    assert (r.task_id, r.agent_id, r.status, r.return_code, r.ok, r.text, r.agent_name) == (
        t,
        a.agent_id,
        "completed",
        0,
        True,
        "all good",
        "a0",
    )
    assert r.description == "task for a0"
    text = render_notification(note)
    assert f'call: shepherd_watch(id="{t}")' in text and "completed (rc 0)" in text
    a.done(t, "completed", "again")
    s.sim.run_all()
    assert len(completions(sink)) == 1


def test_an_already_settled_task_is_answered_at_once_and_never_delivered() -> None:
    s, sink = new_session(4)
    (a,), (t,) = _agents(s, 1)
    a.done(t, "blocked", "stuck")
    s.sim.run_all()
    w = s.watch(t)
    assert w.pending == () and [r.status for r in w.completed] == ["blocked"]
    s.sim.run_all()
    assert completions(sink) == []


def test_many_ids_coalesce_within_the_window_in_the_callers_order() -> None:
    s, sink = new_session(5)
    agents, tasks = _agents(s, 3)
    s.watch([tasks[2], tasks[0], tasks[1]])
    for agent, task in zip(reversed(agents), reversed(tasks), strict=True):
        agent.done(task, "completed", agent.name)
    s.sim.run_all()
    (note,) = completions(sink)
    assert [r.task_id for r in note.results] == [tasks[2], tasks[0], tasks[1]]
    assert note.ids == (tasks[2], tasks[0], tasks[1])


def test_completions_further_apart_than_the_window_are_separate() -> None:
    s, sink = new_session(6)
    agents, tasks = _agents(s, 2)
    s.watch(tasks)
    agents[1].done(tasks[1])
    s.sim.advance(1.0)
    agents[0].done(tasks[0])
    s.sim.run_all()
    notes = completions(sink)
    assert [[r.task_id for r in n.results] for n in notes] == [[tasks[1]], [tasks[0]]]
    assert notes[0].pending == (tasks[0],) and notes[1].pending == ()


def test_every_terminal_status_with_its_return_code() -> None:
    s, sink = new_session(7)
    agents, tasks = _agents(s, 5)
    s.watch(tasks)
    agents[0].done(tasks[0], "completed")
    agents[1].done(tasks[1], "failed", error="broke")
    agents[2].done(tasks[2], "blocked")
    s.sim.run_all()
    s.cancel(tasks[3], "not needed")
    s.fail(tasks[4], "parent gave up")
    s.sim.run_all()
    got = {r.task_id: (r.status, r.return_code, r.ok) for r in delivered_results(sink)}
    assert got == {
        tasks[0]: ("completed", 0, True),
        tasks[1]: ("failed", 1, False),
        tasks[2]: ("blocked", 2, False),
        tasks[3]: ("cancelled", 130, False),
        tasks[4]: ("failed", 1, False),
    }


def test_timed_out_outcome_reaches_the_watcher() -> None:
    s, sink = new_session(8)
    s.spawn("slow", script=IDLE)
    t = s.delegate("slow", "x", timeout_minutes=0.5).task_id
    s.watch(t)
    s.sim.advance(31)
    s.sim.run_all()
    assert [(r.status, r.return_code) for r in delivered_results(sink)] == [("timed_out", 124)]


def test_two_watchers_on_one_task_each_get_it_once() -> None:
    s, sink = new_session(9)
    (a,), (t,) = _agents(s, 1)
    w1 = s.watch(t)
    w2 = s.watch([t])
    a.done(t)
    s.sim.run_all()
    assert sorted(n.watcher_id for n in completions(sink)) == sorted([w1.watcher_id, w2.watcher_id])


def test_bad_ids_are_rejected_naming_the_bad_id() -> None:
    s, _ = new_session(10)
    (_a,), (t,) = _agents(s, 1)
    agent_id = broker(s).names["a0"]
    with pytest.raises(InvalidHandle, match=agent_id):
        s.watch(agent_id)
    with pytest.raises(InvalidHandle, match="shepherd-task-00000000deadbeef"):
        s.watch([t, "shepherd-task-00000000deadbeef"])
    with pytest.raises(InvalidHandle, match="nonsense"):
        s.watch("nonsense")
    with pytest.raises(DuplicateIds, match=t):
        s.watch([t, t])
    with pytest.raises(InvalidArgument):
        s.watch([])


def test_a_sink_that_raises_never_affects_settlement() -> None:
    calls: list[object] = []

    def broken(note: object) -> None:
        calls.append(note)
        raise RuntimeError("renderer exploded")

    from actors.testing import SimSession

    s = SimSession.simulated(11, sink=broken)
    (a, b), (t1, t2) = _agents(s, 2)
    told = len(calls)  # each idle script's turn ended without done: told, and failed too
    s.watch(t1)
    s.watch(t2)
    a.done(t1, "completed", "one")
    b.done(t2, "completed", "two")
    s.sim.run_all()
    assert len(calls) == told + 2 and s.sink.failures == told + 2
    assert s.result(t1).status == "completed"  # type: ignore[union-attr]
    assert s.result(t2).status == "completed"  # type: ignore[union-attr]
    assert s.delegate("a0", "next").accepted  # the slot was freed despite the sink


def test_an_agent_exiting_without_done_fails_its_task() -> None:
    s, sink = new_session(12)
    s.spawn("scout", script={"steps": [{"await": "task"}, {"say": "bye"}, {"exit": 3}]})
    t = s.delegate("scout", "x").task_id
    s.watch(t)
    s.sim.run_all()
    (r,) = delivered_results(sink)
    assert (r.status, r.return_code) == ("failed", 1)
    assert r.error is not None and "status 3" in r.error


def test_an_agent_that_ends_its_script_without_done_never_completes() -> None:
    s, sink = new_session(13)
    s.spawn("quiet", script={"steps": [{"await": "task"}, {"say": "I think I am finished"}]})
    t = s.delegate("quiet", "x").task_id
    s.watch(t)
    s.sim.advance(86_400)
    row = s.status("quiet").agents[0]
    assert row.process_state == "idle" and row.task is not None
    assert row.task.state is TaskState.RUNNING
    assert completions(sink) == []


def test_no_notification_after_shutdown() -> None:
    sink = CollectingSink()

    s = SimSession.simulated(14, sink=sink)
    s.spawn("w", script=done_script(sleep=10))
    t = s.delegate("w", "x").task_id
    s.watch(t)
    s.sim.run_until_idle()
    s.shutdown()
    s.sim.advance(60)
    assert [n for n in sink.items if isinstance(n, TaskCompletion)] == []
