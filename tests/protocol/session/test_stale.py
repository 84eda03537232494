"""protocol.session.stale: one stale-wait notification per waiting episode, reset by a reply.

The point where a wait is stale is the task's actor's own timer (``protocol.session.task_stale``,
driven here by the harness as the actor drives it: ``ring`` lets it go off); the session keeps
the episode and tells the parent."""

from __future__ import annotations

from protocol.calls import api
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import StaleWait
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.session.effects import StartTimer
from protocol.session.status import view

from .harness import T0, Session, TaskDue, notes, of, snapshot

THRESHOLD = 60.0


def waiting() -> tuple[Session, str, str, str, str]:
    """a's task waits on a question to b, asked at T0."""
    s = Session(Settings(stale_wait_threshold_s=THRESHOLD))
    a, b = s.spawn("a"), s.spawn("b")
    task_id = s.delegate("a", "port the parser")
    request_id = s.ask(a, "b", "which grammar?")
    return s, a, b, task_id, request_id


def test_a_task_that_begins_to_wait_arms_its_own_timer_for_its_episode() -> None:
    s = Session(Settings(stale_wait_threshold_s=THRESHOLD))
    a, _ = s.spawn("a"), s.spawn("b")
    task_id = s.delegate("a")
    assert s.deadline_armed(task_id) is None  # running: nothing to go off
    effects = s.message(a, "b", "?", expects_reply=True)
    assert s.deadline_armed(task_id) == T0 + THRESHOLD  # the task's actor's timer
    assert of(effects, StartTimer) == [] and not any(k[0] == "stale" for k in s.timers)
    episode = s.state.stale[task_id]
    assert episode.since == T0 and not episode.notified
    s.now += 10
    s.message(a, "b", "and?", expects_reply=True)  # the same episode: the same point
    assert s.deadline_armed(task_id) == T0 + THRESHOLD
    assert len(s.state.stale[task_id].requests) == 2


def test_a_running_task_has_no_timer_and_no_episode() -> None:
    s = Session(Settings(stale_wait_threshold_s=THRESHOLD))
    s.spawn("a")
    task_id = s.delegate("a")
    assert s.state.stale == {} and s.deadline_armed(task_id) is None


def test_the_parent_is_told_once_when_the_episode_is_still_on_at_its_time() -> None:
    s, a, b, task_id, request_id = waiting()
    s.runtime(b, "ready")
    effects = s.ring(task_id)
    assert s.now == T0 + THRESHOLD
    (note,) = notes(effects, StaleWait)
    assert note == StaleWait(
        created_at=T0 + THRESHOLD,
        task_id=task_id,
        agent_id=a,
        agent_name="a",
        description="port the parser",
        waiting_since=T0,
        age_s=THRESHOLD,
        request_id=request_id,
        question="which grammar?",
        recipient_id=b,
        recipient_name="b",
        recipient_status="idle",
    )
    assert s.state.stale[task_id].notified
    told = s.task_stale[task_id]  # its actor's: the episode told of
    assert told is not None and told.told == T0
    assert s.state.tasks[task_id].state is TaskState.WAITING  # this monitor changes no task
    assert s.deadline_armed(task_id) is None  # told: nothing more to go off for
    before = snapshot(s.state)
    s.now += THRESHOLD
    assert s.fire(TaskDue(task_id=task_id, at=T0 + THRESHOLD)) == []  # a crossed timer
    assert snapshot(s.state) == before


def test_a_reply_that_ends_the_episode_forgets_it_and_the_next_is_told_again() -> None:
    s, a, b, task_id, request_id = waiting()
    s.ring(task_id)
    s.now += 1
    s.reply(b, request_id)
    assert task_id not in s.state.stale and s.deadline_armed(task_id) is None
    s.now += 1
    second = s.ask(a, "b", "and the lexer?")
    assert s.state.stale[task_id].since == s.now and not s.state.stale[task_id].notified
    assert s.deadline_armed(task_id) == s.now + THRESHOLD
    (note,) = notes(s.ring(task_id), StaleWait)
    assert note.request_id == second and note.waiting_since == T0 + THRESHOLD + 2


def test_a_reply_that_leaves_a_question_pending_keeps_the_episode_and_its_notice() -> None:
    s, a, b, task_id, first = waiting()
    s.now += 5
    second = s.ask(a, "b", "and the lexer?")
    s.ring(task_id)
    s.reply(b, first)
    episode = s.state.stale[task_id]
    assert episode.since == T0 and episode.notified
    assert s.deadline_armed(task_id) is None  # the same episode, told: never twice
    assert s.fire(TaskDue(task_id=task_id, at=T0 + THRESHOLD)) == []
    assert s.state.tasks[task_id].pending_requests == (second,)


def test_the_notice_names_the_oldest_pending_question() -> None:
    s, a, b, task_id, first = waiting()
    s.now += 5
    second = s.ask(a, "b", "and the lexer?")
    s.reply(b, first)
    (note,) = notes(s.ring(task_id), StaleWait)
    assert note.request_id == second and note.question == "and the lexer?"
    assert note.waiting_since == T0 and note.age_s == THRESHOLD


def test_a_timer_of_an_episode_that_ended_changes_nothing() -> None:
    s, a, b, task_id, request_id = waiting()
    s.reply(b, request_id)
    s.now += 1
    s.ask(a, "b")  # a new episode, since T0 + 1
    before = snapshot(s.state)
    # the timer armed for the first episode's point, its mail crossing the reply
    assert s.fire(TaskDue(task_id=task_id, at=T0 + THRESHOLD)) == []
    assert snapshot(s.state) == before
    assert s.deadline_armed(task_id) == T0 + 1 + THRESHOLD


def test_settling_a_waiting_task_forgets_its_episode() -> None:
    s, _, _, task_id, _ = waiting()
    s.call(api.CancelArgs(task_id=task_id))
    assert s.state.stale == {} and s.deadline_armed(task_id) is None  # its actor is gone
    assert s.fire(TaskDue(task_id=task_id, at=T0 + THRESHOLD)) == []


def test_the_recipient_status_says_when_the_parent_is_asked() -> None:
    s = Session(Settings(stale_wait_threshold_s=THRESHOLD))
    a = s.spawn("a")
    task_id = s.delegate("a")
    s.ask(a, PARENT_ID, "may I push?")
    (note,) = notes(s.ring(task_id), StaleWait)
    assert note.recipient_status == "the parent" and note.recipient_name == PARENT_ID


def test_the_status_view_marks_a_told_episode_stale() -> None:
    s, _, _, task_id, _ = waiting()
    task = view(s.state, "a", T0 + 1).agents[0].task
    assert task is not None and task.task_id == task_id and not task.stale
    s.ring(task_id)
    task = view(s.state, "a", T0 + THRESHOLD).agents[0].task
    assert task is not None and task.stale and task.waiting_age_s == THRESHOLD
