"""protocol.session.routing and inbound: who may message whom; only the target replies; late
and second replies; a closed sender opens no request; receipts."""

from __future__ import annotations

from protocol.calls import api
from protocol.core.errors import ForbiddenSender, InvalidArgument, InvalidHandle, LimitExceeded
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import AgentMessage
from protocol.records.requests import RequestState
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.session.effects import Log, Publish, RequestTimeout
from protocol.wire.envelopes import (
    AckEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    TaskEnvelope,
)

from .harness import Session, answer, delivered, journaled, notes, receipt, snapshot


def two_agents(**settings: object) -> tuple[Session, str, str]:
    s = Session(Settings(**settings))  # type: ignore[arg-type]
    return s, s.spawn("a"), s.spawn("b")


# ------------------------------------------------------------------ who may message whom


def test_the_parents_message_goes_to_the_agent_stamped_and_changes_no_task() -> None:
    s, a, _ = two_agents()
    task_id = s.delegate("a")
    tasks = dict(s.state.tasks)
    effects = s.parent_says("a", "look at README", steer=True)
    (env,) = delivered(effects, MessageEnvelope, a)
    assert env.sender_id == PARENT_ID and env.sender_name == PARENT_ID and env.capability == ""
    assert env.content == "look at README" and env.delivery == "steer" and env.task_id is None
    result = answer(effects)
    assert result == api.MessageResult(message_id=env.message_id, accepted=True)
    assert s.state.tasks == tasks and s.state.tasks[task_id].state is TaskState.RUNNING


def test_an_agents_message_belongs_to_its_active_task_and_is_receipted() -> None:
    s, a, b = two_agents()
    task_id = s.delegate("a")
    effects = s.message(a, "b", "found it")
    (env,) = delivered(effects, MessageEnvelope, b)
    assert env.sender_name == "a" and env.target_id == b and env.task_id == task_id
    ack = receipt(effects)
    assert ack.accepted and ack.target_id == a and ack.ack_for == env.message_id
    assert s.state.tasks[task_id].state is TaskState.RUNNING


def test_an_agents_message_to_the_parent_is_a_notification() -> None:
    s, a, _ = two_agents()
    effects = s.message(a, PARENT_ID, "status: fine")
    (note,) = notes(effects, AgentMessage)
    assert note.sender_id == a and note.sender_name == "a" and note.content == "status: fine"
    assert not note.expects_reply


def test_an_agent_cannot_message_itself() -> None:
    s, a, _ = two_agents()
    s.send_refused(s.envelope(MessageEnvelope, a, a, content="me"), "invalid_argument")
    s.send_refused(s.envelope(MessageEnvelope, a, "a", content="me"), "invalid_argument")


def test_a_message_to_a_closed_or_unknown_agent_is_refused() -> None:
    s, a, _ = two_agents()
    s.call(api.CloseArgs(agent="b"))
    s.send_refused(s.envelope(MessageEnvelope, a, "b", content="x"), "invalid_handle")
    s.send_refused(s.envelope(MessageEnvelope, a, "zed", content="x"), "invalid_handle")
    s.call_refused(api.MessageArgs(target="b", message="x"), InvalidHandle)


def test_an_agent_may_name_only_its_own_task() -> None:
    s, a, b = two_agents()
    theirs = s.delegate("b")
    env = s.envelope(MessageEnvelope, a, "b", content="x", task_id=theirs)
    s.send_refused(env, "forbidden_sender")
    env = s.envelope(MessageEnvelope, a, "b", content="x", task_id="shepherd-task-0badc0de")
    s.send_refused(env, "invalid_handle")
    # the parent may name any task of the session
    (sent,) = delivered(s.parent_says("b", "x", task_id=theirs), MessageEnvelope, b)
    assert sent.task_id == theirs


def test_an_empty_message_from_the_parent_is_refused() -> None:
    s, _, _ = two_agents()
    s.call_refused(api.MessageArgs(target="a", message=" "), InvalidArgument)


