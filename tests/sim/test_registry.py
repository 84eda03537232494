"""Ids, the one-task slot, waiting, settlement, requests, timeout, close."""

from __future__ import annotations

import msgspec
import pytest

from protocol.calls import api
from protocol.calls.answers import preview_result
from protocol.core.errors import AgentBusy, InvalidArgument, InvalidHandle
from protocol.core.ids import IdKind, kind_of
from protocol.records.tasks import TaskResult, TaskState
from tests.sim.puppet import Puppet
from tests.sim.scenarios import IDLE, broker, delivered_results, new_session


def _plain(answer: api.SettleResult) -> TaskResult:
    """The task result inside a cancel/fail answer."""
    fields = msgspec.structs.asdict(answer)
    fields.pop("already_settled")
    return TaskResult(**fields)


def test_ids_are_opaque_and_scoped_to_their_session() -> None:
    a, _ = new_session(1)
    b, _ = new_session(2)
    a.spawn("scout", script=IDLE)
    task = a.delegate("scout", "x")
    assert kind_of(task.task_id) is IdKind.TASK and kind_of(task.agent_id) is IdKind.AGENT
    with pytest.raises(InvalidHandle, match=task.task_id):
        b.watch(task.task_id)
    with pytest.raises(InvalidHandle, match="scout"):
        b.delegate("scout", "x")


def test_one_active_task_per_agent_and_messages_still_accepted() -> None:
    s, _ = new_session(3)
    s.spawn("scout", script=IDLE)
    first = s.delegate("scout", "first")
    with pytest.raises(AgentBusy, match=first.task_id):
        s.delegate("scout", "second")
    receipt = s.message("scout", "still listening?")
    assert receipt.accepted and receipt.request_id is None
    s.sim.run_all()
    assert s.status("scout").agents[0].task.task_id == first.task_id  # type: ignore[union-attr]


def test_messages_do_not_take_the_task_slot() -> None:
    s, _ = new_session(4)
    s.spawn("scout", script=IDLE)
    s.message("scout", "hello")
    s.message("scout", "are you there?", expects_reply=True)
    s.sim.run_all()
    assert s.delegate("scout", "now a task").accepted


def test_waiting_task_stays_non_terminal_however_long_it_waits() -> None:
    s, sink = new_session(5)
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    task = s.delegate("scout", "x")
    s.sim.run_all()
    scout = Puppet(s, "scout")
    scout.ask("planner")
    s.sim.advance(7 * 24 * 3600)
    row = s.status("scout").agents[0]
    assert row.task is not None and row.task.state is TaskState.WAITING
    assert row.process_state == "idle"
    assert delivered_results(sink) == [] and s.result(task.task_id) is None


def test_settlement_is_idempotent_first_terminal_event_wins() -> None:
    s, _ = new_session(6)
    s.spawn("scout", script=IDLE)
    task = s.delegate("scout", "x")
    s.sim.run_all()
    scout = Puppet(s, "scout")
    first = scout.done(task.task_id, "completed", "first")
    s.sim.run_all()
    second = scout.done(task.task_id, "failed", "second")
    s.sim.run_all()
    cancelled = s.cancel(task.task_id)
    failed = s.fail(task.task_id, "too late")
    stored = s.result(task.task_id)
    assert stored is not None and stored.status == "completed" and stored.text == "first"
    # the stored result, and said to be one that had settled before (nothing changed)
    assert cancelled.already_settled and failed.already_settled
    assert _plain(cancelled) == stored and _plain(failed) == stored
    assert scout.ack_for(first).accepted and scout.ack_for(first).result == preview_result(stored)
    assert scout.ack_for(second).result == preview_result(stored)  # the stored result, unchanged


def test_request_resolution_and_cancellation() -> None:
    s, _ = new_session(7)
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    task = s.delegate("scout", "x")
    s.sim.run_all()
    scout, planner = Puppet(s, "scout"), Puppet(s, "planner")
    q1 = scout.ask("planner", "one")
    q2 = scout.ask("planner", "two")
    s.sim.run_all()
    b = broker(s)
    assert b.tasks[task.task_id].pending_requests == (q1.message_id, q2.message_id)
    planner.reply("scout", q1.message_id)
    s.sim.run_all()
    assert b.tasks[task.task_id].state is TaskState.WAITING  # one question still open
    assert b.requests[q1.message_id].state == "replied"
    result = s.cancel(task.task_id, "enough")
    s.sim.run_all()
    assert result.status == "cancelled" and result.return_code == 130
    assert b.requests[q2.message_id].state == "cancelled"


def test_task_times_out_at_its_deadline_not_before() -> None:
    s, sink = new_session(8)
    s.spawn("scout", script=IDLE)
    task = s.delegate("scout", "x", timeout_minutes=1)
    s.sim.advance(59.9)
    assert s.result(task.task_id) is None
    s.sim.advance(0.2)
    s.sim.run_all()
    result = s.result(task.task_id)
    assert result is not None and result.status == "timed_out" and result.return_code == 124
    s.watch(task.task_id)  # already settled: answered at once, never delivered
    assert delivered_results(sink) == []


def test_close_cancels_the_task_and_its_requests() -> None:
    s, _ = new_session(9)
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    task = s.delegate("scout", "x")
    s.sim.run_all()
    q = Puppet(s, "scout").ask("planner")
    s.sim.run_all()
    closed = s.close("scout")
    s.sim.run_all()
    assert closed.closed and closed.cancelled_task_id == task.task_id
    result = s.result(task.task_id)
    assert result is not None and result.status == "cancelled" and result.return_code == 130
    assert broker(s).requests[q.message_id].state == "cancelled"
    row = s.status("scout").agents[0]
    assert row.closed and row.process_state == "exited"
    with pytest.raises(InvalidHandle, match="closed"):
        s.delegate("scout", "again")


def test_bad_arguments_get_typed_errors_naming_what_was_wrong() -> None:
    s, _ = new_session(10)
    with pytest.raises(InvalidArgument, match="Bad Name"):
        s.spawn("Bad Name")
    s.spawn("scout", script=IDLE)
    with pytest.raises(InvalidArgument, match="already exists"):
        s.spawn("scout")
    with pytest.raises(InvalidArgument, match="empty"):
        s.delegate("scout", "   ")
    with pytest.raises(InvalidArgument, match="timeout"):
        s.delegate("scout", "x", timeout_minutes=-1)
    with pytest.raises(InvalidHandle, match="nobody"):
        s.message("nobody", "hi")
    with pytest.raises(InvalidArgument, match="message"):
        s.message("scout", "")
    # nothing accepted before was lost
    assert s.delegate("scout", "real work").accepted
