"""Pi's tool events as ``execute_tool`` spans inside the task's trace: a real bridge driving a
real Pi (against the scripted model), its spans written as JSON lines
(``SHEPHERD_OTEL_SPANS_DIR``), the task's envelope carrying the task's traceparent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.child.scripted_model import ScriptedModel, Text, ToolCall, models_json
from actors.tracing import ENV_SPANS_DIR
from protocol.core.ids import IdKind
from protocol.wire.envelopes import ControlEnvelope, TaskDoneEnvelope, TaskEnvelope
from tests.child.conftest import FakeParent, new_id
from tests.tracing.spans import read_spans

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]

TASK_TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_pis_tool_calls_are_tool_spans_in_the_tasks_trace(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel, tmp_path: Path
) -> None:
    model.add_steps(
        ToolCall("bash", {"command": "echo from-the-tool"}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "echoed"}),
        Text("never asked for: done ends the run"),
    )
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(model.base_url)))
    spans_dir = tmp_path / "spans"
    bridge = parent.start_bridge(
        "pi-rpc",
        {"pi": str(pi_bin), "models_json": str(models)},
        **{ENV_SPANS_DIR: str(spans_dir)},
    )
    parent.wait_event("ready")
    parent.task_id = new_id(IdKind.TASK)
    parent.send(
        TaskEnvelope(
            **parent.base(),
            task_id=parent.task_id,
            content="echo, then finish",
            traceparent=TASK_TP,
        )
    )
    # a generous ceiling: a real Pi on a busy machine takes its time
    done_at, _ = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), timeout=60)
    parent.wait_event("turn_end", after=done_at)
    parent.send(ControlEnvelope(**parent.base(), action="close"))
    assert bridge.wait() == 0
    spans = read_spans(spans_dir)
    tools = sorted(
        (s for s in spans if s.name.startswith("execute_tool")), key=lambda s: s.raw["start_time"]
    )
    # one span per tool call, from the bridge: the shepherd-child command Pi's shepherd_done
    # ran is not a second one (it runs outside a command turn: no TRACEPARENT)
    assert [s.name for s in tools] == ["execute_tool bash", "execute_tool shepherd_done"]
    for span in tools:
        assert span.trace_id == "0x4bf92f3577b34da6a3ce929d0e0e4736"
        assert span.parent_id == "0x00f067aa0ba902b7"
        assert span.status == "UNSET"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.agent.id"] == parent.agent_id
        assert span.attributes["shepherd.task.id"] == parent.task_id
    assert tools[0].attributes["gen_ai.tool.name"] == "bash"
