"""Which session a command talks to when none is named: the only live one, said on stderr;
never a guess among several (the newest may be another project's). And a ``--session`` that
cannot be one is a typed error naming the option, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.session.supervisor import Supervisor
from tests.tools.mcp_stdio import McpProcess

pytestmark = pytest.mark.processes

#: every kind of entry point that finds a session: a plain call, the notification reader, the
#: live view, the watchdog commands and the generic tool call
COMMANDS: list[list[str]] = [
    ["status"],
    ["notifications"],
    ["top", "--once"],
    ["watchdog", "status"],
    ["tool", "shepherd_status"],
]


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[list[Supervisor]]:
    """Start live sessions on demand (each one's supervisor is this process)."""
    started: list[Supervisor] = []

    def start(name: str) -> Supervisor:
        sup = Supervisor(tmp_path / name, mailbox_root=tmp_path / f"{name}-mailbox")
        started.append(sup)
        return sup

    yield start  # type: ignore[misc]
    for sup in started:
        sup.shutdown()


def shepherd(*args: str, env: dict[str, str] | None = None) -> tuple[int, Any, str]:
    """``shepherd ARGS`` → (exit status, stdout as JSON when it is, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.entry", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    try:
        out: Any = json.loads(done.stdout)
    except ValueError:
        out = done.stdout
    return done.returncode, out, done.stderr


def test_the_only_live_session_is_used_and_named_on_stderr(sessions: Any) -> None:
    sup = sessions("only")
    rc, out, err = shepherd("status", "--json")
    assert rc == 0, err
    assert out["session_id"] == sup.session_id  # stdout: exactly the documented object
    assert str(sup.session_dir) in err and "only live" in err
    rc, out, err = shepherd("status")
    assert rc == 0 and str(sup.session_dir) in err
    # a session named by the option or the environment is not announced
    rc, out, err = shepherd("status", "--json", "--session", str(sup.session_dir))
    assert (rc, out["session_id"], err) == (0, sup.session_id, "")
    rc, out, err = shepherd("status", "--json", env={"SHEPHERD_SESSION": str(sup.session_dir)})
    assert (rc, out["session_id"], err) == (0, sup.session_id, "")


def test_several_live_sessions_are_refused_with_their_list(sessions: Any, tmp_path: Path) -> None:
    first, second = sessions("first"), sessions("second")
    for command in COMMANDS:
        rc, out, err = shepherd(*command, "--json")
        assert rc == 2, (command, out, err)
        error = out["error"]
        assert error["code"] == "invalid_argument", command
        message = error["message"]
        assert "2 live Shepherd sessions" in message, message
        for sup in (first, second):
            assert str(sup.session_dir) in message and f"pid {os.getpid()}" in message
        assert "created" in message and "--session" in message and "SHEPHERD_SESSION" in message
        assert "Traceback" not in err
    # the newest first
    rc, out, _ = shepherd("status", "--json")
    message = out["error"]["message"]
    assert message.index(str(second.session_dir)) < message.index(str(first.session_dir))
    # choosing one works, by option or by environment
    rc, out, _ = shepherd("status", "--json", "--session", str(first.session_dir))
    assert (rc, out["session_id"]) == (0, first.session_id)
    rc, out, _ = shepherd("status", "--json", env={"SHEPHERD_SESSION": str(second.session_dir)})
    assert (rc, out["session_id"]) == (0, second.session_id)
    # `shepherd mcp` without --session: every tool call says the same
    server = McpProcess(tmp_path)
    try:
        answer = server.call("shepherd_status", {})
        assert answer["error"]["code"] == "invalid_argument"
        assert str(first.session_dir) in answer["error"]["message"]
        assert str(second.session_dir) in answer["error"]["message"]
    finally:
        server.close()


def test_a_session_option_that_cannot_be_a_session_is_a_typed_error(
    sessions: Any, tmp_path: Path
) -> None:
    sup = sessions("real")
    regular = tmp_path / "a-file"
    regular.write_text("not a session\n")
    cases = [(c, str(regular), "not a session directory") for c in COMMANDS]
    cases += [(c, "", "is empty") for c in (["status"], ["top", "--once"])]
    for command, value, words in cases:
        rc, out, err = shepherd(*command, "--json", "--session", value)
        assert rc == 2, (command, value, out, err)
        assert out["error"]["code"] == "invalid_argument", (command, value, out)
        assert "--session" in out["error"]["message"], out
        assert words in out["error"]["message"], out
        assert "Traceback" not in err, err
    # the same value in the environment is named as the environment's
    rc, out, err = shepherd("status", "--json", env={"SHEPHERD_SESSION": str(regular)})
    assert rc == 2 and out["error"]["code"] == "invalid_argument"
    assert "SHEPHERD_SESSION" in out["error"]["message"]
    # an empty SHEPHERD_SESSION counts as unset: the only live session is used
    rc, out, err = shepherd("status", "--json", env={"SHEPHERD_SESSION": ""})
    assert (rc, out["session_id"]) == (0, sup.session_id)
    # text output: one line on stderr, no traceback
    rc, out, err = shepherd("status", "--session", str(regular))
    assert rc == 2 and err.startswith("shepherd: invalid_argument: --session")
    assert "Traceback" not in err
    # `shepherd mcp --session FILE`: served, and each tool call says why not
    server = McpProcess(tmp_path, "--session", str(regular))
    try:
        answer = server.call("shepherd_status", {})
        assert answer["error"]["code"] == "invalid_argument"
        assert "--session" in answer["error"]["message"]
    finally:
        server.close()
