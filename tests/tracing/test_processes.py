"""One trace per task across real processes: the parent (this process, a real
:class:`Supervisor`) and each agent's bridge and ``shepherd-child`` calls write their spans
as JSON lines into one directory (``SHEPHERD_OTEL_SPANS_DIR``: every process has its own
exporter, and its own file), read back here when the session has shut down."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from actors.records.session_info import load_info
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from actors.tracing import ENV_SPANS_DIR
from protocol.core.tracecontext import task_trace_id
from tests.tracing.spans import Span, named, read_spans

pytestmark = pytest.mark.processes

TOOLS = {
    "steps": [
        {"await": "task"},
        {"run": "echo looking"},
        {"run": "false"},
        {"message": {"to": "planner", "text": "which module first?", "expects_reply": True}},
        {"await": "reply"},
        {"done": {"status": "completed", "summary": "explored {last}"}},
        {"await": "any"},
    ]
}
PLANNER = {
    "steps": [
        {"await": "task"},
        {"await": "message"},
        {"reply": {"text": "src/core"}},
        {"await": "any"},
    ]
}
#: a command agent: one process per turn, calls `shepherd-child done` (or nothing: "HANG")
AGENT = textwrap.dedent(
    """
    import os, subprocess, sys
    message = sys.argv[-1]
    print("TP=" + os.environ.get("TRACEPARENT", ""), flush=True)
    if "HANG" not in message:
        subprocess.run(["shepherd-child", "done", "--status", "completed", "--summary", "ok"],
                       check=True)
    """
)


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "TRACEPARENT"):
        monkeypatch.delenv(name, raising=False)
    spans = tmp_path / "spans"
    monkeypatch.setenv(ENV_SPANS_DIR, str(spans))
    return spans


def _supervisor(tmp_path: Path) -> tuple[Supervisor, CollectingSink]:
    sink = CollectingSink()
    sup = Supervisor(tmp_path / "session", sinks=[sink], mailbox_root=tmp_path / "mailbox")
    return sup, sink


def _script(tmp_path: Path, name: str, script: Mapping[str, object]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(script))
    return str(path)


def _children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.parent_id == parent.span_id]


def test_one_trace_per_task_with_the_childs_tool_spans_inside(tmp_path: Path, traced: Path) -> None:
    sup, _ = _supervisor(tmp_path)
    try:
        s = sup.session
        s.spawn("scout", script=_script(tmp_path, "scout", TOOLS), cwd=str(tmp_path))
        s.spawn("planner", script=_script(tmp_path, "planner", PLANNER), cwd=str(tmp_path))
        plan = s.delegate("planner", "plan the refactor")
        scout = s.delegate("scout", "map the code base")
        done = s.wait([scout.task_id], timeout_s=60)
        assert [r.status for r in done.completed] == ["completed"]
        s.cancel(plan.task_id, "not needed any more")
    finally:
        sup.shutdown()
    spans = read_spans(traced)
    (workflow,) = named(spans, "invoke_workflow shepherd")
    assert workflow.attributes["gen_ai.conversation.id"] == sup.session_id
    assert workflow.attributes["gen_ai.operation.name"] == "invoke_workflow"
    (scout_span,) = named(spans, "invoke_agent scout")
    (plan_span,) = named(spans, "invoke_agent planner")
    # one trace per task: each task's span is the root of its own trace, linked to the session
    assert scout_span.parent_id is None and plan_span.parent_id is None
    assert scout_span.trace_id != plan_span.trace_id != workflow.trace_id
    # each task's trace id is the one the surfaces name for it; the session says it traces
    assert scout_span.trace_id.removeprefix("0x") == task_trace_id(sup.session_id, scout.task_id)
    assert plan_span.trace_id.removeprefix("0x") == task_trace_id(sup.session_id, plan.task_id)
    assert load_info(sup.session_dir).traced
    assert scout_span.links[0]["context"]["span_id"] == workflow.span_id
    assert scout_span.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "shepherd",
        "gen_ai.conversation.id": sup.session_id,
        "gen_ai.agent.name": "scout",
        "gen_ai.agent.id": scout.agent_id,
        "shepherd.task.id": scout.task_id,
        "shepherd.task.status": "completed",
        "shepherd.task.return_code": 0,
    }
    assert (scout_span.status, scout_span.kind) == ("OK", "SpanKind.CLIENT")
    # its question to the planner: asked (the task waits), then replied
    moves = [(e["name"], e["attributes"]["shepherd.request.id"]) for e in scout_span.raw["events"]]
    (question,) = {request for _, request in moves}  # one question: the message to planner
    assert [name for name, _ in moves] == ["request pending", "request replied"]
    # the cancelled task: error status, with the reason
    assert plan_span.status == "ERROR"
    assert plan_span.attributes["shepherd.task.status"] == "cancelled"
    assert plan_span.attributes["shepherd.task.return_code"] == 130
    assert plan_span.attributes["error.type"] == "cancelled"
    assert "not needed any more" in (plan_span.description or "")
    # the child's tool calls, written by the scout's bridge process, inside the scout's trace
    tools = named(spans, "execute_tool bash")
    assert len(tools) == 2
    assert {t.trace_id for t in tools} == {scout_span.trace_id}
    assert {t.parent_id for t in tools} == {scout_span.span_id}
    assert {t.file for t in tools}.isdisjoint({scout_span.file})  # another process wrote them
    ok, failed = sorted(tools, key=lambda t: t.status == "ERROR")
    assert ok.status == "UNSET" and failed.status == "ERROR"
    assert failed.attributes["error.type"] == "tool_error"
    assert ok.attributes["gen_ai.tool.name"] == "bash"
    assert ok.attributes["gen_ai.tool.type"] == "function"
    assert ok.attributes["gen_ai.conversation.id"] == sup.session_id
    assert ok.attributes["shepherd.task.id"] == scout.task_id
    # the question to the planner: a messaging span in the scout's trace, linked to the
    # planner's task; the planner's answer in the planner's trace
    (ask,) = named(spans, "send planner")
    assert (ask.trace_id, ask.parent_id) == (scout_span.trace_id, scout_span.span_id)
    assert ask.kind == "SpanKind.PRODUCER"
    assert ask.attributes["messaging.operation.type"] == "send"
    assert ask.attributes["messaging.destination.name"] == "planner"
    assert ask.attributes["shepherd.message.expects_reply"] is True
    assert ask.attributes["messaging.message.id"] == question
    assert ask.links[0]["context"]["span_id"] == plan_span.span_id
    (answer,) = named(spans, "send scout")
    assert (answer.trace_id, answer.parent_id) == (plan_span.trace_id, plan_span.span_id)
    assert answer.attributes["shepherd.message.kind"] == "reply"


def _command(tmp_path: Path) -> str:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"


def test_a_command_agents_shepherd_child_call_joins_its_tasks_trace(
    tmp_path: Path, traced: Path
) -> None:
    sup, _ = _supervisor(tmp_path)
    try:
        s = sup.session
        s.spawn("worker", adapter="command", cmd=_command(tmp_path), cwd=str(tmp_path))
        task = s.delegate("worker", "do it")
        done = s.wait([task.task_id], timeout_s=60)
        assert [r.status for r in done.completed] == ["completed"]
        hung = s.delegate("worker", "HANG until the deadline", timeout_minutes=0.01)
        late = s.wait([hung.task_id], timeout_s=60)
        assert [r.status for r in late.completed] == ["timed_out"]
        printed = list(s.read("worker", 100).lines)
    finally:
        sup.shutdown()
    spans = read_spans(traced)
    first, second = sorted(named(spans, "invoke_agent worker"), key=lambda x: x.raw["start_time"])
    (call,) = named(spans, "execute_tool shepherd_done")
    assert (call.trace_id, call.parent_id) == (first.trace_id, first.span_id)
    assert call.attributes["gen_ai.tool.name"] == "shepherd_done"
    assert call.attributes["gen_ai.agent.name"] == "worker"
    # the span names its task, as every span of the agent's tools does (the turn was given
    # its task's id in SHEPHERD_TASK_ID)
    assert call.attributes["shepherd.task.id"] == task.task_id
    assert call.status == "UNSET"
    # the turn got its task's context as TRACEPARENT
    turns = [line.removeprefix("TP=")[:-3] for line in printed if line.startswith("TP=")]
    assert turns[0] == first.traceparent[:-3]  # the trace flags aside
    # the timed-out task: error status with the reason
    assert (second.status, second.attributes["shepherd.task.return_code"]) == ("ERROR", 124)
    assert second.attributes["error.type"] == "timed_out"
