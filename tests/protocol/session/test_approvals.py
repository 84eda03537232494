"""protocol.session.approvals and decisions: an approval request opens like a question (the
task waits, the wait-for graph and the stale-wait monitor count it), the parent is told at once,
it is answered at most once, and every other end (timeout, cancel, close, exit) denies it and
tells the blocked call."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.calls import api
from protocol.calls.approvals import APPROVED, DENIED, ApprovalResult, ApproveArgs, DenyArgs
from protocol.core.errors import InvalidArgument, InvalidHandle, InvalidTransition, LimitExceeded
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import Notice, StaleWait, WaitCycle
from protocol.records.requests import RequestRecord, RequestState
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.session.effects import AppendNote, Publish, RequestTimeout
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope, TaskDoneEnvelope

from .harness import Session, answer, delivered, journaled, notes, receipt
from .test_restore import restart


def _asks(s: Session, agent: str, text: str = "git push origin main: to publish", **kw: Any) -> str:
    """The agent's blocked call opens an approval request; its id (also its reply inbox)."""
    message_id = s.ids.new(IdKind.MESSAGE)
    env = s.envelope(
        MessageEnvelope,
        agent,
        PARENT_ID,
        message_id=message_id,
        content=text,
        expects_reply=True,
        approval=True,
        reply_inbox=message_id,
        **kw,
    )
    effects = s.send(env)
    ack = receipt(effects)
    assert ack.accepted and ack.request_id == message_id, ack
    return message_id


def _decision(effects: list[Any], request_id: str) -> NoticeEnvelope:
    """The one decision published into the blocked call's inbox."""
    found = [
        e.envelope
        for e in effects
        if isinstance(e, Publish)
        and e.inbox == request_id
        and isinstance(e.envelope, NoticeEnvelope)
    ]
    assert len(found) == 1, effects
    return found[0]


def _setup() -> tuple[Session, str, str]:
    s = Session()
    agent = s.spawn("builder")
    task_id = s.delegate("builder")
    return s, agent, task_id


# ------------------------------------------------------------------ opening


def test_an_approval_request_is_journaled_its_task_waits_and_the_parent_is_told() -> None:
    s, agent, task_id = _setup()
    request_id = _asks(s, agent, "git push")
    (record,) = [r for r in s.journal if isinstance(r, RequestRecord)]
    assert record.kind == "approval" and record.pending and record.target_id == PARENT_ID
    assert record.reply_inbox == request_id and record.task_id == task_id
    assert s.state.tasks[task_id].state is TaskState.WAITING
    (told,) = [n.note for n in s.heard if isinstance(n.note, Notice)]
    assert told.code == "approval_requested" and told.refs == (request_id,)
    assert told.agent_id == agent and told.task_id == task_id
    assert "builder" in told.text and "git push" in told.text and request_id in told.text
    assert f"shepherd approve {request_id}" in told.text
    # the wait-for graph and the turn rule see it as a question
    assert (agent, PARENT_ID) in s.state.requests.wait_edges()
    assert s.state.waits(agent)


def test_approve_closes_it_approved_the_call_gets_the_note_and_the_task_runs() -> None:
    s, agent, task_id = _setup()
    request_id = _asks(s, agent)
    effects = s.call(ApproveArgs(request_id=request_id, note="go ahead"))
    result = answer(effects)
    assert result == ApprovalResult(
        request_id=request_id,
        approved=True,
        agent_id=agent,
        agent_name="builder",
        task_id=task_id,
        answer="go ahead",
    )
    (closed,) = journaled(effects, RequestRecord)
    assert closed.state is RequestState.REPLIED and closed.approved and closed.answer == "go ahead"
    decision = _decision(effects, request_id)
    assert decision.code == APPROVED and decision.text == "go ahead"
    assert decision.ref_id == request_id and decision.target_id == agent
    assert decision.capability == s.state.agents[agent].capability
    assert s.state.tasks[task_id].state is TaskState.RUNNING
    assert not delivered(effects, NoticeEnvelope)  # the call is told, not the inbox


