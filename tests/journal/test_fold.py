"""Folding the journal after a restart: a waiting task's current episode (from the request
that made it wait, across requests opened and closed meanwhile) and whether that episode was
already reported stale."""

from __future__ import annotations

import msgspec

from protocol.records.requests import RequestRecord, RequestState
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session.restore import Restore, fold

TASK = TaskRecord(
    task_id="t", agent_id="a", description="d", state=TaskState.RUNNING, created_at=1.0
)


def _request(rid: str, at: float) -> RequestRecord:
    return RequestRecord(request_id=rid, sender_id="a", target_id="b", created_at=at, task_id="t")


def _closed(record: RequestRecord) -> RequestRecord:
    return msgspec.structs.replace(record, state=RequestState.REPLIED, resolved_at=99.0)


def test_an_episode_runs_from_its_first_request_while_any_stays_pending() -> None:
    a, b = _request("a1", 10.0), _request("b1", 20.0)
    state = fold([TASK, a, b, _closed(a)])  # a answered, b still open: the same episode
    task = state.tasks["t"]
    assert task.state is TaskState.WAITING and task.pending_requests == ("b1",)
    assert task.waiting_since == 10.0
    assert state.episodes["t"] == ("a1", "b1")


def test_a_request_opened_after_the_task_stopped_waiting_starts_a_new_episode() -> None:
    a, b = _request("a1", 10.0), _request("b1", 20.0)
    state = fold([TASK, a, _closed(a), b])
    assert state.tasks["t"].waiting_since == 20.0
    assert state.episodes["t"] == ("b1",)


def test_a_notice_counts_for_the_episode_it_was_given_in_only() -> None:
    a, b, c = _request("a1", 10.0), _request("b1", 20.0), _request("c1", 30.0)
    same = fold([TASK, a, b, _closed(a)])
    assert Restore(state=same, stale_noticed={"t": {"a1"}}).stale_notice_given("t")
    assert Restore(state=same, stale_noticed={"t": {"b1"}}).stale_notice_given("t")
    later = fold([TASK, a, _closed(a), c])
    assert not Restore(state=later, stale_noticed={"t": {"a1"}}).stale_notice_given("t")
    assert not Restore(state=later).stale_notice_given("t")
    running = fold([TASK, a, _closed(a)])
    assert running.tasks["t"].state is TaskState.RUNNING and "t" not in running.episodes
