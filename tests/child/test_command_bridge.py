"""The bridge with the command adapter: a fake CLI agent, one process per turn."""

from __future__ import annotations

import os
import re
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.runtime.procs import session_members
from protocol.core.errors import ErrorInfo
from protocol.core.ids import IdKind
from protocol.wire.envelopes import (
    AckEnvelope,
    ControlEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)

from .conftest import FakeParent, new_id

pytestmark = pytest.mark.processes

FAKE_AGENT = textwrap.dedent(
    """
    import os, subprocess, sys
    args = sys.argv[1:]
    resumed = args[0] == "--resume"
    message = args[-1]
    print(("RESUMED" if resumed else "FIRST") + f" pid={os.getpid()}", flush=True)
    print("MSG:" + message, flush=True)
    print("SOCKET:" + os.environ.get("SHEPHERD_COMMAND_SOCKET", "none")[:1], flush=True)
    if "BLOCK-UNTIL " in message:
        path = message.split("BLOCK-UNTIL ", 1)[1].split()[0]
        os.mkfifo(path)
        print("BLOCKED", flush=True)
        with open(path) as fifo:  # blocks (no CPU) until the test opens it for writing
            fifo.read()
        print("RELEASED", flush=True)
    if "MARK-DONE" in message:
        done = subprocess.run(
            ["shepherd-child", "done", "--status", "completed", "--summary", "X"],
            capture_output=True, text=True,
        )
        print("DONE-RC", done.returncode, done.stdout.strip(), done.stderr.strip(), flush=True)
    if "FAIL-NOW" in message:
        print("something broke", file=sys.stderr, flush=True)
        sys.exit(3)
    """
)


def start_command_agent(parent: FakeParent, **options: object) -> int:
    agent = parent.tmp_path / "fake_agent.py"
    agent.write_text(FAKE_AGENT)
    base = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))}"
    opts: dict[str, object] = {
        "cmd": f"{base} {{message}}",
        "resume_cmd": f"{base} --resume {{message}}",
        **options,
    }
    bridge = parent.start_bridge("command", opts)
    _, ready = parent.wait_event("ready")
    assert ready.pid == bridge.pid
    return bridge.pid


def has(text: str) -> Callable[[str | None], bool]:
    return lambda value: value is not None and text in value


def close_and_wait(parent: FakeParent, after: int = 0) -> None:
    parent.send(ControlEnvelope(**parent.base(), action="close"))
    parent.wait_event("exit", after=after)
    assert parent.bridges[-1].wait() == 0


def test_the_agent_calls_done_from_its_shell(parent: FakeParent) -> None:
    bridge_pid = start_command_agent(parent)
    task = parent.delegate("please MARK-DONE")
    t, _ = parent.wait_event("turn_start")
    i, first = parent.wait_event("output", after=t, text=has("MSG:[Shepherd delegated task]"))
    assert f"Task ID: {task.task_id}" in (first.text or "")
    assert "FIRST" in (first.text or "")
    # its shell has the bridge's command socket: `shepherd-child done` ran in the bridge
    assert "SOCKET:@" in (first.text or "")
    # The turn's output and its `done` travel separately (the output through the bridge's
    # output pump, the done through its command socket): either may reach the parent first.
    d, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=t)
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.status, done.summary, done.task_id) == ("completed", "X", None)
    assert done.reply_inbox == done.message_id
    # the receipt is printed after `shepherd-child done` returned, which is after the parent
    # received the done and answered it: it follows both the first line and the done
    j, receipt = parent.wait_event("output", after=max(i, d), text=has("DONE-RC"))
    assert "DONE-RC 0 accepted done" in (receipt.text or "")
    assert task.task_id in (receipt.text or "")
    k, end = parent.wait_event("turn_end", after=i)
    assert (end.exit_code, end.is_error) == (0, False)
    assert k > j  # the receipt was printed inside the turn
    dones = [e for e in parent.snapshot() if isinstance(e, TaskDoneEnvelope)]
    assert len(dones) == 1  # only the agent's own call; the turn ending adds nothing
    close_and_wait(parent, after=k)
    assert session_members(bridge_pid) == []


def test_a_failing_turn_is_an_error_output_not_an_exit(parent: FakeParent) -> None:
    start_command_agent(parent)
    parent.delegate("FAIL-NOW")
    i, out = parent.wait_event("output", text=has("exited with status 3"))
    assert out.is_error
    assert "something broke" in (out.text or "")
    i, end = parent.wait_event("turn_end", after=i)
    assert (end.exit_code, end.is_error) == (3, True)
    # still alive and taking turns
    parent.message("and now MARK-DONE")
    i, _ = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=i)
    i, out = parent.wait_event("output", after=i, text=has("DONE-RC 0"))
    close_and_wait(parent, after=i)
    assert not any(isinstance(e, RuntimeEnvelope) and e.event == "error" for e in parent.snapshot())


