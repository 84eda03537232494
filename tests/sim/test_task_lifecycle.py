"""Issue 13: ending a task stops its work, a turn ending without done is told, an agent that
exits unasked is told, and the answers say what happened (simulated scripted agents)."""

from __future__ import annotations

import pytest

from protocol.records.notifications import Notice
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.wire.envelopes import ControlEnvelope, NoticeEnvelope
from tests.sim.puppet import Puppet
from tests.sim.scenarios import broker, delivered_results, new_session

#: one task at a time: a long piece of work, then done with the task's own text
WORKER = {
    "steps": [
        {"await": "task"},
        {"say": "working on {last}"},
        {"sleep": 100},
        {"done": {"status": "completed", "summary": "did {last}"}},
        {"await": "any"},
    ]
}


def _notices(sink, code: str) -> list[Notice]:  # type: ignore[no-untyped-def]
    return [n for n in sink.items if isinstance(n, Notice) and n.code == code]


def _end(s, task_id: str, how: str) -> None:  # type: ignore[no-untyped-def]
    if how == "cancel":
        assert not s.cancel(task_id, "not needed").already_settled
    elif how == "fail":
        assert not s.fail(task_id, "parent gave up").already_settled
    else:  # the deadline (the task was delegated with one)
        s.sim.advance(61)


@pytest.mark.parametrize("how", ["cancel", "fail", "time_out"])
def test_ending_a_task_stops_its_work_and_the_agent_takes_the_next(how: str) -> None:
    s, _ = new_session(31)
    s.spawn("worker", script=WORKER)
    first = s.delegate("worker", "first", timeout_minutes=1 if how == "time_out" else None)
    s.sim.advance(10)  # the worker sleeps inside its first task's turn
    assert s.status("worker").agents[0].process_state == "working"
    _end(s, first.task_id, how)
    s.sim.run_until_idle()
    driver = s.sim_launcher.driver("worker")
    (control,) = [e for e in driver.received if isinstance(e, ControlEnvelope)]
    assert (control.action, control.task_id) == ("cancel_task", first.task_id)
    # no separate notice: a notice would be one more turn only to say the task is gone
    assert not [e for e in driver.received if isinstance(e, NoticeEnvelope)]
    (row,) = s.status("worker").agents
    assert row.process_state == "idle"  # the turn ended with the task's work
    assert driver.machine.waiting_for == "task"  # back at its `await task`
    # the next task runs to the end: the first task's sleep coming back is ignored, so the
    # second is done no earlier than a whole sleep after it started
    started = s.sim.vclock.now()
    second = s.delegate("worker", "second")
    s.sim.run_all()
    result = s.result(second.task_id)
    assert result is not None and (result.status, result.text) == ("completed", "did second")
    assert result.completed_at >= started + 100
    # the first task's work never reached its done (a done would have got a receipt)
    assert [a.task_id for a in driver.acks if a.task_id is not None] == [second.task_id]
    first_result = s.result(first.task_id)
    assert first_result is not None
    assert (
        first_result.status
        == {
            "cancel": "cancelled",
            "fail": "failed",
            "time_out": "timed_out",
        }[how]
    )
    s.shutdown()


def test_a_task_still_queued_at_the_agent_is_dropped_when_it_ends() -> None:
    # the worker is busy with a parent message's turn when the task arrives; the task is
    # cancelled before the script takes it: the script never starts it, and takes the next
    script = {
        "steps": [
            {"await": "message"},
            {"sleep": 50},
            {"await": "task"},
            {"done": {"status": "completed", "summary": "took {last}"}},
            {"await": "task"},
            {"done": {"status": "completed", "summary": "took {last}"}},
            {"await": "any"},
        ]
    }
    s, _ = new_session(32)
    s.spawn("worker", script=script)
    s.message("worker", "busy for a while")
    s.sim.advance(1)
    first = s.delegate("worker", "never started")
    s.sim.advance(1)
    assert s.sim_launcher.driver("worker").machine.queued == 1
    s.cancel(first.task_id)
    s.sim.advance(1)
    assert s.sim_launcher.driver("worker").machine.queued == 0
    second = s.delegate("worker", "the real one")
    s.sim.run_all()
    result = s.result(second.task_id)
    assert result is not None and result.text == "took the real one"
    s.shutdown()


