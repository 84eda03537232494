"""protocol.session.requests: opening and closing requests; wait-for cycles; reply deadlines;
the asker's task waits and runs again."""

from __future__ import annotations

from protocol.calls import api
from protocol.core.errors import ErrorInfo
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import Notice, WaitCycle
from protocol.records.requests import RequestRecord, RequestState
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.session import inbound
from protocol.session.effects import (
    AppendNote,
    CancelTimer,
    Deliver,
    Journal,
    Notify,
    RequestTimeout,
    StartTimer,
)
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope, ReplyEnvelope

from .harness import T0, Session, answer, delivered, journaled, notes, receipt


def three(**settings: object) -> tuple[Session, str, str, str]:
    s = Session(Settings(**settings))  # type: ignore[arg-type]
    return s, s.spawn("a"), s.spawn("b"), s.spawn("c")


# ------------------------------------------------------------------ opening


def test_a_question_opens_a_request_journaled_before_it_is_forwarded() -> None:
    s, a, b, _ = three()
    task_id = s.delegate("a")
    effects = s.message(a, "b", "which file?", expects_reply=True, reply_timeout_s=30.0)
    (record,) = journaled(effects, RequestRecord)
    (env,) = delivered(effects, MessageEnvelope, b)
    assert record.request_id == env.message_id and env.expects_reply
    assert (record.sender_id, record.target_id, record.task_id) == (a, b, task_id)
    assert record.question == "which file?" and record.deadline_at == T0 + 30
    journal_at = next(i for i, e in enumerate(effects) if isinstance(e, Journal))
    deliver_at = next(i for i, e in enumerate(effects) if isinstance(e, Deliver))
    assert journal_at < deliver_at
    assert AppendNote(task_id=task_id, line=f"asked b ({record.request_id}): which file?") in (
        effects
    )
    assert StartTimer(delay=30.0, event=RequestTimeout(request_id=record.request_id)) in effects
    assert receipt(effects).request_id == record.request_id


def test_the_askers_task_waits_from_its_first_question_until_none_is_pending() -> None:
    s, a, b, c = three()
    task_id = s.delegate("a")
    first = s.ask(a, "b")
    s.now += 10
    second = s.ask(a, "c")
    task = s.state.tasks[task_id]
    assert task.state is TaskState.WAITING and task.waiting_since == T0
    assert task.pending_requests == (first, second)
    s.reply(b, first)
    task = s.state.tasks[task_id]
    assert task.state is TaskState.WAITING and task.pending_requests == (second,)
    assert task.waiting_since == T0
    s.reply(c, second)
    task = s.state.tasks[task_id]
    assert task.state is TaskState.RUNNING and task.waiting_since is None


def test_the_askers_note_logs_how_each_question_closed() -> None:
    s, a, b, _ = three()
    task_id = s.delegate("a")
    replied = s.ask(a, "b")
    effects = s.reply(b, replied, "the one in src/")
    assert AppendNote(task_id=task_id, line=f"b replied ({replied}): the one in src/") in effects
    timed_out = s.ask(a, "b", reply_timeout_s=5.0)
    s.now += 5
    effects = s.fire_timer(("reply", timed_out))
    (line,) = [e.line for e in effects if isinstance(e, AppendNote)]
    assert line.startswith(f"request {timed_out} to b timed_out")
    cancelled = s.ask(a, "b")
    effects = s.call(api.CloseArgs(agent="b"))
    (line,) = [e.line for e in effects if isinstance(e, AppendNote)]
    assert line.startswith(f"request {cancelled} to b cancelled: b is no longer running")


def test_the_default_reply_timeout_applies_and_none_means_no_deadline() -> None:
    s, a, _, _ = three(default_reply_timeout_s=60.0)
    request_id = s.ask(a, "b")
    assert s.state.requests[request_id].deadline_at == T0 + 60
    assert s.timers[("reply", request_id)] == RequestTimeout(request_id=request_id)
    s, a, _, _ = three()
    request_id = s.ask(a, "b")
    assert s.state.requests[request_id].deadline_at is None
    assert ("reply", request_id) not in s.timers


def test_a_question_without_a_task_opens_a_request_that_no_task_waits_for() -> None:
    s, a, _, _ = three()
    request_id = s.ask(a, "b")
    assert s.state.requests[request_id].task_id is None and s.state.tasks == {}