def test_deny_closes_it_denied_with_the_reason() -> None:
    s, agent, task_id = _setup()
    request_id = _asks(s, agent)
    effects = s.call(DenyArgs(request_id=request_id, reason="not on main"))
    assert answer(effects).approved is False
    decision = _decision(effects, request_id)
    assert decision.code == DENIED and decision.text == "not on main"
    assert s.state.requests[request_id].approved is False
    assert s.state.tasks[task_id].state is TaskState.RUNNING


def test_the_tasks_note_logs_each_approvals_outcome() -> None:
    s, agent, task_id = _setup()
    approved = _asks(s, agent)
    effects = s.call(ApproveArgs(request_id=approved, note="go ahead"))
    assert (
        AppendNote(task_id=task_id, line=f"shepherd approved approval {approved}: go ahead")
        in effects
    )
    denied = _asks(s, agent)
    effects = s.call(DenyArgs(request_id=denied, reason="not on main"))
    assert (
        AppendNote(task_id=task_id, line=f"shepherd denied approval {denied}: not on main")
        in effects
    )


def test_an_approval_is_answered_at_most_once() -> None:
    s, agent, _ = _setup()
    request_id = _asks(s, agent)
    s.call(ApproveArgs(request_id=request_id))
    error = s.call_refused(DenyArgs(request_id=request_id, reason="no"), InvalidTransition)
    assert "already answered: approved" in error.message
    s.call_refused(ApproveArgs(request_id=request_id), InvalidTransition)


def test_hostile_answers_are_refused_and_change_nothing() -> None:
    s, agent, _ = _setup()
    request_id = _asks(s, agent)
    s.call_refused(ApproveArgs(request_id="shepherd-message-ffffffff"), InvalidHandle)
    s.call_refused(ApproveArgs(request_id="nonsense"), InvalidHandle)
    s.call_refused(DenyArgs(request_id=request_id, reason="   "), InvalidArgument)
    big = "x" * 100_000  # a 100 KB reason: over the 64 KiB envelope it must travel in
    error = s.call_refused(DenyArgs(request_id=request_id, reason=big), LimitExceeded)
    assert "reason" in error.message
    s.call_refused(ApproveArgs(request_id=request_id, note=big), LimitExceeded)
    # a question is answered by a reply, not approved; an approval is not answered by a reply
    question = s.ask(agent, PARENT_ID)
    s.call_refused(ApproveArgs(request_id=question), InvalidArgument)
    s.call_refused(
        api.MessageArgs(target="builder", message="ok", reply_to=request_id), InvalidArgument
    )
    assert s.state.requests[request_id].pending


def test_hostile_requests_are_refused_with_a_receipt() -> None:
    s, agent, _ = _setup()
    other = s.spawn("other")

    def env(**kw: Any) -> MessageEnvelope:
        fields = {"content": "push", "expects_reply": True, "approval": True, **kw}
        return s.envelope(MessageEnvelope, agent, fields.pop("target", PARENT_ID), **fields)

    s.send_refused(env(content="  "), "invalid_argument")
    s.send_refused(env(target=other), "invalid_argument")
    assert not s.state.requests.pending()


def test_the_same_request_seen_again_opens_nothing_twice() -> None:
    s, agent, _ = _setup()
    request_id = _asks(s, agent)
    again = s.envelope(
        MessageEnvelope,
        agent,
        message_id=request_id,
        content="git push",
        expects_reply=True,
        approval=True,
        reply_inbox=request_id,
    )
    effects = s.send(again)
    assert receipt(effects).request_id == request_id
    assert not journaled(effects, RequestRecord) and not notes(effects)