def test_cancelling_an_already_settled_task_says_so() -> None:
    s, _ = new_session(33)
    s.spawn("worker", script=WORKER)
    task = s.delegate("worker", "x")
    s.sim.run_all()
    assert s.result(task.task_id).status == "completed"  # type: ignore[union-attr]
    for answer in (s.cancel(task.task_id), s.fail(task.task_id, "too late")):
        assert answer.already_settled and answer.status == "completed"
    other = s.delegate("worker", "y")
    assert not s.cancel(other.task_id).already_settled
    s.shutdown()


# ---------------------------------------------------------------------- turn ended without done

NEVER_DONE = {
    "steps": [
        {"await": "task"},
        {"say": "looked at {last}"},
        {"await": "message"},
        {"say": "still going: {last}"},
        {"await": "any"},
    ]
}


def test_each_turn_ending_without_done_is_told_once_with_its_output() -> None:
    s, sink = new_session(34)
    s.spawn("worker", script=NEVER_DONE)
    task = s.delegate("worker", "the code")
    s.sim.run_all()
    (first,) = _notices(sink, "turn_ended_without_done")
    assert first.task_id == task.task_id and first.agent_id == task.agent_id
    assert "worker's turn ended without done" in first.text
    assert "looked at the code" in first.text  # the tail of what the turn printed
    (row,) = s.status("worker").agents
    assert row.task is not None and row.task.state is TaskState.RUNNING
    assert row.task.turns_without_done == 1 and row.task.last_turn_ended_at is not None
    s.message("worker", "more")
    s.sim.run_all()
    told = _notices(sink, "turn_ended_without_done")
    assert len(told) == 2 and "still going: " in told[1].text
    assert s.status("worker").agents[0].task.turns_without_done == 2  # type: ignore[union-attr]
    s.sim.run_all()
    assert len(_notices(sink, "turn_ended_without_done")) == 2  # once per turn, not per look
    s.shutdown()


def test_a_turn_that_waits_for_a_reply_or_calls_done_is_not_told() -> None:
    asker = {
        "steps": [
            {"await": "task"},
            {"message": {"to": "shepherd", "text": "which one?", "expects_reply": True}},
            {"await": "reply"},
            {"done": {"status": "completed", "summary": "{last}"}},
            {"await": "any"},
        ]
    }
    s, sink = new_session(35)
    s.spawn("worker", script=asker)
    task = s.delegate("worker", "pick")
    s.sim.run_all()
    (row,) = s.status("worker").agents
    assert row.process_state == "idle" and row.task.state is TaskState.WAITING  # type: ignore[union-attr]
    assert _notices(sink, "turn_ended_without_done") == []  # it asked: ending the turn is right
    (question,) = [r.request_id for r in row.task.pending_requests]  # type: ignore[union-attr]
    s.message("worker", "the second", reply_to=question)
    s.sim.run_all()
    assert s.result(task.task_id).text == "the second"  # type: ignore[union-attr]
    assert _notices(sink, "turn_ended_without_done") == []  # it called done in that turn
    s.shutdown()


@pytest.mark.parametrize("seed", range(40))
def test_done_then_turn_end_is_never_told_whatever_the_interleaving(seed: int) -> None:
    # the done is still being decided by the task actor when the turn's end reaches the broker
    s, sink = new_session(seed)
    s.spawn("worker", script={"steps": [{"await": "task"}, {"done": {"status": "completed"}}]})
    task = s.delegate("worker", "x")
    s.sim.run_all()
    assert s.result(task.task_id).status == "completed"  # type: ignore[union-attr]
    assert _notices(sink, "turn_ended_without_done") == []
    assert broker(s).turn_stats == {} and broker(s).turns == {}
    s.shutdown()