def test_the_parents_question_opens_a_request_from_the_parent() -> None:
    s, _, b, _ = three()
    result = answer(s.parent_says("b", "which file?", expects_reply=True))
    request = s.state.requests[result.request_id]
    assert (request.sender_id, request.target_id) == (PARENT_ID, b)
    assert request.request_id == result.message_id


# ------------------------------------------------------------------ wait-for cycles


def test_a_question_that_closes_a_wait_cycle_is_reported_and_still_opens() -> None:
    s, a, b, _ = three()
    s.delegate("b")
    s.ask(a, "b")
    effects = s.message(b, "a", "and you?", expects_reply=True)
    (cycle,) = notes(effects, WaitCycle)
    request_id = receipt(effects).request_id
    assert request_id is not None
    assert cycle.request_id == request_id
    assert cycle.cycle == ("b", "a", "b") and cycle.agent_ids == (b, a, b)
    (told,) = delivered(effects, NoticeEnvelope, b)
    assert told.code == "wait_cycle" and told.ref_id == request_id
    assert "b -> a -> b" in told.text
    assert s.state.requests[request_id].pending  # reported, not refused
    assert s.state.tasks[s.state.agents[b].active_task or ""].state is TaskState.WAITING


def test_a_longer_cycle_is_named_whole() -> None:
    s, a, b, c = three()
    s.ask(a, "b")
    s.ask(b, "c")
    effects = s.message(c, "a", "?", expects_reply=True)
    (cycle,) = notes(effects, WaitCycle)
    assert cycle.cycle == ("c", "a", "b", "c")


def test_questions_that_close_no_cycle_report_none() -> None:
    s, a, _, c = three()
    s.ask(a, "b")
    s.ask(a, "c")
    effects = s.message(c, "b", "?", expects_reply=True)  # a waits on both; no loop
    assert notes(effects, WaitCycle) == []


def test_a_cycle_through_the_parent_tells_the_parent_and_only_an_agent_asker() -> None:
    s, a, _, _ = three()
    request_id = s.ask(a, PARENT_ID)
    effects = s.parent_says("a", "first, which branch?", expects_reply=True)
    (cycle,) = notes(effects, WaitCycle)
    assert cycle.cycle == (PARENT_ID, "a", PARENT_ID)
    assert delivered(effects, NoticeEnvelope) == []  # the parent asked: no agent to tell
    assert s.state.requests[request_id].pending


def test_a_cycle_ends_when_a_question_in_it_is_answered() -> None:
    s, a, b, _ = three()
    first = s.ask(a, "b")
    s.ask(b, "a")
    s.reply(b, first)
    effects = s.message(a, "b", "again?", expects_reply=True)  # b still waits on a: a loop
    assert len(notes(effects, WaitCycle)) == 1
    assert sorted(s.state.requests.wait_edges()) == sorted([(a, b), (b, a)])


# ------------------------------------------------------------------ closing


def test_a_reply_deadline_times_the_request_out_and_tells_the_agent_asker() -> None:
    s, a, _, _ = three()
    task_id = s.delegate("a")
    request_id = s.ask(a, "b", reply_timeout_s=5.0)
    s.now += 5
    effects = s.fire_timer(("reply", request_id))
    request = s.state.requests[request_id]
    assert request.state is RequestState.TIMED_OUT and request.resolved_at == T0 + 5
    (told,) = delivered(effects, NoticeEnvelope, a)
    assert told.code == "request_timed_out" and told.ref_id == request_id
    assert s.state.tasks[task_id].state is TaskState.RUNNING
    assert journaled(effects, RequestRecord) == [request]


def test_a_reply_deadline_of_the_parents_question_tells_the_parent() -> None:
    s, _, b, _ = three()
    result = answer(s.parent_says("b", "?", expects_reply=True, reply_timeout_s=1.0))
    effects = s.fire(RequestTimeout(request_id=result.request_id))
    (note,) = notes(effects, Notice)
    assert note.code == "request_timed_out" and note.refs == (result.request_id,)
    assert note.agent_id == b  # whom the unanswered question was for


