"""Approvals in the seeded simulation: an agent asks, its task waits, and whatever ends the
request (the parent's approve or deny, the deadline, a cancel, a close) tells the agent exactly
once, and the task's state follows (every seed)."""

from __future__ import annotations

import random

from protocol.calls.approvals import APPROVED, DENIED
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskState
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope
from tests.conftest import SeedRunner
from tests.sim.puppet import Puppet
from tests.sim.scenarios import IDLE, broker, delivered_results, new_session

ENDINGS = ("approve", "deny", "timeout", "cancel", "close")


def _decisions(s, name: str) -> list[NoticeEnvelope]:  # type: ignore[no-untyped-def]
    received = s.sim_launcher.driver(name).received
    return [e for e in received if isinstance(e, NoticeEnvelope) and e.code in (APPROVED, DENIED)]


def scenario(seed: int) -> None:
    ending = random.Random(seed).choice(ENDINGS)
    s, sink = new_session(seed)
    s.spawn("builder", script=IDLE)
    task = s.delegate("builder", "release")
    s.watch(task.task_id)
    s.sim.run_all()
    builder = Puppet(s, "builder")
    asked = builder.publish(
        MessageEnvelope(
            **builder._base(
                target_id=PARENT_ID,
                content="git push origin main",
                expects_reply=True,
                approval=True,
                reply_timeout_s=30.0,
            )
        )
    )
    b = broker(s)
    request_id = asked.message_id
    # not run_all: virtual time would run on to the request's deadline
    assert s.sim.run_until(lambda: request_id in b.requests)
    s.sim.run_until_idle()  # its effects run once its records are durable (no time moves)
    assert b.tasks[task.task_id].state is TaskState.WAITING
    told = [n for n in sink.items if isinstance(n, Notice) and n.code == "approval_requested"]
    assert [n.refs for n in told] == [(request_id,)]
    match ending:
        case "approve":
            assert s.approve(request_id, note="ok").approved
        case "deny":
            assert not s.deny(request_id, "no").approved
        case "timeout":
            s.sim.advance(31)
        case "cancel":
            s.cancel(task.task_id)
        case "close":
            s.close("builder")
    s.sim.run_all()
    decisions = _decisions(s, "builder")
    record = b.requests[request_id]
    assert not record.pending
    if ending == "close":
        assert decisions == []  # a closed agent's inbox gets nothing; the record says denied
    else:
        (decision,) = decisions
        assert decision.ref_id == request_id
        assert decision.code == (APPROVED if ending == "approve" else DENIED)
    assert record.approved is (ending == "approve")
    if ending in ("approve", "deny", "timeout"):
        assert b.tasks[task.task_id].state is TaskState.RUNNING
        builder.done(task.task_id, summary=ending)
        s.sim.run_all()
    results = delivered_results(sink)
    assert len(results) == 1 and results[0].task_id == task.task_id
    expected = {"cancel": "cancelled", "close": "cancelled"}.get(ending, "completed")
    assert results[0].status == expected
    s.shutdown()


def test_every_approval_ends_once_and_the_task_follows(seeds: SeedRunner) -> None:
    assert seeds.run(scenario) >= 1
