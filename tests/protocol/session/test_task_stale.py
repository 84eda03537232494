"""A task's stale wait as its actor decides it (:mod:`protocol.session.task_stale`), without a
runtime: the point its one timer is armed for while it waits, and the report, once per
episode."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.records.tasks import TaskRecord
from protocol.session.task import Attach, Detach, receive
from protocol.session.task_budget import alarm
from protocol.session.task_stale import Stale, StaleFound, due_at, rang

from .test_task_budget import T0, task

AFTER = 60.0


def running(deadline_at: float | None = None) -> TaskRecord:
    return task(None, deadline_at=deadline_at)


def ask(record: TaskRecord, request_id: str, at: float) -> TaskRecord:
    record, _ = receive(record, Attach(request_id=request_id, at=at))
    return record


def answered(record: TaskRecord, request_id: str) -> TaskRecord:
    record, _ = receive(record, Detach(request_id=request_id))
    return record


def test_a_running_task_has_no_stale_point_and_a_waiting_one_has_its_episodes() -> None:
    stale = Stale(after_s=AFTER)
    record = running()
    assert due_at(record, stale) is None
    waiting = ask(record, "r1", T0 + 5)
    assert due_at(waiting, stale) == T0 + 5 + AFTER
    assert due_at(waiting, None) is None  # no state (a task restored before it had one)
    # a second question in the same episode: the same point
    assert due_at(ask(waiting, "r2", T0 + 20), stale) == T0 + 5 + AFTER
    # the episode ends with its last answer: no point
    assert due_at(answered(waiting, "r1"), stale) is None


def test_the_timer_told_at_the_point_reports_once_and_keeps_the_episode_told() -> None:
    stale: Stale | None = Stale(after_s=AFTER)
    waiting = ask(running(), "r1", T0 + 5)
    point = T0 + 5 + AFTER
    # a timer armed for an earlier point (crossed mail): nothing, nothing kept
    assert rang(waiting, stale, point - 1, point - 1) == (stale, None)
    stale, report = rang(waiting, stale, point, point + 0.5)
    assert report == StaleFound(record=waiting, since=T0 + 5, at=point + 0.5)
    assert stale == Stale(after_s=AFTER, told=T0 + 5)
    assert due_at(waiting, stale) is None  # told: never again for this episode
    assert rang(waiting, stale, point, point + 1) == (stale, None)
    # the next episode has its own point, and is told again
    again = ask(answered(waiting, "r1"), "r3", T0 + 100)
    assert due_at(again, stale) == T0 + 100 + AFTER
    _, report = rang(again, stale, T0 + 100 + AFTER, T0 + 100 + AFTER)
    assert report is not None and report.since == T0 + 100


def test_the_one_timer_is_the_earliest_of_the_deadline_and_the_stale_point() -> None:
    stale = Stale(after_s=AFTER)
    soon = ask(running(deadline_at=T0 + 30), "r1", T0 + 5)
    assert alarm(soon, None, stale) == T0 + 30  # the deadline first
    late = ask(running(deadline_at=T0 + 600), "r1", T0 + 5)
    assert alarm(late, None, stale) == T0 + 5 + AFTER  # the stale point first
    assert alarm(late, None, None) == T0 + 600  # no stale state: its deadline alone
    assert alarm(running(), None, stale) is None  # running, no deadline: no timer


@given(
    st.lists(
        st.tuples(st.floats(0.0, 500.0), st.floats(0.0, 500.0), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_each_episode_is_reported_at_most_once_and_never_before_its_point(
    steps: list[tuple[float, float, bool]],
) -> None:
    """Random episodes (a question at some time, then the timer going off at any later time,
    then perhaps the answer): each episode is reported at most once, and never before
    ``since + after_s``."""
    stale: Stale | None = Stale(after_s=AFTER)
    record = running()
    now, told = T0, []
    for i, (wait, late, answer) in enumerate(steps):
        now += wait
        if not record.pending_requests:
            record = ask(record, f"r{i}", now)
        armed = alarm(record, None, stale)
        at = now + late
        if armed is not None:
            stale, report = rang(record, stale, armed, max(at, armed))
            if report is not None:
                assert report.at >= report.since + AFTER
                told.append(report.since)
        if answer:
            record = answered(record, record.pending_requests[0])
    assert len(told) == len(set(told))