def test_a_refused_done_leaves_the_turn_told() -> None:
    s, sink = new_session(36)
    s.spawn("worker", script={"steps": [{"await": "task"}, {"await": "any"}]})
    s.spawn("peer", script={"steps": [{"await": "any"}]})
    task = s.delegate("worker", "x")
    s.sim.run_all()
    worker = Puppet(s, "worker")
    worker.ask("peer", "a question left open")
    s.sim.run_all()
    worker.runtime("turn_start")
    refused = worker.done(task.task_id, "completed", "too soon")  # unresolved request
    worker.runtime("turn_end")
    s.sim.run_all()
    assert not worker.ack_for(refused).accepted
    # waiting on its own question: not told (only the first turn, before it asked, was)
    assert len(_notices(sink, "turn_ended_without_done")) == 1
    s.shutdown()


# ---------------------------------------------------------------------- exits


def test_an_agent_that_exits_unasked_is_always_told() -> None:
    s, sink = new_session(37)
    s.spawn("idle", script={"steps": [{"exit": 4}]})  # no task at all
    s.spawn("busy", script={"steps": [{"await": "task"}, {"exit": 3}]})
    s.sim.run_all()
    task = s.delegate("busy", "x")
    s.watch(task.task_id)
    s.sim.run_all()
    exits = {n.agent_id: n for n in _notices(sink, "agent_exited")}
    by_name = {a.name: a.agent_id for a in s.status().agents}
    assert "exited with status 4" in exits[by_name["idle"]].text
    assert exits[by_name["idle"]].task_id is None
    busy = exits[by_name["busy"]]
    assert "exited with status 3" in busy.text and busy.task_id == task.task_id
    (result,) = delivered_results(sink)
    assert (result.status, result.return_code) == ("failed", 1)
    s.close("idle")  # closing an exited agent says nothing more
    s.sim.run_all()
    assert len(_notices(sink, "agent_exited")) == 2
    s.shutdown()


def test_a_closed_agent_is_not_told_as_an_exit() -> None:
    s, sink = new_session(38)
    s.spawn("worker", script=WORKER)
    s.sim.run_all()
    s.close("worker")
    s.sim.run_all()
    assert _notices(sink, "agent_exited") == []
    s.shutdown()


# ---------------------------------------------------------------------- scripted await reply


def test_a_scripted_await_reply_is_not_ended_by_an_unrelated_notice() -> None:
    # scout asks planner; planner asks scout back: a wait cycle, told to the planner by a
    # notice that closes nothing. The planner keeps waiting until its own question times out.
    scout = {
        "steps": [
            {"await": "task"},
            {"message": {"to": "planner", "text": "first?", "expects_reply": True}},
            {"await": "reply"},
            {"await": "any"},
        ]
    }
    planner = {
        "steps": [
            {"await": "task"},
            {"message": {"to": "scout", "text": "and you?", "expects_reply": True}},
            {"await": "reply"},
            {"say": "planner got: {last}"},
            {"await": "any"},
        ]
    }
    s, _ = new_session(39, settings=Settings(default_reply_timeout_s=300))
    s.spawn("scout", script=scout)
    s.spawn("planner", script=planner)
    s.delegate("scout", "map")
    s.sim.run_all(max_time=10)
    s.delegate("planner", "plan")
    s.sim.advance(10)
    driver = s.sim_launcher.driver("planner")
    codes = [e.code for e in driver.received if isinstance(e, NoticeEnvelope)]
    assert codes == ["wait_cycle"]
    assert driver.machine.waiting_for == "reply"  # the cycle notice did not answer it
    s.sim.advance(300)  # its question times out: that notice does end the wait
    assert driver.machine.waiting_for != "reply"  # (then `await any` took the cycle notice)
    read = s.read("planner").lines
    assert any("planner got: " in line and "timed out" in line for line in read), read
    s.shutdown()