def test_tool_gating_rules_need_the_pi_or_acp_adapter_and_are_kept_in_its_options() -> None:
    s = Session()
    error = s.call_refused(
        api.SpawnArgs(name="cmd", adapter="command", cmd="x {message}", approve=("bash:*",)),
        InvalidArgument,
    )
    assert "pi-rpc or acp" in error.message
    s.call(api.SpawnArgs(name="pi", adapter="pi-rpc", approve=("bash:git push*",)))
    assert s.state.agent("pi").options["approve"] == ("bash:git push*",)
    s.call(api.SpawnArgs(name="zed", adapter="acp", acp_cmd="agent", approve=("execute:rm*",)))
    assert s.state.agent("zed").options["approve"] == ("execute:rm*",)
    s.call(api.SpawnArgs(name="plain"))
    assert "approve" not in s.state.agent("plain").options


@pytest.mark.parametrize(
    "rules",
    [
        ("bash",),
        ("bash:",),
        ("bash:   ",),
        (":git*",),
        ("a b:x",),
        ("x" * 65 + ":y",),
        ("bash:" + "x" * 1000,),
        ("bash:x",) * 65,
    ],
)
def test_hostile_gating_rules_are_refused(rules: tuple[str, ...]) -> None:
    with pytest.raises(InvalidArgument, match="approve"):
        api.build_args(api.SpawnArgs, name="pi", adapter="pi-rpc", approve=rules)


# ------------------------------------------------------------------ ending unanswered


def test_a_timeout_denies_it_with_reason_timeout_and_tells_the_parent() -> None:
    s, agent, task_id = _setup()
    request_id = _asks(s, agent, reply_timeout_s=5.0)
    assert s.timers[("reply", request_id)] == RequestTimeout(request_id=request_id)
    s.now += 5
    effects = s.fire_timer(("reply", request_id))
    decision = _decision(effects, request_id)
    assert decision.code == DENIED and decision.text == "timeout"
    record = s.state.requests[request_id]
    assert record.state is RequestState.TIMED_OUT and record.approved is False
    assert [n.code for n in notes(effects, Notice)] == ["approval_timed_out"]
    assert s.state.tasks[task_id].state is TaskState.RUNNING
    assert not delivered(effects, NoticeEnvelope)  # no "your request timed out" into its inbox


def test_cancelling_the_task_denies_it() -> None:
    s, agent, task_id = _setup()
    request_id = _asks(s, agent)
    effects = s.call(api.CancelArgs(task_id=task_id))
    decision = _decision(effects, request_id)
    assert decision.code == DENIED and task_id in decision.text and "cancelled" in decision.text
    assert s.state.requests[request_id].state is RequestState.CANCELLED


def test_closing_the_agent_denies_it() -> None:
    s, agent, _ = _setup()
    request_id = _asks(s, agent)
    effects = s.call(api.CloseArgs(agent="builder"))
    assert _decision(effects, request_id).code == DENIED
    assert s.state.requests[request_id].approved is False


def test_the_agents_exit_denies_it() -> None:
    s, agent, _ = _setup()
    request_id = _asks(s, agent)
    effects = s.exit(agent, 1)
    assert _decision(effects, request_id).code == DENIED


def test_completed_is_refused_while_an_approval_is_pending() -> None:
    s, agent, _ = _setup()
    _asks(s, agent)
    s.send_refused(s.envelope(TaskDoneEnvelope, agent, status="completed"), "unresolved_requests")


# ------------------------------------------------------------------ monitors


def test_the_stale_wait_monitor_counts_a_pending_approval() -> None:
    s = Session(Settings(stale_wait_threshold_s=60.0))
    agent = s.spawn("builder")
    task_id = s.delegate("builder")
    request_id = _asks(s, agent, "rm -rf build/")
    assert s.deadline_armed(task_id) == s.now + 60  # the task's own timer: its stale point
    effects = s.ring(task_id)
    (stale,) = notes(effects, StaleWait)
    assert stale.request_id == request_id and stale.question == "rm -rf build/"
    assert stale.recipient_status == "the parent"
    assert s.deadline_armed(task_id) is None  # told once: nothing more to go off for


