"""The real Pi coding agent in RPC mode, driven by the scripted model: the basics."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.child.pi.errors import PiCommandError, PiExitedError
from actors.child.pi.launch import SHEPHERD_CHILD_EXTENSION
from actors.child.scripted_model import ScriptedModel, Text, ToolCall
from tests.reliability.live import process_running, wait_terminated

from .conftest import StartPi, tool_output_contains

pytestmark = [pytest.mark.pi, pytest.mark.timeout(60)]


def wait_for_flag_command(flag: Path, pid_file: Path | None = None) -> str:
    """A bash tool command that says "started" and blocks until ``flag`` exists.

    The loop runs inside the agent's tool process; the test itself never sleeps."""
    record = f"echo $$ > {shlex.quote(str(pid_file))}; " if pid_file else ""
    return (
        f"{record}echo started; "
        f"while [ ! -e {shlex.quote(str(flag))} ]; do sleep 0.02; done; echo released"
    )


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m.get("role") == "tool"]


def test_bash_tool_turn_maps_to_runtime_events(start_pi: StartPi, model: ScriptedModel) -> None:
    model.add_steps(ToolCall("bash", {"command": "echo hello"}), Text("All done."))
    pi, log = start_pi()
    pi.prompt("Say hello from the shell.")
    log.wait_type("agent_end")

    runtime = log.runtime()
    kinds = [e.kind for e in runtime]
    assert kinds == ["turn_start", "tool_call", "tool_result", "output", "turn_end"]
    call, result, output, end = runtime[1:]
    assert (call.tool, call.command) == ("bash", "echo hello")
    assert (result.tool, result.tool_call_id) == ("bash", call.tool_call_id)
    assert "hello" in (result.output or "")
    assert not result.is_error
    assert output.text == "All done."
    assert (end.stop_reason, end.is_error) == ("stop", False)

    first, second = model.wait_for_requests(2, timeout=5)
    assert first["stream"] is True
    assert {t["function"]["name"] for t in first["tools"]} == {"read", "bash", "edit", "write"}
    assert first["messages"][-1]["role"] == "user"
    assert "Say hello from the shell." in json.dumps(first["messages"][-1])
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "bash"
    assert tool_messages(second) == [
        {"role": "tool", "content": "hello\n", "tool_call_id": call.tool_call_id}
    ]
    assert pi.get_state()["isStreaming"] is False


FAKE_CHILD = """\
import json, os, sys
with open(os.environ["FAKE_CHILD_LOG"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
if "nobody" in sys.argv:
    sys.stderr.write("invalid_handle: no agent named nobody\\n")
    sys.exit(3)
kind = sys.argv[1]
print(json.dumps({"accepted": True, "kind": kind, "message_id": "shepherd-message-1"}))
"""


def test_child_tools_run_shepherd_child_and_done_ends_the_run(
    start_pi: StartPi, model: ScriptedModel, tmp_path: Path
) -> None:
    child = tmp_path / "shepherd-child"
    child.write_text(f"#!{sys.executable}\n{FAKE_CHILD}")
    child.chmod(0o755)
    calls_log = tmp_path / "child-argv.jsonl"
    model.add_steps(
        ToolCall(
            "shepherd_message",
            {"target": "planner", "message": "-what is the plan?", "expects_reply": True},
        ),
        ToolCall("shepherd_message", {"target": "nobody", "message": "hello"}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "x"}),
        Text("this answer must never be asked for"),
    )
    pi, log = start_pi(
        extensions=[SHEPHERD_CHILD_EXTENSION],
        env={"SHEPHERD_CHILD_BIN": str(child), "FAKE_CHILD_LOG": str(calls_log)},
    )
    pi.prompt("Ask the planner, then finish.")
    log.wait_type("agent_end")

    argvs = [json.loads(line) for line in calls_log.read_text().splitlines()]
    assert argvs == [
        ["message", "--json", "--expects-reply", "--", "planner", "-what is the plan?"],
        ["message", "--json", "--", "nobody", "hello"],
        ["done", "--json", "--status=completed", "--summary=x"],
    ]
    results = [e for e in log.runtime() if e.kind == "tool_result"]
    assert [(r.tool, r.is_error) for r in results] == [
        ("shepherd_message", False),
        ("shepherd_message", True),
        ("shepherd_done", False),
    ]
    assert json.loads(results[0].output or "") == {
        "accepted": True,
        "kind": "message",
        "message_id": "shepherd-message-1",
    }
    assert "invalid_handle: no agent named nobody" in (results[1].output or "")
    assert "exit code 3" in (results[1].output or "")
    assert json.loads(results[2].output or "")["kind"] == "done"

    # The receipt and the error reached the model; the accepted done ended the run at once
    # (terminate: true), so no fourth model call was made.
    requests = model.requests
    assert len(requests) == 3
    assert model.pending_steps == 1
    assert json.loads(tool_messages(requests[1])[0]["content"])["accepted"] is True
    assert "invalid_handle" in tool_messages(requests[2])[1]["content"]
    end = log.runtime()[-1]
    assert (end.kind, end.stop_reason) == ("turn_end", "toolUse")

    tools = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    message_schema = tools["shepherd_message"]["parameters"]
    assert message_schema["type"] == "object"
    assert message_schema["required"] == ["target", "message"]
    assert set(message_schema["properties"]) == {
        "target",
        "message",
        "expects_reply",
        "reply_to",
        "thread_id",
        "steer",
    }
    done_schema = tools["shepherd_done"]["parameters"]
    assert done_schema["required"] == ["status"]
    assert done_schema["properties"]["status"]["enum"] == ["completed", "blocked", "failed"]
    system = requests[0]["messages"][0]["content"]
    assert "- shepherd_done:" in system  # the promptSnippet lists it among available tools
    child_tools = {"shepherd_message", "shepherd_done", "shepherd_request_approval"}
    assert not any(name.startswith("shepherd_") and name not in child_tools for name in tools)
    approval_schema = tools["shepherd_request_approval"]["parameters"]
    assert approval_schema["required"] == ["message"]
    assert set(approval_schema["properties"]) == {"message", "timeout_s"}