def test_a_message_that_would_not_fit_one_envelope_opens_nothing() -> None:
    s, a, _ = two_agents(max_envelope_bytes=1024)
    s.delegate("a")
    env = s.envelope(MessageEnvelope, a, "b", content="x" * 2000, expects_reply=True)
    ack = s.send_refused(env, "limit_exceeded")
    assert ack.error is not None and "max_envelope_bytes" in ack.error.message
    s.call_refused(api.MessageArgs(target="b", message="y" * 2000), LimitExceeded)


def test_an_agent_cannot_send_the_parents_kinds() -> None:
    s, a, b = two_agents()
    env = s.envelope(TaskEnvelope, a, b, task_id="shepherd-task-0badc0de", content="x")
    s.send_refused(env, "invalid_argument")


def test_an_envelope_from_an_unknown_sender_is_logged_and_changes_nothing() -> None:
    s, _, b = two_agents()
    before = snapshot(s.state)
    effects = s.send(s.envelope(MessageEnvelope, "shepherd-agent-0badc0de", b, content="x"))
    assert [type(e) for e in effects] == [Log]
    assert snapshot(s.state) == before


def test_a_one_shot_sender_gets_its_receipt_in_the_inbox_it_named_stamped() -> None:
    s, a, _ = two_agents()
    effects = s.message(a, "b", "x", reply_inbox="reply-1")
    (published,) = [e for e in effects if isinstance(e, Publish)]
    assert published.inbox == "reply-1"
    assert isinstance(published.envelope, AckEnvelope)
    assert published.envelope.capability == s.state.agents[a].capability


# ------------------------------------------------------------------ only the target replies


def test_the_targets_reply_closes_the_request_and_goes_back_to_the_asker() -> None:
    s, a, b = two_agents()
    task_id = s.delegate("a")
    request_id = s.ask(a, "b")
    assert s.state.tasks[task_id].state is TaskState.WAITING
    effects = s.reply(b, request_id, "README.md")
    (env,) = delivered(effects, ReplyEnvelope, a)
    assert env.reply_to == request_id and not env.late and env.task_id == task_id
    assert env.sender_name == "b" and env.target_id == a
    request = s.state.requests[request_id]
    assert request.state is RequestState.REPLIED and request.reply_id == env.message_id
    ack = receipt(effects)
    assert ack.accepted and ack.request_id == request_id
    assert s.state.tasks[task_id].state is TaskState.RUNNING


def test_only_the_agent_asked_may_reply() -> None:
    s, a, _ = two_agents()
    c = s.spawn("c")
    request_id = s.ask(a, "b")
    env = s.envelope(ReplyEnvelope, c, a, content="me!", reply_to=request_id)
    ack = s.send_refused(env, "forbidden_sender")
    assert ack.error is not None and "only it can reply" in ack.error.message
    assert s.state.requests[request_id].pending
    # nor may the parent answer a question put to an agent
    s.call_refused(api.MessageArgs(target="a", message="x", reply_to=request_id), ForbiddenSender)


def test_a_reply_goes_back_to_the_asker_and_nowhere_else() -> None:
    s, a, b = two_agents()
    c = s.spawn("c")
    request_id = s.ask(a, "b")
    env = s.envelope(ReplyEnvelope, b, c, content="x", reply_to=request_id)
    s.send_refused(env, "invalid_argument")


def test_a_reply_to_no_request_is_refused() -> None:
    s, _, b = two_agents()
    env = s.envelope(ReplyEnvelope, b, "a", content="x", reply_to="shepherd-message-0badc0de")
    s.send_refused(env, "invalid_handle")


def test_a_reply_to_a_closed_asker_is_refused() -> None:
    s, a, b = two_agents()
    s.delegate("b")
    request_id = s.ask(b, "a")
    s.call(api.CloseArgs(agent="b"))  # cancels the request; the asker is gone
    env = s.envelope(ReplyEnvelope, a, b, content="late", reply_to=request_id)
    s.send_refused(env, "invalid_handle")


