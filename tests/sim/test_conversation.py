"""Variations on the canonical scenario: messages, replies, timeouts, closures, duplicates."""

from __future__ import annotations

from protocol.records.notifications import AgentMessage, Notice
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope, ReplyEnvelope
from tests.sim.puppet import Puppet
from tests.sim.scenarios import IDLE, broker, completions, delivered_results, new_session


def _pair(seed: int):  # type: ignore[no-untyped-def]
    s, sink = new_session(seed)
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    task = s.delegate("scout", "x")
    s.sim.run_all()
    return s, sink, task, Puppet(s, "scout"), Puppet(s, "planner")


def test_a_plain_message_never_changes_task_state() -> None:
    s, sink, task, scout, _ = _pair(1)
    before = broker(s).tasks[task.task_id]
    scout.say("planner", "fyi: started")
    s.message("scout", "keep going")
    s.sim.run_all()
    after = broker(s).tasks[task.task_id]
    assert after.state is TaskState.RUNNING and after == before
    assert completions(sink) == []


def test_a_message_to_the_shepherd_reaches_the_parent_sink() -> None:
    s, sink, task, scout, _ = _pair(2)
    sent = scout.say("shepherd", "need a decision")
    s.sim.run_all()
    notes = [n for n in sink.items if isinstance(n, AgentMessage)]
    assert [(n.message_id, n.content, n.sender_name, n.task_id) for n in notes] == [
        (sent.message_id, "need a decision", "scout", task.task_id)
    ]
    assert scout.ack_for(sent).accepted


def test_multiple_independent_messages_arrive_in_order() -> None:
    s, _, _, _, _ = _pair(3)
    ids = [s.message("planner", f"note {i}").message_id for i in range(5)]
    s.sim.run_all()
    got = [e for e in s.sim_launcher.driver("planner").received if isinstance(e, MessageEnvelope)]
    assert [e.message_id for e in got] == ids
    assert all(e.sender_name == "shepherd" for e in got)


def test_a_peer_reply_arriving_while_idle_starts_a_new_turn() -> None:
    script = {
        "steps": [
            {"await": "task"},
            {"message": {"to": "planner", "text": "q", "expects_reply": True}},
            {"await": "reply"},
            {"done": {"status": "completed", "summary": "{last}"}},
            {"await": "any"},
        ]
    }
    s, sink = new_session(4)
    s.spawn("scout", script=script)
    s.spawn("planner", script=IDLE)
    task = s.delegate("scout", "x")
    s.watch(task.task_id)
    b = broker(s)
    assert s.sim.run_until(
        lambda: (
            b.tasks[task.task_id].state is TaskState.WAITING
            and b.agents[b.names["scout"]].process_state == "idle"
        )
    )
    request_id = b.tasks[task.task_id].pending_requests[0]
    Puppet(s, "planner").reply("scout", request_id, "42")
    s.sim.run_all()
    results = delivered_results(sink)
    assert [(r.status, r.text) for r in results] == [("completed", "42")]


def test_a_reply_timeout_closes_the_request_and_resumes_the_task() -> None:
    s, sink, task, scout, _ = _pair(5)
    q = scout.ask("planner", reply_timeout_s=10)
    s.sim.advance(9)
    b = broker(s)
    assert b.tasks[task.task_id].state is TaskState.WAITING
    s.sim.advance(2)
    assert b.requests[q.message_id].state == "timed_out"
    assert b.tasks[task.task_id].state is TaskState.RUNNING
    notices = [e for e in s.sim_launcher.driver("scout").received if isinstance(e, NoticeEnvelope)]
    assert [(n.code, n.ref_id) for n in notices] == [("request_timed_out", q.message_id)]
    assert completions(sink) == []


def test_planner_closed_while_scout_waits_cancels_the_request() -> None:
    s, _, task, scout, _ = _pair(6)
    q = scout.ask("planner")
    s.sim.run_all()
    s.close("planner")
    s.sim.run_all()
    b = broker(s)
    assert b.requests[q.message_id].state == "cancelled"
    assert b.tasks[task.task_id].state is TaskState.RUNNING  # scout decides what to do next
    notices = [e for e in s.sim_launcher.driver("scout").received if isinstance(e, NoticeEnvelope)]
    assert [n.code for n in notices] == ["request_cancelled"]
    assert "planner" in notices[0].text


def test_scout_closed_while_planner_holds_its_question() -> None:
    s, sink, task, scout, planner = _pair(7)
    q = scout.ask("planner")
    s.sim.run_all()
    s.close("scout")
    s.sim.run_all()
    result = s.result(task.task_id)
    assert result is not None and result.status == "cancelled" and result.return_code == 130
    assert broker(s).requests[q.message_id].state == "cancelled"
    late = planner.reply("scout", q.message_id, "too late")
    s.sim.run_all()
    ack = planner.ack_for(late)
    assert not ack.accepted and ack.error.code == "invalid_handle" and "closed" in ack.error.message
    assert delivered_results(sink) == []