def test_an_approval_closing_a_wait_cycle_is_reported() -> None:
    s, agent, _ = _setup()
    s.parent_says("builder", "are you done?", expects_reply=True)  # parent waits on builder
    message_id = s.ids.new(IdKind.MESSAGE)
    env = s.envelope(
        MessageEnvelope,
        agent,
        message_id=message_id,
        content="push",
        expects_reply=True,
        approval=True,
        reply_inbox=message_id,
    )
    effects = s.send(env)
    (cycle,) = notes(effects, WaitCycle)
    assert cycle.request_id == message_id


def test_a_restart_keeps_a_pending_approval_and_its_deadline() -> None:
    s, agent, task_id = _setup()
    request_id = _asks(s, agent, reply_timeout_s=50.0)
    t, _ = restart(s, after=10.0)
    record = t.state.requests[request_id]
    assert record.pending and record.kind == "approval" and record.reply_inbox == request_id
    assert t.state.tasks[task_id].state is TaskState.WAITING
    assert t.timers[("reply", request_id)] == RequestTimeout(request_id=request_id)
    # answered by the new parent: the call that waited across the restart is told
    effects = t.call(ApproveArgs(request_id=request_id))
    assert _decision(effects, request_id).code == APPROVED


# ------------------------------------------------------------------ properties

_STEPS = st.lists(
    st.sampled_from(["approve", "deny", "timeout", "cancel", "close", "done", "ask"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS)
def test_every_approval_is_decided_at_most_once_and_a_waiting_task_waits_on_it(
    steps: list[str],
) -> None:
    s = Session()
    agent = s.spawn("builder")
    task_id = s.delegate("builder")
    asked: list[str] = [_asks(s, agent, reply_timeout_s=30.0)]
    decided: dict[str, str] = {}
    for step in steps:
        pending = [r for r in asked if s.state.requests[r].pending]
        target = pending[-1] if pending else asked[-1]
        effects: list[Any] = []
        match step:
            case "approve":
                if pending:
                    effects = s.call(ApproveArgs(request_id=target))
                else:
                    s.call_refused(ApproveArgs(request_id=target), InvalidTransition)
            case "deny":
                if pending:
                    effects = s.call(DenyArgs(request_id=target, reason="no"))
                else:
                    s.call_refused(DenyArgs(request_id=target, reason="no"), InvalidTransition)
            case "timeout":
                if ("reply", target) in s.timers:
                    effects = s.fire_timer(("reply", target))
            case "cancel":
                if not s.state.tasks[task_id].terminal:
                    effects = s.call(api.CancelArgs(task_id=task_id))
            case "close":
                effects = s.call(api.CloseArgs(agent="builder"))
            case "done":
                if not s.state.agents[agent].closed and not s.state.tasks[task_id].terminal:
                    effects = s.done(agent, "blocked")
            case "ask":
                row = s.state.agents[agent]
                if not row.closed:
                    asked.append(_asks(s, agent, reply_timeout_s=30.0))
        for e in effects:
            if isinstance(e, Publish) and isinstance(e.envelope, NoticeEnvelope):
                ref = e.envelope.ref_id
                assert ref is not None and ref not in decided, f"{ref} decided twice"
                decided[ref] = e.envelope.code
        task = s.state.tasks[task_id]
        approvals = [r for r in s.state.requests.pending() if r.kind == "approval"]
        mine = [r for r in approvals if r.task_id == task_id]
        assert (task.state is TaskState.WAITING) == bool(mine)
    for request_id in asked:
        record = s.state.requests[request_id]
        if record.pending:
            assert request_id not in decided
            continue
        assert decided[request_id] == (APPROVED if record.approved else DENIED)
        assert record.approved is (record.state is RequestState.REPLIED and record.approved)
