"""map_event on recorded event shapes, and PiProcess against a fake Pi (no Node needed)."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from actors.child.pi.errors import PiCommandError, PiError, PiExitedError, PiTimeoutError
from actors.child.pi.events import RuntimeEvent, map_event
from actors.child.pi.rpc import PiProcess

from .conftest import EventLog

pytestmark = pytest.mark.timeout(20)

# -- map_event ------------------------------------------------------------------------


def assistant(stop: str, *content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content), "stopReason": stop, **extra}


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def test_run_boundaries_map_to_turns_never_to_completion() -> None:
    assert map_event({"type": "agent_start"}) == RuntimeEvent(kind="turn_start")
    end = map_event(
        {
            "type": "agent_end",
            "messages": [
                {"role": "user", "content": [text("go")]},
                assistant("toolUse", {"type": "toolCall", "id": "c", "name": "bash"}),
                {"role": "toolResult", "toolCallId": "c", "content": [text("x")]},
                assistant("aborted", errorMessage="Request was aborted"),
            ],
        }
    )
    assert end == RuntimeEvent(kind="turn_end", stop_reason="aborted", text="Request was aborted")
    assert map_event({"type": "agent_end", "messages": []}) == RuntimeEvent(kind="turn_end")
    failed = map_event({"type": "agent_end", "messages": [assistant("error", errorMessage="500")]})
    assert failed is not None
    assert (failed.kind, failed.is_error, failed.text) == ("turn_end", True, "500")
    # Pi's per-model-call turns are not the runtime's turns.
    assert map_event({"type": "turn_start"}) is None
    assert map_event({"type": "turn_end", "message": assistant("stop", text("hi"))}) is None


def test_tool_events_carry_command_and_output() -> None:
    assert map_event(
        {
            "type": "tool_execution_start",
            "toolCallId": "call_1",
            "toolName": "bash",
            "args": {"command": "echo  hello", "timeout": 5},
        }
    ) == RuntimeEvent(kind="tool_call", tool="bash", tool_call_id="call_1", command="echo  hello")
    other = map_event(
        {
            "type": "tool_execution_start",
            "toolCallId": "call_2",
            "toolName": "read",
            "args": {"path": "ä.txt", "limit": 3},
        }
    )
    assert other is not None
    assert other.command == '{"limit":3,"path":"ä.txt"}'  # compact, sorted, stable
    assert other.paths == ()  # read writes nothing
    for tool, args in (("write", {"path": "src/a.py", "content": "x"}), ("edit", {"path": "b"})):
        wrote = map_event({"type": "tool_execution_start", "toolName": tool, "args": args})
        assert wrote is not None and wrote.paths == (args["path"],)  # live edit collisions
    long = map_event(
        {"type": "tool_execution_start", "toolName": "write", "args": {"path": "x" * 2000}}
    )
    assert long is not None and long.paths == ()  # beyond the wire's bound: not counted
    assert map_event(
        {
            "type": "tool_execution_end",
            "toolCallId": "call_1",
            "toolName": "bash",
            "result": {
                "content": [text("a"), {"type": "image", "data": "…"}, text("b")],
                "details": {},
            },
            "isError": True,
        }
    ) == RuntimeEvent(
        kind="tool_result", tool="bash", tool_call_id="call_1", output="a\nb", is_error=True
    )
    assert map_event({"type": "tool_execution_update", "partialResult": {}}) is None


def test_assistant_text_is_output_other_messages_are_not() -> None:
    assert map_event(
        {"type": "message_end", "message": assistant("stop", text("Hello"), text("world"))}
    ) == RuntimeEvent(kind="output", text="Hello\nworld", stop_reason="stop")
    tool_only = assistant("toolUse", {"type": "toolCall", "id": "c", "name": "bash"})
    assert map_event({"type": "message_end", "message": tool_only}) is None
    user = {"role": "user", "content": [text("hi")]}
    assert map_event({"type": "message_end", "message": user}) is None
    assert map_event({"type": "message_update", "message": assistant("stop", text("x"))}) is None
    error = map_event(
        {"type": "message_end", "message": assistant("error", errorMessage="connect ECONNREFUSED")}
    )
    assert error == RuntimeEvent(
        kind="error", is_error=True, stop_reason="error", text="connect ECONNREFUSED"
    )


def test_extension_errors_and_unknown_events() -> None:
    ev = map_event(
        {"type": "extension_error", "extensionPath": "x.ts", "event": "tool_call", "error": "boom"}
    )
    assert ev is not None
    assert ev.kind == "error"
    assert "x.ts" in (ev.text or "")
    assert "boom" in (ev.text or "")
    for kind in ("queue_update", "message_start", "compaction_start", "auto_retry_start", "?"):
        assert map_event({"type": kind}) is None
    assert map_event({}) is None


def test_a_finished_compaction_is_a_condensation_and_an_aborted_one_is_nothing() -> None:
    done = map_event(
        {
            "type": "compaction_end",
            "reason": "threshold",
            "result": {"summary": "what happened so far", "tokensBefore": 150000},
            "aborted": False,
            "willRetry": False,
        }
    )
    assert done == RuntimeEvent(kind="condensation", text="context compaction (threshold)")
    failed = map_event(
        {
            "type": "compaction_end",
            "reason": "overflow",
            "result": None,
            "aborted": False,
            "willRetry": False,
            "errorMessage": "quota exceeded",
        }
    )
    assert failed == RuntimeEvent(
        kind="condensation",
        text="context compaction (overflow) failed: quota exceeded",
        is_error=True,
    )
    aborted = {"type": "compaction_end", "reason": "manual", "result": None, "aborted": True}
    assert map_event(aborted) is None


# -- PiProcess against a fake Pi --------------------------------------------------------

FAKE_PI = r"""
import json, os, sys, time

