"""Stale waits; wait-for cycles; task notes; prompt/wait compatibility."""

from __future__ import annotations

import pytest

from protocol.calls.render import render_notification
from protocol.core.errors import InvalidHandle, MixedIds
from protocol.records.notifications import StaleWait, WaitCycle
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.wire.envelopes import NoticeEnvelope
from tests.sim.puppet import Puppet
from tests.sim.scenarios import IDLE, broker, delivered_results, new_session


def _stale(sink) -> list[StaleWait]:  # type: ignore[no-untyped-def]
    return [n for n in sink.items if isinstance(n, StaleWait)]


def _waiting_pair(seed: int, threshold: float = 120.0):  # type: ignore[no-untyped-def]
    s, sink = new_session(seed, settings=Settings(stale_wait_threshold_s=threshold))
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    task = s.delegate("scout", "map the code")
    s.sim.run_all()
    return s, sink, task, Puppet(s, "scout"), Puppet(s, "planner")


def test_one_stale_notification_after_the_threshold_with_its_details() -> None:
    s, sink, task, scout, _ = _waiting_pair(1)
    q = scout.ask("planner", "which module?")
    s.sim.advance(119)
    assert _stale(sink) == []
    s.sim.advance(2)
    (note,) = _stale(sink)
    assert (note.task_id, note.agent_name, note.description) == (
        task.task_id,
        "scout",
        "map the code",
    )
    assert (note.request_id, note.question, note.recipient_name) == (
        q.message_id,
        "which module?",
        "planner",
    )
    assert note.recipient_status == "idle" and 120 <= note.age_s < 122
    assert "scout has waited 02:0" in render_notification(note)
    s.sim.advance(3600)
    assert len(_stale(sink)) == 1  # once per waiting episode
    row = s.status("scout").agents[0]
    assert row.task is not None and row.task.stale and row.task.state is TaskState.WAITING


def test_a_reply_ends_the_episode_and_a_new_wait_can_notify_again() -> None:
    s, sink, task, scout, planner = _waiting_pair(2)
    q1 = scout.ask("planner")
    s.sim.advance(60)
    planner.reply("scout", q1.message_id)
    s.sim.advance(600)
    assert _stale(sink) == []
    q2 = scout.ask("planner", "second question")
    s.sim.advance(121)
    assert [n.request_id for n in _stale(sink)] == [q2.message_id]
    assert broker(s).tasks[task.task_id].state is TaskState.WAITING  # never changes task state


def test_no_stale_notice_for_completed_tasks_or_merely_idle_agents() -> None:
    s, sink, task, scout, _ = _waiting_pair(3)
    s.sim.advance(3600)  # scout idle and running: not waiting, nothing to say
    scout.ask("planner")
    s.sim.advance(30)
    scout.done(task.task_id, "blocked", "gave up")
    s.sim.advance(3600)
    assert _stale(sink) == []


def test_a_reply_timeout_closes_the_wait_before_it_goes_stale() -> None:
    s, sink, _, scout, _ = _waiting_pair(4)
    scout.ask("planner", reply_timeout_s=60)
    s.sim.advance(3600)
    assert _stale(sink) == []


def test_a_request_closing_a_cycle_is_reported_naming_it() -> None:
    s, sink = new_session(5)
    for name in ("a", "b", "c"):
        s.spawn(name, script=IDLE)
        s.delegate(name, f"work {name}")
    s.sim.run_all()
    a, b, c = (Puppet(s, n) for n in ("a", "b", "c"))
    a.ask("b")
    b.ask("c")
    s.sim.run_all()
    assert [n for n in sink.items if isinstance(n, WaitCycle)] == []
    closing = c.ask("a")
    s.sim.run_all()
    (cycle,) = [n for n in sink.items if isinstance(n, WaitCycle)]
    assert cycle.cycle == ("c", "a", "b", "c") and cycle.request_id == closing.message_id
    notices = [
        e
        for e in s.sim_launcher.driver("c").received
        if isinstance(e, NoticeEnvelope) and e.code == "wait_cycle"
    ]
    assert len(notices) == 1 and "c -> a -> b -> c" in notices[0].text
    assert c.ack_for(closing).accepted  # reported, not refused


def test_two_agents_asking_each_other_is_a_cycle() -> None:
    s, sink, _, scout, planner = _waiting_pair(6)
    s.delegate("planner", "plan")
    scout.ask("planner")
    planner.ask("scout")
    s.sim.run_all()
    (cycle,) = [n for n in sink.items if isinstance(n, WaitCycle)]
    assert cycle.cycle == ("planner", "scout", "planner")


def test_one_note_per_task_open_while_waiting_finalised_once() -> None:
    s, _, task, scout, planner = _waiting_pair(7)
    notes = s.notes
    q = scout.ask("planner", "which module?")
    s.message("scout", "just a message")
    planner.say("scout", "another message")
    s.sim.run_all()
    assert list(notes.notes) == [task.task_id]
    text = notes.notes[task.task_id]
    assert "map the code" in text and "which module?" in text and "## Result" not in text
    planner.reply("scout", q.message_id)
    scout.done(task.task_id, "completed", "mapped")
    scout.done(task.task_id, "completed", "again")
    s.sim.run_all()
    s.cancel(task.task_id)
    assert notes.finalised == {task.task_id: 1}
    final = notes.notes[task.task_id]
    assert final.count("## Result") == 1 and "status: completed" in final and "mapped" in final


def test_prompt_maps_onto_a_task_and_watch_and_wait_resolve_it() -> None:
    s, sink = new_session(8)
    s.spawn("w", script=IDLE)
    p = s.prompt("w", "old style prompt")
    assert p.prompt_id.startswith("shepherd-prompt-") and p.task_id.startswith("shepherd-task-")
    watch = s.watch(p.prompt_id)
    assert watch.ids == (p.task_id,) and watch.pending == (p.task_id,)
    s.sim.run_all()
    Puppet(s, "w").done(p.task_id, "completed", "answered")
    waited = s.wait([p.prompt_id], timeout_s=10)
    assert [r.text for r in waited.completed] == ["answered"] and not waited.timed_out
    s.sim.advance(1)
    assert [r.task_id for r in delivered_results(sink)] == [p.task_id]


def test_wait_times_out_with_what_is_still_pending() -> None:
    s, _ = new_session(9)
    s.spawn("w", script=IDLE)
    t = s.delegate("w", "x").task_id
    waited = s.wait(t, timeout_s=30)
    assert waited.timed_out and waited.pending == (t,) and waited.completed == ()


def test_prompt_and_task_ids_cannot_be_mixed_and_agent_ids_are_refused() -> None:
    s, _ = new_session(10)
    s.spawn("a", script=IDLE)
    s.spawn("b", script=IDLE)
    p = s.prompt("a", "x")
    t = s.delegate("b", "y")
    with pytest.raises(MixedIds):
        s.watch([p.prompt_id, t.task_id])
    with pytest.raises(MixedIds):
        s.wait([t.task_id, p.prompt_id], timeout_s=1)
    with pytest.raises(InvalidHandle, match=t.agent_id):
        s.wait(t.agent_id, timeout_s=1)
    with pytest.raises(InvalidHandle, match="shepherd-prompt-0000000000000000"):
        s.watch("shepherd-prompt-0000000000000000")
