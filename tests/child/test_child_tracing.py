"""A child's spans: ``shepherd-child`` calls and the bridge's tool calls join the trace named
by ``TRACEPARENT`` or by the task's envelope; a malformed one starts a new trace and costs
nothing else; without the OpenTelemetry package, a child says so and works untraced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from actors.tracing import ENV_OTEL, ENV_SPANS_DIR
from protocol.core.errors import ErrorInfo
from protocol.core.ids import IdKind
from protocol.wire.envelopes import ControlEnvelope, MessageEnvelope, TaskDoneEnvelope, TaskEnvelope
from tests.tracing.spans import named, read_spans

from .conftest import FakeParent, new_id, task_result

pytestmark = pytest.mark.processes

TASK_TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MALFORMED = [
    "garbage",
    TASK_TP.upper(),
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
    "ff" + TASK_TP[2:],
    TASK_TP + "-x",
    "x" * 100_000,
]
#: the child CLI with the OpenTelemetry SDK made unimportable (the API comes with mcp)
WITHOUT_OTEL = (
    "import sys\n"
    "sys.modules['opentelemetry.sdk'] = None\n"
    "from actors.child.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _message(parent: FakeParent, spans: Path, traceparent: str | None) -> MessageEnvelope:
    env = parent.environ(**{ENV_SPANS_DIR: str(spans), "TRACEPARENT": traceparent})
    done = parent.run_child("message", "planner", "hello", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope))
    assert isinstance(sent, MessageEnvelope)
    return sent


def test_a_call_joins_the_trace_of_its_traceparent(parent: FakeParent, tmp_path: Path) -> None:
    sent = _message(parent, tmp_path / "spans", TASK_TP)
    (span,) = named(read_spans(tmp_path / "spans"), "execute_tool shepherd_message")
    assert span.trace_id == "0x4bf92f3577b34da6a3ce929d0e0e4736"
    assert span.parent_id == "0x00f067aa0ba902b7"
    assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert span.attributes["gen_ai.tool.name"] == "shepherd_message"
    assert span.attributes["gen_ai.conversation.id"] == parent.session_id
    assert span.attributes["gen_ai.agent.id"] == parent.agent_id
    # the envelope names the call's span: the parent's messaging span is its child
    assert sent.traceparent is not None
    assert sent.traceparent[:-3] == span.traceparent[:-3]


@pytest.mark.parametrize("bad", MALFORMED, ids=lambda b: b[:12])
def test_a_malformed_traceparent_in_the_environment_starts_a_new_trace(
    parent: FakeParent, tmp_path: Path, bad: str
) -> None:
    sent = _message(parent, tmp_path / "spans", bad)
    (span,) = named(read_spans(tmp_path / "spans"), "execute_tool shepherd_message")
    assert span.parent_id is None  # a root: a new trace
    assert sent.traceparent is not None and sent.traceparent[3:35] == span.trace_id[2:]


def test_a_refused_call_is_an_error_span(parent: FakeParent, tmp_path: Path) -> None:
    parent.answer = lambda env: (False, ErrorInfo(code="agent_busy", message="busy"), None, None)
    env = parent.environ(**{ENV_SPANS_DIR: str(tmp_path / "spans"), "TRACEPARENT": TASK_TP})
    done = parent.run_child("done", "--status", "completed", env=env)
    assert done.returncode == 2
    (span,) = named(read_spans(tmp_path / "spans"), "execute_tool shepherd_done")
    assert (span.status, span.attributes["error.type"]) == ("ERROR", "agent_busy")


def test_without_the_package_a_call_says_so_and_goes_through_untraced(
    parent: FakeParent, tmp_path: Path
) -> None:
    parent.task_id = new_id(IdKind.TASK)
    parent.answer = lambda env: (True, None, None, task_result(parent))
    env = parent.environ(**{ENV_OTEL: "1", "TRACEPARENT": TASK_TP})
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, "done", "--status", "completed", "--json"],
        cwd=parent.tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "tracing is off" in done.stderr and "shepherd[otel]" in done.stderr
    _, sent = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert sent.traceparent is None


TOOL_SCRIPT = [
    {"await": "task"},
    {"run": "true"},
    {"done": {"status": "completed", "summary": "ran"}},
    {"await": "any"},
]


@pytest.mark.parametrize("traceparent", [TASK_TP, "garbage", None])
def test_the_bridges_tool_spans_join_the_tasks_trace_or_a_new_one(
    parent: FakeParent, tmp_path: Path, traceparent: str | None
) -> None:
    spans = tmp_path / "spans"
    bridge = parent.start_bridge(
        "scripted", {"script": parent.write_script(TOOL_SCRIPT)}, **{ENV_SPANS_DIR: str(spans)}
    )
    parent.wait_event("ready")
    parent.task_id = new_id(IdKind.TASK)
    task = TaskEnvelope(
        **parent.base(), task_id=parent.task_id, content="go", traceparent=traceparent
    )
    parent.answer = lambda env: (True, None, None, task_result(parent))
    parent.send(task)
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    parent.send(ControlEnvelope(**parent.base(), action="close"))
    assert bridge.wait() == 0
    (tool,) = named(read_spans(spans), "execute_tool bash")
    if traceparent == TASK_TP:
        assert (tool.trace_id, tool.parent_id) == (
            "0x4bf92f3577b34da6a3ce929d0e0e4736",
            "0x00f067aa0ba902b7",
        )
        # what the agent sends after the tool call names the task's context
        assert done.traceparent == TASK_TP
    else:  # none, or dropped when the envelope was read: a new trace, the task goes on
        assert tool.parent_id is None
        assert done.traceparent is None
    assert tool.attributes["shepherd.task.id"] == parent.task_id