def test_a_reply_cancels_the_reply_deadline_and_a_late_timer_changes_nothing() -> None:
    s, a, b, _ = three()
    request_id = s.ask(a, "b", reply_timeout_s=5.0)
    effects = s.reply(b, request_id)
    assert CancelTimer(key=("reply", request_id)) in effects
    assert ("reply", request_id) not in s.timers
    assert s.fire(RequestTimeout(request_id=request_id)) == []
    assert s.state.requests[request_id].state is RequestState.REPLIED


def test_a_settled_task_cancels_its_questions_without_telling_the_asker() -> None:
    s, a, _, _ = three()
    task_id = s.delegate("a")
    request_id = s.ask(a, "b", reply_timeout_s=5.0)
    effects = s.call(api.CancelArgs(task_id=task_id))
    assert s.state.requests[request_id].state is RequestState.CANCELLED
    assert CancelTimer(key=("reply", request_id)) in effects
    assert delivered(effects, NoticeEnvelope) == []
    assert s.state.requests.pending() == []


def test_a_target_that_leaves_cancels_the_question_and_the_asker_is_told_why() -> None:
    s, a, _, _ = three()
    task_id = s.delegate("a")
    request_id = s.ask(a, "b")
    effects = s.call(api.CloseArgs(agent="b"))
    assert s.state.requests[request_id].state is RequestState.CANCELLED
    (told,) = delivered(effects, NoticeEnvelope, a)
    assert told.code == "request_cancelled"
    assert "b is no longer running (agent closed by the parent)" in told.text
    assert s.state.tasks[task_id].state is TaskState.RUNNING


def test_a_question_not_delivered_is_cancelled_durably_before_its_sender_is_told() -> None:
    s, a, b, _ = three()
    effects = s.message(a, "b", "?", expects_reply=True)
    (env,) = delivered(effects, MessageEnvelope, b)
    error = ErrorInfo(code="limit_exceeded", message="inbox full")
    failed = inbound.delivery_failed(s.state, env, error, s.ctx())
    assert s.state.requests[env.message_id].state is RequestState.CANCELLED
    kinds = [type(e) for e in failed]
    (told,) = delivered(failed, NoticeEnvelope, a)
    assert told.code == "not_delivered" and told.ref_id == env.message_id
    # the cancellation is durable before the sender hears of it (a Journal comes first)
    assert Journal in kinds and kinds.index(Journal) < kinds.index(Deliver)


def test_the_parents_question_not_delivered_is_cancelled_durably_before_it_is_told() -> None:
    s, _, b, _ = three()
    effects = s.parent_says("b", "which file?", expects_reply=True)
    (env,) = delivered(effects, MessageEnvelope, b)
    error = ErrorInfo(code="limit_exceeded", message="inbox full")
    failed = inbound.delivery_failed(s.state, env, error, s.ctx())
    assert s.state.requests[env.message_id].state is RequestState.CANCELLED
    (note,) = notes(failed, Notice)
    assert note.code == "not_delivered" and note.refs == (env.message_id,)
    assert note.agent_id == b  # whom it was for (the parent's follow-up named no task)
    kinds = [type(e) for e in failed]
    assert Journal in kinds and kinds.index(Journal) < kinds.index(Notify)


def test_only_the_newest_closed_requests_are_kept_and_pending_ones_always() -> None:
    s, a, b, _ = three(closed_requests_kept=1)
    old = s.ask(a, "b")
    kept = s.ask(a, "b")
    pending = s.ask(a, "b")
    s.reply(b, old)
    s.reply(b, kept)
    assert old not in s.state.requests and kept in s.state.requests
    assert s.state.requests[pending].pending
    late = s.envelope(ReplyEnvelope, b, a, content="late", reply_to=old)
    ack = s.send_refused(late, "invalid_handle")
    assert ack.error is not None
    assert "only the last 1 closed requests are kept" in ack.error.message


def test_closing_requests_keeps_the_wait_edges_counted() -> None:
    s, a, b, _ = three()
    one, two = s.ask(a, "b"), s.ask(a, "b")
    assert list(s.state.requests.wait_edges()) == [(a, b)]
    s.reply(b, one)
    assert list(s.state.requests.wait_edges()) == [(a, b)]
    s.reply(b, two)
    assert list(s.state.requests.wait_edges()) == []