def test_a_follow_up_waits_for_the_next_turn(parent: FakeParent, tmp_path: Path) -> None:
    release = tmp_path / "release"
    start_command_agent(parent)
    parent.delegate(f"BLOCK-UNTIL {release}")
    i, _ = parent.wait_event("output", text=has("BLOCKED"))
    parent.message("second-note")
    # a marker behind the follow-up: once its effect shows, the follow-up was handled too
    marker = new_id(IdKind.MESSAGE)
    parent.send(
        AckEnvelope(
            **parent.base(),
            ack_for=marker,
            accepted=False,
            error=ErrorInfo(code="invalid_handle", message="marker"),
        )
    )
    i, _ = parent.wait_event("output", after=i, text=has(marker))
    starts = [
        e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.event == "turn_start"
    ]
    assert len(starts) == 1  # queued, not started, not interrupting
    with open(release, "w") as fifo:  # the fake agent's FIFO: opening it releases the agent
        fifo.write("go")
    i, _ = parent.wait_event("output", after=i, text=has("RELEASED"))
    i, end = parent.wait_event("turn_end", after=i)
    assert end.exit_code == 0
    i, _ = parent.wait_event("turn_start", after=i)
    i, second = parent.wait_event("output", after=i, text=has("MSG:"))
    assert "RESUMED" in (second.text or "")  # later turns use resume_cmd
    assert "second-note" in (second.text or "")
    assert "[Shepherd message from shepherd]" in (second.text or "")
    i, _ = parent.wait_event("turn_end", after=i)
    interrupted = [
        e
        for e in parent.snapshot()
        if isinstance(e, RuntimeEnvelope) and "interrupted" in (e.text or "")
    ]
    assert interrupted == []
    close_and_wait(parent, after=i)


def test_a_steer_interrupts_the_running_turn_and_starts_the_next(
    parent: FakeParent, tmp_path: Path
) -> None:
    start_command_agent(parent, kill_grace_s=5)
    parent.delegate(f"BLOCK-UNTIL {tmp_path / 'never-opened'}")
    i, first = parent.wait_event("output", text=has("BLOCKED"))
    match = re.search(r"FIRST pid=(\d+)", first.text or "")
    if match is None:
        i, first = parent.wait_event("output", text=has("FIRST pid="))
        match = re.search(r"FIRST pid=(\d+)", first.text or "")
    assert match is not None
    first_pid = int(match.group(1))
    parent.message("STEER-NOW change course", delivery="steer")
    i, note = parent.wait_event("output", after=i, text=has("turn interrupted"))
    i, end = parent.wait_event("turn_end", after=i)
    assert end.exit_code == 143  # SIGTERM to the turn's process group
    assert not os.path.exists(f"/proc/{first_pid}")  # the blocked agent is gone (and reaped)
    i, _ = parent.wait_event("turn_start", after=i)
    i, second = parent.wait_event("output", after=i, text=has("MSG:"))
    text = second.text or ""
    assert text.index("MSG:[Shepherd message from shepherd]") < text.index("STEER-NOW")
    assert "RESUMED" in text
    i, _ = parent.wait_event("turn_end", after=i)
    assert "steered" in (note.text or "")
    close_and_wait(parent, after=i)


def test_abort_interrupts_the_turn(parent: FakeParent, tmp_path: Path) -> None:
    start_command_agent(parent)
    parent.delegate(f"BLOCK-UNTIL {tmp_path / 'never-opened'}")
    i, _ = parent.wait_event("output", text=has("BLOCKED"))
    parent.send(ControlEnvelope(**parent.base(), action="abort", reason="enough"))
    i, _ = parent.wait_event("output", after=i, text=has("turn interrupted (abort: enough)"))
    i, end = parent.wait_event("turn_end", after=i)
    assert end.exit_code == 143
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())
    close_and_wait(parent, after=i)


def test_close_during_a_turn_kills_it_and_leaves_nothing(
    parent: FakeParent, tmp_path: Path
) -> None:
    bridge_pid = start_command_agent(parent)
    parent.delegate(f"BLOCK-UNTIL {tmp_path / 'never-opened'}")
    i, _ = parent.wait_event("output", text=has("BLOCKED"))
    close_and_wait(parent, after=i)
    assert session_members(bridge_pid) == []


def test_bad_options_are_an_error_and_exit_2(parent: FakeParent) -> None:
    bridge = parent.start_bridge("command", {"cmd": "tool without a placeholder"})
    assert bridge.wait() == 2
    _, error = parent.wait_event("error")
    assert "{message}" in (error.text or "")