def test_steer_while_a_tool_runs_lands_right_after_its_result(
    start_pi: StartPi, model: ScriptedModel, tmp_path: Path
) -> None:
    flag = tmp_path / "release"
    model.add_steps(ToolCall("bash", {"command": wait_for_flag_command(flag)}), Text("Steered."))
    pi, log = start_pi()
    pi.prompt("Run the long command.")
    log.wait_for(tool_output_contains("started"))

    with pytest.raises(PiCommandError, match="already processing"):
        pi.prompt("a plain prompt while busy is refused")
    pi.steer("Change of plan: stop after this command.")
    log.wait_for(lambda e: e.get("type") == "queue_update" and bool(e.get("steering")))
    flag.touch()
    log.wait_type("agent_end")

    _, second = model.wait_for_requests(2, timeout=5)
    roles = [m["role"] for m in second["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert "released" in second["messages"][-2]["content"]
    assert "Change of plan: stop after this command." in json.dumps(second["messages"][-1])
    assert log.types().count("agent_end") == 1
    assert [e.kind for e in log.runtime()].count("turn_end") == 1


def test_follow_up_while_running_lands_after_the_final_answer(
    start_pi: StartPi, model: ScriptedModel, tmp_path: Path
) -> None:
    flag = tmp_path / "release"
    model.add_steps(
        ToolCall("bash", {"command": wait_for_flag_command(flag)}),
        Text("First answer."),
        Text("Answer to the follow-up."),
    )
    pi, log = start_pi()
    pi.prompt("Run the long command.")
    log.wait_for(tool_output_contains("started"))
    pi.follow_up("And one more thing.")
    flag.touch()
    log.wait_type("agent_end")

    requests = model.wait_for_requests(3, timeout=5)
    assert "And one more thing." not in json.dumps(requests[1]["messages"])
    last = requests[2]["messages"]
    assert [m["role"] for m in last[-2:]] == ["assistant", "user"]
    assert last[-2]["content"] == "First answer."
    assert "And one more thing." in json.dumps(last[-1])
    outputs = [e.text for e in log.runtime() if e.kind == "output"]
    assert outputs == ["First answer.", "Answer to the follow-up."]
    assert log.types().count("agent_end") == 1


def test_abort_during_a_long_tool_ends_it_with_an_error_and_ends_the_turn(
    start_pi: StartPi, model: ScriptedModel, tmp_path: Path
) -> None:
    pid_file = tmp_path / "tool.pid"
    never = tmp_path / "never-created"
    model.add_steps(ToolCall("bash", {"command": wait_for_flag_command(never, pid_file)}))
    pi, log = start_pi()
    pi.prompt("Run the endless command.")
    log.wait_for(tool_output_contains("started"))
    tool_pid = int(pid_file.read_text())

    pi.abort()
    # Pi emits the tool's end and agent_end before the abort's own response, and the reader
    # hands events over before it resolves a response: no waiting needed here.
    runtime = log.runtime()
    result = next(e for e in runtime if e.kind == "tool_result")
    assert result.is_error
    assert "aborted" in (result.output or "").lower()
    assert runtime[-1].kind == "turn_end"
    assert runtime[-1].stop_reason == "aborted"
    assert wait_terminated(tool_pid), "abort kills the tool's process"
    assert pi.get_state()["isStreaming"] is False
    assert len(model.requests) == 1


def test_close_while_running_leaves_no_process_behind(
    start_pi: StartPi, model: ScriptedModel, tmp_path: Path
) -> None:
    pid_file = tmp_path / "tool.pid"
    never = tmp_path / "never-created"
    model.add_steps(ToolCall("bash", {"command": wait_for_flag_command(never, pid_file)}))
    pi, log = start_pi()
    pi.prompt("Run the endless command.")
    log.wait_for(tool_output_contains("started"))
    tool_pid = int(pid_file.read_text())
    # Pi runs bash tools detached (their own group and session): not in Pi's group.
    assert os.getpgid(tool_pid) != pi.pgid
    pgid, agent_dir = pi.pgid, pi.agent_dir

    assert pi.close(timeout=5) == 0  # end of input: Pi exits 0 on its own
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert not process_running(tool_pid), "close() kills the detached tool process too"
    assert not agent_dir.exists()
    assert log.exit_codes == [0]
    with pytest.raises(PiExitedError):
        pi.get_state()


def test_killed_pi_is_an_exit_not_a_turn_end(
    start_pi: StartPi, model: ScriptedModel, tmp_path: Path
) -> None:
    pid_file = tmp_path / "tool.pid"
    never = tmp_path / "never-created"
    model.add_steps(ToolCall("bash", {"command": wait_for_flag_command(never, pid_file)}))
    pi, log = start_pi()
    pi.prompt("Run the endless command.")
    log.wait_for(tool_output_contains("started"))
    tool_pid = int(pid_file.read_text())

    pi.kill()
    assert log.wait_exit() == -9
    assert "agent_end" not in log.types()
    assert not process_running(tool_pid), "kill() takes Pi's detached tools down too"
    pgid = pi.pgid
    pi.close()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
