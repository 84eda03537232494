"""Issue 13 (defects 5, 8, 9 and the lifecycle items of 12): a real `shepherd serve`, real
bridges, and a fake CLI agent (one Python process per turn), driven from the CLI.

Nothing sleeps: tests wait on `serve`'s lifecycle lines and notifications, on the sink of an
in-process supervisor, or on a process's exit, each with a timeout.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from tests.processes.conftest import Serve, cli
from tests.reliability.live import Story

pytestmark = pytest.mark.processes

#: A fake CLI agent: prints its pid and input, then acts on keywords in its input.
FAKE_AGENT = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    message = sys.argv[-1]
    print(f"PID={os.getpid()}", flush=True)
    print("MSG:" + message.replace("\\n", " | "), flush=True)
    if "IGNORE-TERM" in message:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL stops this turn
    if "BLOCK-UNTIL " in message:
        path = message.split("BLOCK-UNTIL ", 1)[1].split()[0]
        os.mkfifo(path)
        print("BLOCKED", flush=True)
        with open(path) as fifo:  # blocks without CPU until someone opens it for writing
            fifo.read()
        print("RELEASED", flush=True)
    if "MARK-DONE" in message:
        done = subprocess.run(
            ["shepherd-child", "done", "--status", "completed", "--summary", "marked"],
            capture_output=True, text=True,
        )
        print("DONE-RC", done.returncode, flush=True)
    if "FAIL-NOW" in message:
        print("about to fail", flush=True)
        print("something broke", file=sys.stderr, flush=True)
        sys.exit(3)
    """
)


