"""The child bridge with the ``pi-rpc`` adapter, alone against a fake parent: a real
``shepherd-child run`` process driving a real Pi, driven in turn by the scripted model."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from actors.child.pi.adapter import FLUSH_NOTE
from actors.child.scripted_model import ScriptedModel, Text, ToolCall, models_json
from actors.runtime.procs import session_members
from protocol.calls.render import render_delivery, render_task_context, render_task_ended
from protocol.wire.envelopes import (
    ControlEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)
from tests.child.conftest import FakeParent
from tests.pi.test_pi_live import agent_processes, blocking_command, read_fifo_line, user_texts
from tests.reliability.live import process_running

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]


def pi_pids(bridge_pid: int) -> list[int]:
    """The Pi process(es) in the bridge's session (Pi sets its process title to "pi")."""
    found = []
    for pid in session_members(bridge_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.split(b"\0", 1)[0] == b"pi" or b"--mode\0rpc" in cmdline:
            found.append(pid)
    return found


def start_pi_bridge(parent: FakeParent, pi_bin: Path, model: ScriptedModel) -> int:
    models = parent.tmp_path / "models.json"
    models.write_text(json.dumps(models_json(model.base_url)))
    bridge = parent.start_bridge("pi-rpc", {"pi": str(pi_bin), "models_json": str(models)})
    _, ready = parent.wait_event("ready")
    assert ready.pid == bridge.pid
    return bridge.pid


def runtime_events(parent: FakeParent) -> list[RuntimeEnvelope]:
    return [e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]


def test_a_task_reaches_pi_as_its_task_context_and_tool_events_reach_the_parent(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel
) -> None:
    model.add_steps(
        ToolCall("bash", {"command": "echo from-the-tool"}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "echoed"}),
        Text("never asked for: done ends the run"),
    )
    bridge_pid = start_pi_bridge(parent, pi_bin, model)
    task = parent.delegate("Echo something from the shell, then finish.")

    done_at, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.status, done.summary) == ("completed", "echoed")
    end_at, _ = parent.wait_event("turn_end", after=done_at)

    # the model was told the task in the task context's wording, exactly
    first = model.requests[0]
    assert user_texts(first) == [render_task_context(task)]
    assert (
        "Do not consider the task complete merely because this turn ends" in (user_texts(first)[0])
    )
    # the tool events reached the parent, with the command and its output, in order
    events = runtime_events(parent)
    # (usage reports, one per assistant message, interleave: budgets count them)
    assert any(e.event == "usage" for e in events)
    kinds = [e.event for e in events if e.event not in ("output", "usage")]
    assert kinds == [
        "ready",
        "turn_start",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "turn_end",
    ]
    bash_call, bash_result, done_call, done_result = (
        e for e in events if e.event in ("tool_call", "tool_result")
    )
    assert (bash_call.tool, bash_call.command) == ("bash", "echo from-the-tool")
    assert (bash_result.tool, bash_result.command) == ("bash", "echo from-the-tool")
    assert "from-the-tool" in (bash_result.output or "")
    assert not bash_result.is_error
    assert done_call.tool == "shepherd_done"
    assert json.loads(done_call.command or "") == {"status": "completed", "summary": "echoed"}
    assert json.loads(done_result.output or "")["accepted"] is True
    assert len(model.requests) == 2  # done ended the run: no closing remark was asked for
    assert events[-1].event == "turn_end" and parent.snapshot().index(events[-1]) == end_at

    # the agent stays up (a turn ending, even after done, is not an exit) until closed
    assert parent.bridges[-1].proc.poll() is None
    parent.send(ControlEnvelope(**parent.base(), action="close"))
    parent.wait_event("exit", after=end_at)
    assert parent.bridges[-1].wait() == 0
    assert session_members(bridge_pid) == []
    assert agent_processes(parent.agent_id) == []