def test_the_parent_answers_a_question_put_to_it() -> None:
    s, a, _ = two_agents()
    task_id = s.delegate("a")
    request_id = s.ask(a, PARENT_ID)
    (asked,) = notes([*s.heard], AgentMessage)
    assert asked.expects_reply and asked.message_id == request_id
    effects = s.parent_says("a", "use main", reply_to=request_id)
    (env,) = delivered(effects, ReplyEnvelope, a)
    assert env.reply_to == request_id and env.sender_id == PARENT_ID
    assert answer(effects).request_state == "pending"
    assert s.state.tasks[task_id].state is TaskState.RUNNING


# ------------------------------------------------------------------ late and second replies


def test_a_late_reply_is_delivered_marked_late_and_changes_nothing() -> None:
    s, a, b = two_agents()
    task_id = s.delegate("a")
    request_id = s.ask(a, "b", reply_timeout_s=5.0)
    s.now += 5
    s.fire(RequestTimeout(request_id=request_id))
    before = snapshot(s.state, activity=False)
    effects = s.reply(b, request_id, "sorry, here")
    (env,) = delivered(effects, ReplyEnvelope, a)
    assert env.late
    ack = receipt(effects)
    assert ack.accepted and ack.request_id == request_id
    assert journaled(effects) == []
    assert snapshot(s.state, activity=False) == before
    assert s.state.requests[request_id].state is RequestState.TIMED_OUT
    assert s.state.tasks[task_id].state is TaskState.RUNNING


def test_a_second_reply_to_an_answered_request_is_refused_naming_the_answer() -> None:
    s, a, b = two_agents()
    request_id = s.ask(a, "b")
    first = delivered(s.reply(b, request_id, "one"), ReplyEnvelope, a)[0]
    ack = s.send_refused(
        s.envelope(ReplyEnvelope, b, a, content="two", reply_to=request_id), "invalid_transition"
    )
    assert ack.error is not None and first.message_id in ack.error.message


def test_the_same_reply_seen_again_gets_the_same_receipt_and_is_not_forwarded_twice() -> None:
    s, a, b = two_agents()
    request_id = s.ask(a, "b")
    env = s.envelope(ReplyEnvelope, b, a, content="one", reply_to=request_id)
    s.send(env)
    before = snapshot(s.state, activity=False)
    again = s.send(env)
    assert delivered(again, ReplyEnvelope) == []
    ack = receipt(again)
    assert ack.accepted and ack.request_id == request_id
    assert snapshot(s.state, activity=False) == before


def test_a_late_reply_to_the_parents_question_reaches_the_parent_and_changes_nothing() -> None:
    s, _, b = two_agents()
    effects = s.parent_says("b", "which file?", expects_reply=True, reply_timeout_s=1.0)
    request_id = answer(effects).request_id
    s.fire(RequestTimeout(request_id=request_id))
    effects = s.reply(b, request_id, "README")
    (note,) = notes(effects, AgentMessage)
    assert note.reply_to == request_id
    assert s.state.requests[request_id].state is RequestState.TIMED_OUT


def test_the_parents_late_reply_is_answered_with_how_the_request_had_closed() -> None:
    s, a, _ = two_agents()
    request_id = s.ask(a, PARENT_ID, reply_timeout_s=1.0)
    s.fire(RequestTimeout(request_id=request_id))
    effects = s.parent_says("a", "sorry, yes", reply_to=request_id)
    (env,) = delivered(effects, ReplyEnvelope, a)
    assert env.late
    result = answer(effects)
    assert result.accepted and result.request_state == "timed_out"


# ------------------------------------------------------------------ a closed sender


def test_a_closed_senders_question_still_goes_but_opens_no_request() -> None:
    s, a, b = two_agents()
    s.call(api.CloseArgs(agent="a"))
    effects = s.message(a, "b", "one last thing?", expects_reply=True)
    (env,) = delivered(effects, MessageEnvelope, b)
    assert not env.expects_reply
    assert len(s.state.requests) == 0 and journaled(effects) == []
    assert delivered(effects, AckEnvelope) == []  # a closed agent is sent nothing
