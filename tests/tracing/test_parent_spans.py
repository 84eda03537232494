"""The parent's spans from the effects the broker runs, on the simulation with the SDK's
in-memory exporter: one trace per task, its envelope stamped with it, the result on the span,
and a tracing failure never costs a task."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from actors.testing.session import SimSession
from actors.tracing.parent import ParentSpans
from actors.tracing.sdk import make_tracing
from protocol.core.errors import LimitExceeded
from protocol.core.tracecontext import format_traceparent, task_trace_id
from protocol.records.tasks import TaskEvent, TaskRecord, settle
from protocol.session import effects as fx
from protocol.wire.envelopes import MessageEnvelope, TaskEnvelope, encode_envelope
from tests.sim.scenarios import broker, new_session

WORKER = {
    "steps": [
        {"await": "task"},
        {"sleep": 100},
        {"done": {"status": "completed", "summary": "did {last}"}},
        {"await": "any"},
    ]
}

BLOCKED = {
    "steps": [
        {"await": "task"},
        {"sleep": 100},
        {"done": {"status": "blocked", "summary": "need a key"}},
        {"await": "any"},
    ]
}


SESSION_ID = "shepherd-session-0123456789abcdef"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    yield memory
    memory.shutdown()


def _spans(exporter: InMemorySpanExporter) -> ParentSpans:
    tracing = make_tracing({}, "shepherd", processors=[SimpleSpanProcessor(exporter)])
    return ParentSpans(tracing, SESSION_ID)


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _session(spans: ParentSpans) -> SimSession:
    s, _ = new_session(7, spans=spans)
    assert isinstance(s, SimSession)
    return s


@pytest.mark.parametrize(
    ("how", "status", "rc", "reason"),
    [
        ("fail", "failed", 1, "parent gave up"),
        ("cancel", "cancelled", 130, "not needed"),
        ("time_out", "timed_out", 124, "deadline"),
        ("done", "completed", 0, None),
        ("blocked", "blocked", 2, "blocked"),
    ],
)
def test_a_task_is_one_span_from_delegate_to_settlement(
    exporter: InMemorySpanExporter, how: str, status: str, rc: int, reason: str | None
) -> None:
    spans = _spans(exporter)
    s = _session(spans)
    s.spawn("worker", script=BLOCKED if how == "blocked" else WORKER)
    task = s.delegate("worker", "first", timeout_minutes=1 if how == "time_out" else None)
    s.sim.advance(10)
    assert _named(exporter, "invoke_agent worker") == []  # open until it settles
    if how == "fail":
        s.fail(task.task_id, "parent gave up")
    elif how == "cancel":
        s.cancel(task.task_id, "not needed")
    else:
        s.sim.advance(200)
    s.sim.run_until_idle()
    assert s.result(task.task_id).status == status  # type: ignore[union-attr]
    (span,) = _named(exporter, "invoke_agent worker")
    assert span.parent is None  # the root of its own trace
    assert span.attributes is not None
    assert span.attributes["shepherd.task.status"] == status
    assert span.attributes["shepherd.task.return_code"] == rc
    assert span.attributes["gen_ai.agent.name"] == "worker"
    if reason is None:
        assert span.status.status_code is StatusCode.OK
    else:
        assert span.status.status_code is StatusCode.ERROR
        assert reason in (span.status.description or "")
        assert span.attributes["error.type"] == status
    # the task's envelope carried the span's context to the agent
    (delivered,) = [
        e for e in s.sim_launcher.driver("worker").received if isinstance(e, TaskEnvelope)
    ]
    ctx = span.get_span_context()
    assert ctx is not None
    # its trace id is the one every surface names for the task (the web board's task page)
    assert f"{ctx.trace_id:032x}" == task_trace_id(SESSION_ID, task.task_id)
    assert delivered.traceparent == format_traceparent(
        ctx.trace_id, ctx.span_id, int(ctx.trace_flags)
    )
    s.shutdown()
    spans.close()
    (workflow,) = _named(exporter, "invoke_workflow shepherd")
    assert workflow.attributes == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.conversation.id": "shepherd-session-0123456789abcdef",
        "gen_ai.provider.name": "shepherd",
    }
    assert span.links[0].context.span_id == workflow.context.span_id


def test_a_tracing_failure_never_costs_a_task(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = _spans(exporter)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the tracer broke")

    monkeypatch.setattr(spans._tracer, "start_span", broken)
    s = _session(spans)
    s.spawn("worker", script=WORKER)
    task = s.delegate("worker", "first")
    s.sim.run_all()
    result = s.result(task.task_id)
    assert result is not None and (result.status, result.text) == ("completed", "did first")
    s.shutdown()


def test_a_malformed_traceparent_on_a_routed_message_is_ignored(
    exporter: InMemorySpanExporter,
) -> None:
    """The decoder drops one; should one reach the spans anyway, the message's span is the
    sender's task's child, as if it had none."""
    spans = _spans(exporter)
    record = TaskRecord(
        task_id="shepherd-task-00000000000000aa",
        agent_id="shepherd-agent-00000000000000aa",
        agent_name="scout",
        description="x",
        created_at=1.0,
    )
    spans.seen(fx.Journal(record=record))
    env = MessageEnvelope(
        message_id="shepherd-message-00000000000000aa",
        session_id="shepherd-session-0123456789abcdef",
        sender_id=record.agent_id,
        target_id="shepherd-agent-00000000000000bb",
        created_at=2.0,
        content="hello",
        task_id=record.task_id,
        traceparent="garbage",
    )
    out = spans.seen(fx.Deliver(agent_id=env.target_id, envelope=env))
    (sent,) = _named(exporter, "send shepherd-agent-00000000000000bb")
    task_tp = spans.task_traceparent(record.task_id)
    assert task_tp is not None and sent.parent is not None
    parent = sent.parent
    assert format_traceparent(parent.trace_id, parent.span_id, int(parent.trace_flags)) == task_tp
    assert isinstance(out, fx.Deliver)  # delivered, stamped with the message's own span
    ctx = sent.get_span_context()
    assert ctx is not None
    assert out.envelope == msgspec.structs.replace(
        env, traceparent=format_traceparent(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))
    )
    spans.close()


def test_a_task_restored_after_a_parent_restart_gets_a_new_span_in_the_same_trace(
    exporter: InMemorySpanExporter,
) -> None:
    spans = _spans(exporter)
    record = TaskRecord(
        task_id="shepherd-task-00000000000000cc",
        agent_id="shepherd-agent-00000000000000cc",
        agent_name="scout",
        description="x",
        created_at=1.0,
    )
    spans.seen(fx.OpenNote(record=record, restored=True))
    settled, _ = settle(record, TaskEvent.COMPLETE, 5.0, text="done")
    spans.seen(fx.Journal(record=settled))
    (span,) = _named(exporter, "invoke_agent scout")
    assert span.parent is None and span.attributes is not None
    assert span.attributes["shepherd.task.restored"] is True
    assert f"{span.context.trace_id:032x}" == task_trace_id(SESSION_ID, record.task_id)
    assert span.attributes["shepherd.task.status"] == "completed"
    spans.close()


def test_the_largest_task_accepted_still_fits_once_stamped_with_its_trace(
    exporter: InMemorySpanExporter,
) -> None:
    """The size check keeps room for the traceparent the parent adds: what is accepted is
    never refused by the mailbox for it."""
    spans = _spans(exporter)
    s = _session(spans)
    s.spawn("worker", script={"steps": [{"await": "task"}, {"await": "any"}]})
    limit = s.settings.max_envelope_bytes
    low, high = 1, limit  # the largest accepted text length, by bisection
    while low < high:
        size = (low + high + 1) // 2
        try:
            task = s.delegate("worker", "x" * size)
        except LimitExceeded:
            high = size - 1
            continue
        s.cancel(task.task_id, "sizing")
        s.sim.run_until_idle()
        low = size
    task = s.delegate("worker", "x" * low)
    s.sim.run_until_idle()
    delivered = [
        e
        for e in s.sim_launcher.driver("worker").received
        if isinstance(e, TaskEnvelope) and e.task_id == task.task_id
    ]
    (envelope,) = delivered
    assert envelope.traceparent is not None
    # as the mailbox writes it: stamped with the agent's capability
    capability = broker(s).agents[task.agent_id].capability
    stamped = msgspec.structs.replace(envelope, capability=capability)
    assert len(encode_envelope(stamped)) <= limit
    s.shutdown()
    spans.close()