def _command_agent(tmp_path: Path, session: Path, name: str = "worker") -> dict[str, Any]:
    agent = tmp_path / "fake_agent.py"
    agent.write_text(FAKE_AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    _, spawned = cli("spawn", name, "--adapter", "command", "--cmd", cmd, session=session)
    return spawned  # type: ignore[no-any-return]


def _stories(server: Serve, after: int = 0) -> list[str]:
    return [x["story"] for x in server.lines[after:] if "story" in x]


def _wait_story(server: Serve, text: str, after: int = 0, timeout: float = 60.0) -> None:
    assert server.wait_for(
        lambda lines: any(text in x.get("story", "") for x in lines[after:]), timeout=timeout
    ), f"no lifecycle line {text!r}: {_stories(server, after)}"


def _notices(server: Serve, code: str) -> list[dict[str, Any]]:
    return [x for x in server.lines if x.get("kind") == "notice" and x.get("code") == code]


def _turn_pid(session: Path, name: str) -> int:
    """The pid the blocked turn printed, read through `shepherd read` (bounded: each round
    is a real CLI round trip, not a sleep)."""
    for _ in range(300):
        lines = cli("read", name, session=session)[1]["lines"]
        if "BLOCKED" in lines:
            return int(
                next(x for x in reversed(lines) if x.startswith("PID=")).removeprefix("PID=")
            )
    raise AssertionError(f"the turn never blocked: {lines}")


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """Wait for ``pid`` to exit (a pidfd becomes readable when it does)."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- defect 5


@pytest.mark.parametrize("how", ["cancel", "fail", "timeout"])
def test_ending_a_task_stops_a_command_agents_turn_and_the_next_task_runs(
    serve: Any, tmp_path: Path, how: str
) -> None:
    server = serve()
    session = tmp_path / "session"
    _command_agent(tmp_path, session)
    fifo = tmp_path / "never-opened"
    timeout = ["--timeout", "0.1"] if how == "timeout" else []  # 6 s
    _, task = cli(
        "delegate", "worker", f"IGNORE-TERM BLOCK-UNTIL {fifo}", *timeout, session=session
    )
    pid = _turn_pid(session, "worker")
    lines = cli("read", "worker", "--lines", "200", session=session)[1]["lines"]
    first_input = next(x for x in lines if x.startswith("MSG:"))
    # a command agent is told the commands it has (a shell), not the Pi tools
    assert "shepherd-child done --status completed" in first_input
    assert "shepherd_done" not in first_input and "shepherd for the parent" in first_input
    mark = len(server.lines)
    if how != "timeout":
        (row,) = cli("status", "worker", session=session)[1]["agents"]
        assert row["process_state"] == "working"
    if how == "cancel":
        _, ended = cli("cancel", task["task_id"], "--reason", "not needed", session=session)
        assert (ended["status"], ended["already_settled"]) == ("cancelled", False)
    elif how == "fail":
        _, ended = cli("fail", task["task_id"], "--error", "gave up", session=session)
        assert (ended["status"], ended["already_settled"]) == ("failed", False)
    else:
        _wait_story(server, "timed_out", after=0)
    # the turn's whole process group is stopped (it ignores SIGTERM: SIGKILL after the grace)
    assert _gone(pid), f"the turn (pid {pid}) still runs after the task ended"
    _wait_story(server, "worker: process idle", after=mark)
    (row,) = cli("status", "worker", session=session)[1]["agents"]
    assert row["process_state"] == "idle"
    # ready for the next task: it runs, and its turn is told that the last task ended
    _, second = cli("delegate", "worker", "now MARK-DONE", session=session)
    _, waited = cli("wait", second["task_id"], "--timeout", "60", session=session)
    assert [r["status"] for r in waited["completed"]] == ["completed"], waited
    lines = cli("read", "worker", "--lines", "200", session=session)[1]["lines"]
    told = next(x for x in reversed(lines) if x.startswith("MSG:"))
    assert "[Shepherd notice: task ended]" in told and task["task_id"] in told
    assert told.index("task ended") < told.index("now MARK-DONE")


# ---------------------------------------------------------------------- defect 9


def test_a_turn_ending_without_done_is_told_with_its_status_and_output(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    _command_agent(tmp_path, session)
    _, task = cli("delegate", "worker", "FAIL-NOW", session=session)
    assert server.wait_for(lambda _: _notices(server, "turn_ended_without_done"), timeout=60)
    (notice,) = _notices(server, "turn_ended_without_done")
    assert notice["task_id"] == task["task_id"]
    assert "exit status 3" in notice["text"]
    assert "something broke" in notice["text"]  # the tail of the turn's output
    (row,) = cli("status", "worker", session=session)[1]["agents"]
    assert row["task"]["state"] == "running"  # not completing is right
    assert row["task"]["turns_without_done"] == 1 and row["task"]["last_turn_exit_code"] == 3
    text = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", "status", "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "turn ended without done" in text and "status 3" in text
    # a turn that calls done is not told
    cli("message", "worker", "MARK-DONE", session=session)
    _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
    assert [r["status"] for r in waited["completed"]] == ["completed"]
    cli("shutdown", session=session)
    server.proc.wait(timeout=30)
    assert len(_notices(server, "turn_ended_without_done")) == 1


# ---------------------------------------------------------------------- defect 8


def test_spawn_refuses_what_the_child_would_refuse(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    serve()
    session = tmp_path / "session"
    fifo = tmp_path / "script.fifo"
    os.mkfifo(fifo)  # reading it would block forever: refused without being opened
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"steps": [{"fly": "away"}]}')
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (1024 * 1024 + 1))
    cases: list[tuple[list[str], str]] = [
        (["--adapter", "command", "--cmd", "echo no placeholder"], "{message}"),
        (["--adapter", "command"], "{message}"),
        (["--adapter", "command", "--cmd", "x {message}", "--resume-cmd", "y"], "resume_cmd"),
        (["--adapter", "command", "--cmd", "x {message}", "--cwd", str(tmp_path / "no")], "cwd"),
        (["--script", "/etc/passwd"], "not valid JSON"),
        (["--script", str(fifo)], "not a regular file"),
        (["--script", str(bad_json)], "unknown step kind"),
        (["--script", str(huge)], "1048576 bytes"),
        ([], "script"),
        (["--adapter", "pi-rpc", "--pi", str(tmp_path / "no-pi")], "Pi binary"),
    ]
    for flags, words in cases:
        rc, err = cli("spawn", "agent", *flags, session=session, check=False)
        assert rc == 2, (flags, err)
        assert err["error"]["code"] == "invalid_argument", (flags, err)
        assert words in err["error"]["message"], (flags, err)
    assert cli("status", session=session)[1]["agents"] == []  # nothing was started
    # the name is checked first, and nothing speaks of command-line flags
    rc, err = cli("spawn", "Bad Name", session=session, check=False)
    assert rc == 2 and "agent name" in err["error"]["message"]
    assert "--" not in err["error"]["message"]


def test_an_agent_that_dies_at_start_is_told_with_its_reason(
    supervisor: Any, tmp_path: Path
) -> None:
    sup, sink = supervisor
    # a bad environment: the bridge cannot even start (here: its interpreter fails at once)
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named actors' >&2\nexit 1\n")
    broken.chmod(0o700)
    sup.launcher._python = str(broken)
    script = tmp_path / "idle.json"
    script.write_text(json.dumps({"steps": [{"await": "task"}]}))
    spawned = sup.session.spawn("ghost", script=str(script))
    assert sink.wait_for(
        lambda items: any(getattr(n, "code", None) == "agent_exited" for n in items), timeout=30
    )
    (notice,) = [n for n in sink.items if getattr(n, "code", None) == "agent_exited"]
    assert notice.agent_id == spawned.agent_id
    assert "exited with status 1 before it was ready" in notice.text
    assert "No module named actors" in notice.text
    lines = sup.session.read("ghost").lines
    assert any("No module named actors" in line for line in lines), lines
    (row,) = sup.session.status("ghost").agents
    assert row.process_state == "exited" and row.exit_code == 1


def test_the_agent_log_is_private_and_a_close_says_why_once(tmp_path: Path) -> None:
    story = Story()
    sup = Supervisor(
        tmp_path / "session", sinks=[CollectingSink()], tap=story, mailbox_root=tmp_path / "mb"
    )
    try:
        script = tmp_path / "idle.json"
        script.write_text(json.dumps({"steps": [{"await": "task"}]}))
        spawned = sup.session.spawn("quiet", script=str(script))
        story.wait("quiet: process idle")  # its bridge runs: the close is one it can hear
        log = sup.session_dir / "agents" / spawned.agent_id / "output.log"
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        sup.session.close("quiet")
        story.wait("quiet: process exited")
        text = log.read_text()
        assert "closed by the parent" in text
        assert "closed by the parent: closed by the parent" not in text
    finally:
        sup.shutdown()


# ---------------------------------------------------------------------- item 12


def test_the_cli_says_when_a_task_had_already_settled(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    serve()
    session = tmp_path / "session"
    _command_agent(tmp_path, session)
    _, task = cli("delegate", "worker", "MARK-DONE", session=session)
    cli("wait", task["task_id"], "--timeout", "60", session=session)
    for op, extra in (("fail", ["--error", "too late"]), ("cancel", [])):
        _, data = cli(op, task["task_id"], *extra, session=session)
        assert (data["status"], data["already_settled"]) == ("completed", True)
        argv = [sys.executable, "-m", "actors.surfaces.entry", op, task["task_id"], *extra]
        text = subprocess.run(
            [*argv, "--session", str(session)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert "completed (rc 0)" in text and "already settled" in text, text


def test_a_second_reply_from_the_cli_is_refused(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve()
    session = tmp_path / "session"
    asker = tmp_path / "asker.json"
    asker.write_text(
        json.dumps(
            {
                "steps": [
                    {"await": "task"},
                    {"message": {"to": "shepherd", "text": "which?", "expects_reply": True}},
                    {"await": "reply"},
                    {"done": {"status": "completed", "summary": "{last}"}},
                    {"await": "any"},
                ]
            }
        )
    )
    cli("spawn", "asker", "--script", str(asker), session=session)
    _, task = cli("delegate", "asker", "pick one", session=session)
    assert server.wait_for(
        lambda lines: any(x.get("kind") == "agent_message" for x in lines), timeout=60
    )
    question = next(x for x in server.lines if x.get("kind") == "agent_message")["message_id"]
    _, first = cli("message", "asker", "the first", "--reply-to", question, session=session)
    assert first["accepted"]
    rc, err = cli("message", "asker", "no, the second", "--reply-to", question, check=False,
                  session=session)  # fmt: skip
    assert rc == 2 and err["error"]["code"] == "invalid_transition"
    assert question in err["error"]["message"] and "already answered" in err["error"]["message"]
    _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
    assert [r["text"] for r in waited["completed"]] == ["the first"]