def out(obj):
    # ensure_ascii=False: U+2028 goes out raw, as Pi writes it.
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()

sys.stderr.write("fake pi starting\n"); sys.stderr.flush()
for line in sys.stdin:
    cmd = json.loads(line)
    kind, cid = cmd.get("type"), cmd.get("id")
    if kind == "get_state":
        agent_dir = os.environ["PI_CODING_AGENT_DIR"]
        out({"id": cid, "type": "response", "command": kind, "success": True, "data": {
            "argv": sys.argv[1:], "cwd": os.getcwd(),
            "offline": os.environ.get("PI_OFFLINE"), "extra": os.environ.get("EXTRA"),
            "models": json.load(open(os.path.join(agent_dir, "models.json")))}})
    elif kind == "prompt":
        out({"id": cid, "type": "response", "command": kind, "success": True})
        out({"type": "agent_start"})
        out({"type": "message_end", "message": {"role": "assistant", "stopReason": "stop",
             "content": [{"type": "text", "text": cmd["message"] + "\u2028tail"}]}})
        out({"type": "agent_end", "messages": []})
    elif kind == "busy":
        out({"id": cid, "type": "response", "command": kind, "success": False,
             "error": "Agent is already processing."})
    elif kind == "mute":
        pass
    elif kind == "die":
        sys.stdout.write("not json\n"); sys.stdout.flush()
        sys.exit(3)
    else:
        out({"type": "response", "command": kind, "success": False,
             "error": f"Unknown command: {kind}"})
