"""Every CLI call is bounded, whatever the parent does: with the session's supervisor stopped
(SIGSTOP: a debugger, a stuck disk), each command answers `session_unavailable` instead of
hanging, and `wait ID --timeout 2` returns within its timeout and a documented margin. The
commands sent to the supervisor's command socket are taken from the list the entry point
forwards, so none is forgotten; the others (`shutdown`, the watchdog's) go over the mailbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.command_wire import PARENT_COMMANDS
from tests.processes.conftest import cli

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


def _argv(command: str, agent: str, task: str, script: str) -> list[str]:
    """One call of ``command`` with arguments that a running session would take."""
    return {
        "spawn": ["spawn", "other", "--script", script],
        "spawn-many": ["spawn-many", "x1", "x2", "--script", script],
        "delegate": ["delegate", agent, "more work"],
        "delegate-many": ["delegate-many", "--task", agent, "more"],
        "message": ["message", agent, "hello"],
        "watch": ["watch", task],
        "status": ["status"],
        "close": ["close", agent],
        "read": ["read", agent],
        "cancel": ["cancel", task],
        "fail": ["fail", task, "--error", "stop"],
        "prompt": ["prompt", agent, "hello"],
        "wait": ["wait", task, "--timeout", "2"],
        "result": ["result", task],
        "approve": ["approve", "shepherd-message-00000000deadbeef"],
        "deny": ["deny", "shepherd-message-00000000deadbeef", "--reason", "no"],
        "worktrees": ["worktrees"],
        "merge": ["merge", agent],
        "shutdown": ["shutdown"],
        "watchdog": ["watchdog", "status"],
    }[command]


def _run(argv: list[str], session: Path) -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.entry", *argv, "--json", "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=120,  # a ceiling: the command's own bounds end it well before
        check=False,
    )
    try:
        body = json.loads(done.stdout)
    except ValueError:
        body = done.stdout
    return done.returncode, body, done.stderr


def test_every_command_answers_session_unavailable_while_the_parent_is_stopped(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    script = tmp_path / "idle.json"
    script.write_text(json.dumps(IDLE))
    cli("spawn", "worker", "--script", str(script), session=session)
    _, task = cli("delegate", "worker", "work", session=session)
    commands = [*sorted(PARENT_COMMANDS), "shutdown", "watchdog"]
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            answers = dict(
                zip(
                    commands,
                    pool.map(
                        lambda c: _run(_argv(c, "worker", task["task_id"], str(script)), session),
                        commands,
                    ),
                    strict=True,
                )
            )
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    for command, (code, body, err) in answers.items():
        assert code == 2, (command, code, body, err)
        assert body["error"]["code"] == "session_unavailable", (command, body)
        assert "Traceback" not in err, (command, err)
    # the forwarded ones name what did not answer
    assert "did not answer its command socket" in answers["status"][1]["error"]["message"]
    # The calls that reached the mailbox wait there: once the supervisor runs again it takes
    # them (the shutdown among them: "it may or may not have been done"), and ends.
    assert server.proc.wait(timeout=120) == 0


def test_mcp_tools_answer_session_unavailable_while_the_parent_is_stopped(
    serve: Any, tmp_path: Path
) -> None:
    """The MCP server is a client of the session too: a tool call while the supervisor is
    stopped is a typed error within its bound, never a call the parent model waits on for
    ever. Driven with the SDK's own client."""
    import anyio

    from tests.tools.test_mcp_server import call_error, mcp_session

    server = serve()
    session = tmp_path / "session"
    script = tmp_path / "idle.json"
    script.write_text(json.dumps(IDLE))
    cli("spawn", "worker", "--script", str(script), session=session)
    _, task = cli("delegate", "worker", "work", session=session)

    async def scenario() -> None:
        with anyio.fail_after(300):
            async with mcp_session(tmp_path, session) as mcp:
                os.kill(server.proc.pid, signal.SIGSTOP)
                try:
                    for name, arguments in (
                        ("shepherd_status", {}),
                        ("shepherd_cancel", {"task_id": task["task_id"]}),
                    ):
                        err = await call_error(mcp, name, arguments)
                        assert err["code"] == "session_unavailable", (name, err)
                finally:
                    os.kill(server.proc.pid, signal.SIGCONT)

    anyio.run(scenario)