def test_a_second_reply_to_an_answered_request_is_refused_naming_it() -> None:
    s, _, task, scout, planner = _pair(8)
    q = scout.ask("planner")
    s.sim.run_all()
    first = planner.reply("scout", q.message_id, "one")
    second = planner.reply("scout", q.message_id, "two")
    s.sim.run_all()
    b = broker(s)
    assert b.requests[q.message_id].reply_id == first.message_id
    assert b.tasks[task.task_id].state is TaskState.RUNNING
    assert planner.ack_for(first).accepted
    refused = planner.ack_for(second)
    assert not refused.accepted and refused.error.code == "invalid_transition"
    assert q.message_id in refused.error.message and "already answered" in refused.error.message
    replies = [e for e in s.sim_launcher.driver("scout").received if isinstance(e, ReplyEnvelope)]
    assert [(r.content, r.late) for r in replies] == [("one", False)]
    # the very same reply seen again (a redelivery) is not refused and not forwarded twice
    planner.publish(first)
    s.sim.run_all()
    assert (
        len([e for e in s.sim_launcher.driver("scout").received if isinstance(e, ReplyEnvelope)])
        == 1
    )


def test_duplicate_done_settles_once() -> None:
    s, sink, task, scout, _ = _pair(9)
    s.watch(task.task_id)
    scout.done(task.task_id, "completed", "a")
    scout.done(task.task_id, "completed", "b")
    s.sim.run_all()
    assert [r.text for r in delivered_results(sink)] == ["a"]


def test_only_the_target_of_a_request_may_answer_it() -> None:
    s, _, task, scout, _planner = _pair(10)
    s.spawn("critic", script=IDLE)
    s.sim.run_all()
    critic = Puppet(s, "critic")
    q = scout.ask("planner")
    s.sim.run_all()
    forged = critic.reply("scout", q.message_id)
    s.sim.run_all()
    ack = critic.ack_for(forged)
    assert not ack.accepted and ack.error.code == "forbidden_sender"
    assert broker(s).tasks[task.task_id].state is TaskState.WAITING


def test_done_from_another_agent_is_forbidden() -> None:
    s, _sink, task, _, planner = _pair(11)
    forged = planner.done(task.task_id)
    s.sim.run_all()
    ack = planner.ack_for(forged)
    assert not ack.accepted and ack.error.code == "forbidden_sender"
    assert s.result(task.task_id) is None


def test_completed_refused_while_requests_are_open_unless_cancelled() -> None:
    s, _sink, task, scout, _ = _pair(12)
    q = scout.ask("planner")
    s.sim.run_all()
    refused = scout.done(task.task_id, "completed")
    s.sim.run_all()
    ack = scout.ack_for(refused)
    assert not ack.accepted and ack.error.code == "unresolved_requests"
    assert q.message_id in ack.error.message
    assert s.result(task.task_id) is None
    forced = scout.done(task.task_id, "completed", cancel_requests=True)
    s.sim.run_all()
    assert scout.ack_for(forced).accepted
    assert broker(s).requests[q.message_id].state == "cancelled"
    result = s.result(task.task_id)
    assert result is not None and result.status == "completed"


def test_blocked_while_waiting_is_allowed_and_drops_the_requests() -> None:
    s, _, task, scout, _ = _pair(13)
    q = scout.ask("planner")
    s.sim.run_all()
    scout.done(task.task_id, "blocked", "planner never answers")
    s.sim.run_all()
    result = s.result(task.task_id)
    assert result is not None and (result.status, result.return_code) == ("blocked", 2)
    assert broker(s).requests[q.message_id].state == "cancelled"


def test_parent_asks_and_an_agent_replies_to_the_parent() -> None:
    s, sink, _, _, planner = _pair(14)
    sent = s.message("planner", "status?", expects_reply=True)
    assert sent.request_id == sent.message_id
    s.sim.run_all()
    planner.reply("shepherd", sent.message_id, "fine")
    s.sim.run_all()
    notes = [n for n in sink.items if isinstance(n, AgentMessage)]
    assert [(n.reply_to, n.content) for n in notes] == [(sent.message_id, "fine")]
    assert broker(s).requests[sent.message_id].state == "replied"
    # (the scout's idle script ended its turn with its task open: that is told, nothing else)
    assert not [
        n for n in sink.items if isinstance(n, Notice) and n.code != "turn_ended_without_done"
    ]


def test_a_late_reply_finds_a_recent_closed_request_but_not_a_forgotten_one() -> None:
    s, _ = new_session(9, settings=Settings(closed_requests_kept=2))
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    s.delegate("scout", "x")
    s.sim.run_all()
    scout, planner = Puppet(s, "scout"), Puppet(s, "planner")
    asked = [scout.ask("planner", reply_timeout_s=1) for _ in range(3)]
    s.sim.advance(2)  # all three time out: the oldest closed one is forgotten
    b = broker(s)
    assert asked[0].message_id not in b.requests
    assert [b.requests[q.message_id].state for q in asked[1:]] == ["timed_out", "timed_out"]
    forgotten = planner.reply("scout", asked[0].message_id, "too late")
    recent = planner.reply("scout", asked[2].message_id, "late but known")
    s.sim.run_all()
    refused = planner.ack_for(forgotten)
    assert not refused.accepted and refused.error.code == "invalid_handle"
    assert "closed requests are kept" in refused.error.message
    assert planner.ack_for(recent).accepted
    late = [e for e in s.sim_launcher.driver("scout").received if isinstance(e, ReplyEnvelope)]
    assert [(e.reply_to, e.late) for e in late] == [(asked[2].message_id, True)]