def test_an_idle_pi_is_prompted_with_the_delivery_and_pi_dying_ends_the_bridge(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel
) -> None:
    model.add_steps(Text("Noted."))
    bridge_pid = start_pi_bridge(parent, pi_bin, model)
    message = parent.message(
        "Which module first?",
        sender_id=parent.peer_id,
        sender_name="planner",
        expects_reply=True,
    )
    parent.wait_event("turn_end")
    (request,) = model.requests
    assert user_texts(request) == [render_delivery(message)]
    assert f"reply_to={message.message_id}" in user_texts(request)[0]

    (pi_pid,) = pi_pids(bridge_pid)
    assert os.getpgid(pi_pid) == pi_pid != bridge_pid  # its own group, in the bridge's session
    assert os.getsid(pi_pid) == bridge_pid
    os.kill(pi_pid, signal.SIGKILL)
    _, exit_event = parent.wait_event("exit")
    assert exit_event.exit_code == 137
    assert parent.bridges[-1].wait() == 137
    errors = [e.text or "" for e in runtime_events(parent) if e.event == "output" and e.is_error]
    assert any("exited with status 137" in text for text in errors), errors
    assert agent_processes(parent.agent_id) == []


def test_bad_options_are_a_start_up_error(parent: FakeParent, tmp_path: Path) -> None:
    parent.start_bridge("pi-rpc", {"pi": str(tmp_path / "no-such-pi")})
    _, error = parent.wait_event("error")
    assert "does not exist or is not executable" in (error.text or "")
    assert parent.bridges[-1].wait() == 2
    parent.start_bridge("pi-rpc", {"pi": sys.executable, "provider": "anthropic"})
    _, error = parent.wait_event("error", after=parent.snapshot().index(error) + 1)
    assert 'needs "models_json"' in (error.text or "")
    assert parent.bridges[-1].wait() == 2


def test_abort_stops_the_turn_and_a_queued_message_still_starts_the_next_one(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel, tmp_path: Path
) -> None:
    fifo = tmp_path / "started.fifo"
    os.mkfifo(fifo)
    model.add_steps(
        ToolCall("bash", {"command": blocking_command(fifo, tmp_path / "never")}),
        Text("Back to it."),
        Text("Answer to the follow-up."),
    )
    start_pi_bridge(parent, pi_bin, model)
    parent.delegate("Run the endless command.")
    tool_pid = int(read_fifo_line(fifo))
    message = parent.message("And one more thing.")
    queued_at, _ = parent.wait_event("output", text=lambda t: "queued as a follow-up" in (t or ""))

    # Pi does not read its queue after an abort: the adapter sees the queued message stranded
    # in an idle Pi and starts a run that delivers it
    parent.send(ControlEnvelope(**parent.base(), action="abort", reason="stop that"))
    result_at, result = parent.wait_event("tool_result", after=queued_at)
    assert result.is_error and "aborted" in (result.output or "").lower()
    end_at, end = parent.wait_event("turn_end", after=result_at)
    assert end.is_error is False
    assert not process_running(tool_pid)
    next_at, _ = parent.wait_event("turn_start", after=end_at)
    parent.wait_event("turn_end", after=next_at)

    requests = model.wait_for_requests(3, timeout=60)
    assert user_texts(requests[1])[-1] == FLUSH_NOTE
    assert user_texts(requests[2])[-1] == render_delivery(message)
    assert requests[2]["messages"][-2] == {"role": "assistant", "content": "Back to it."}


def test_cancel_task_aborts_the_tasks_run_and_pi_takes_the_next_task(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel, tmp_path: Path
) -> None:
    fifo = tmp_path / "started.fifo"
    os.mkfifo(fifo)
    model.add_steps(
        ToolCall("bash", {"command": blocking_command(fifo, tmp_path / "never")}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "second done"}),
    )
    start_pi_bridge(parent, pi_bin, model)
    first = parent.delegate("Run the endless command.")
    tool_pid = int(read_fifo_line(fifo))
    started_at, _ = parent.wait_event("tool_call")
    parent.send(
        ControlEnvelope(
            **parent.base(), action="cancel_task", task_id=first.task_id, reason="not needed"
        )
    )
    result_at, result = parent.wait_event("tool_result", after=started_at)
    assert result.is_error and "aborted" in (result.output or "").lower()
    end_at, _ = parent.wait_event("turn_end", after=result_at)
    assert not process_running(tool_pid)
    # ready for the next task; Pi is told, with it, that the last one ended
    second = parent.delegate("Now finish at once.")
    done_at, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=end_at)
    assert isinstance(done, TaskDoneEnvelope) and done.summary == "second done"
    requests = model.wait_for_requests(2, timeout=60)
    told = user_texts(requests[1])[-1]
    assert told == render_task_ended(first.task_id, "not needed") + "\n\n" + (
        render_task_context(second)
    )
    parent.wait_event("turn_end", after=done_at)