"""


@pytest.fixture
def fake_pi(tmp_path: Path) -> Path:
    path = tmp_path / "fake-pi"
    path.write_text(f"#!{sys.executable}\n{FAKE_PI}")
    path.chmod(0o755)
    return path


def test_fake_pi_round_trips_events_framing_and_errors(fake_pi: Path, tmp_path: Path) -> None:
    log = EventLog()
    seen: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        seen.append(event["type"])
        if event["type"] == "agent_start":
            raise RuntimeError("a broken observer must not break the reader")
        log(event)

    models = {"providers": {"p": {"baseUrl": "http://127.0.0.1:1/v1"}}}
    with PiProcess(
        fake_pi,
        models=models,
        provider="p",
        model="m",
        extensions=["a.ts"],
        cwd=tmp_path,
        env={"EXTRA": "1"},
        on_event=on_event,
        on_exit=log.on_exit,
    ) as pi:
        state = pi.wait_ready()
        assert state["argv"][:2] == ["--mode", "rpc"]
        assert state["argv"][-6:] == ["--provider", "p", "--model", "m", "-e", "a.ts"]
        assert (state["offline"], state["extra"], state["models"]) == ("1", "1", models)
        assert state["cwd"] == str(tmp_path)
        assert os.getpgid(pi.pid) == pi.pid != os.getpgrp()

        pi.prompt("line\u2028split")  # U+2028 must not split a JSON line
        pi_end = log.wait_type("agent_end")
        assert pi_end == {"type": "agent_end", "messages": []}
        assert [e.kind for e in log.runtime()] == ["output", "turn_end"]
        assert log.runtime()[0].text == "line\u2028split\u2028tail"
        assert seen == ["agent_start", "message_end", "agent_end"]

        with pytest.raises(PiCommandError, match="already processing"):
            pi.call({"type": "busy"})
        # Pi answers unknown commands without an id: matched by command name.
        reply = pi.command({"type": "frobnicate"}, timeout=5)
        assert reply["success"] is False
        with pytest.raises(PiTimeoutError):
            pi.command({"type": "mute"}, timeout=0.1)
        assert "fake pi starting" in pi.stderr_text()
        agent_dir = pi.agent_dir
        assert (agent_dir / "models.json").exists()
    assert not agent_dir.exists()
    assert pi.returncode == 0
    assert log.exit_codes == [0]


def test_exit_fails_waiting_callers_and_later_commands(fake_pi: Path, tmp_path: Path) -> None:
    log = EventLog()
    stderr_file = tmp_path / "pi.stderr"
    models_file = tmp_path / "models.json"
    models_file.write_text('{"providers": {}}')
    agent_dir = tmp_path / "agent"
    with PiProcess(
        fake_pi,
        models=models_file,
        agent_dir=agent_dir,
        on_exit=log.on_exit,
        stderr_path=stderr_file,
    ) as pi:
        assert pi.wait_ready()["models"] == {"providers": {}}
        with pytest.raises(PiExitedError, match="exited with 3"):
            pi.command({"type": "die"}, timeout=5)
        assert log.wait_exit() == 3
        assert pi.returncode == 3
        assert not pi.running
        with pytest.raises(PiExitedError):
            pi.get_state()
        assert "fake pi starting" in pi.stderr_text()
    assert agent_dir.exists(), "a caller-owned agent dir is left in place"
    assert pi.close() == 3  # idempotent


def test_a_command_from_a_callback_raises_instead_of_deadlocking(fake_pi: Path) -> None:
    log = EventLog()
    holder: list[PiProcess] = []
    errors: list[Exception] = []

    def on_event(event: dict[str, Any]) -> None:
        try:
            holder[0].get_state()
        except PiError as exc:
            errors.append(exc)
        log(event)

    with PiProcess(fake_pi, models={}, on_event=on_event) as pi:
        holder.append(pi)
        pi.prompt("hi")
        log.wait_type("agent_end")
        assert len(errors) == 3
        assert "deadlock" in str(errors[0])
        assert pi.get_state()["offline"] == "1"


def test_kill_is_seen_as_a_crash(fake_pi: Path) -> None:
    log = EventLog()
    with PiProcess(fake_pi, models={}, on_exit=log.on_exit) as pi:
        pi.wait_ready()
        pgid = pi.pgid
        pi.kill()
        assert log.wait_exit() == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def test_a_missing_binary_raises_and_leaves_no_agent_dir(tmp_path: Path) -> None:
    before = set(Path(tempfile.gettempdir()).glob("shepherd-pi-*"))
    with pytest.raises(FileNotFoundError):
        PiProcess(tmp_path / "no-such-pi", models={})
    after = set(Path(tempfile.gettempdir()).glob("shepherd-pi-*"))
    assert after <= before


def test_runtime_event_is_frozen_and_encodable() -> None:
    import msgspec

    ev = RuntimeEvent(kind="tool_call", tool="bash", command="ls")
    with pytest.raises(AttributeError):
        ev.tool = "x"  # type: ignore[misc]
    assert json.loads(msgspec.json.encode(ev))["command"] == "ls"
