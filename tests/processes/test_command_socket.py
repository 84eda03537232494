"""``shepherd``'s entry point and ``shepherd serve``'s command socket: a session operation runs
in the supervisor with the caller's directory and environment and prints what the whole command
line would; the caller loads none of it; a call for another session, a session without a
socket or a supervisor that is gone runs the command line in the caller, as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.command_wire import CHILD_COMMANDS, PARENT_COMMANDS
from protocol import ops
from tests.entrypoints import run_entry
from tests.processes.conftest import bridge_pids

#: what a forwarded call must not load: the command line, the mailbox, msgspec
HEAVY = ("msgspec", "actors.surfaces.cli", "actors.transports.mailbox", "protocol.ops", "argparse")


def _entry(
    tmp_path: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    listing = tmp_path / "modules.json"
    return run_entry("actors.surfaces.entry", listing, args, cwd or tmp_path, env or os.environ)


def _direct(
    tmp_path: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", *args],
        cwd=cwd or tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _forwarded(modules: list[str]) -> bool:
    return not [m for m in modules if m.startswith(HEAVY)]


def test_the_socket_runs_every_session_operation_but_shutdown() -> None:
    cli_names = {op.name.replace("_", "-") for op in ops.PARENT}
    assert cli_names - {"shutdown"} == PARENT_COMMANDS
    assert {op.name.replace("_", "-") for op in ops.CHILD} == CHILD_COMMANDS


def test_status_runs_in_the_supervisor_and_answers_as_the_command_line(
    serve: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    serve(session)
    info = json.loads((session / "session.json").read_text())
    assert info["command_socket"].startswith("@")
    done, modules = _entry(tmp_path, "status", "--json", "--session", str(session))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _forwarded(modules), [m for m in modules if m.startswith(HEAVY)]
    direct = _direct(tmp_path, "status", "--json", "--session", str(session))
    got, want = json.loads(done.stdout), json.loads(direct.stdout)
    got.pop("now"), want.pop("now")
    assert got == want
    # the human view too
    human, _ = _entry(tmp_path, "status", "--session", str(session))
    assert human.stdout == _direct(tmp_path, "status", "--session", str(session)).stdout


def test_the_only_live_session_is_named_on_stderr_as_the_command_line_does(
    serve: Any, tmp_path: Path
) -> None:
    serve(tmp_path / "session")
    done, modules = _entry(tmp_path, "status", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _forwarded(modules)
    assert "the only live one" in done.stderr
    assert done.stderr == _direct(tmp_path, "status", "--json").stderr


def test_paths_are_the_callers_and_errors_look_the_same(
    serve: Any, tmp_path: Path, scripts: dict[str, str]
) -> None:
    session = tmp_path / "session"
    server = serve(session)
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    script = Path(scripts["idle"])
    (work / "idle.json").write_text(script.read_text())
    done, modules = _entry(
        tmp_path,
        *("spawn", "worker", "--script", "idle.json", "--cwd", "sub", "--json"),
        *("--session", str(session)),
        cwd=work,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _forwarded(modules)
    # once its bridge is ready (spawn answers before the process is up): the agent runs in the
    # caller's sub/, not in the supervisor's directory
    assert server.wait_story("worker", "process idle")
    cwds = {os.readlink(f"/proc/{pid}/cwd") for pid in bridge_pids(session)}
    assert cwds == {str(work / "sub")}
    # status --json names the bridge's pid (it leads its process group)
    status, _ = _entry(tmp_path, "status", "--json", "--session", str(session))
    (agent,) = json.loads(status.stdout)["agents"]
    assert agent["pid"] in bridge_pids(session)
    assert os.getpgid(agent["pid"]) == agent["pid"]
    # refusals: a usage error, a bad value, an unknown id: the same output and status
    for args in (
        ("delegate", "--json"),
        ("delegate", "worker", "x", "--max-cost", "nan", "--json"),
        ("cancel", "shepherd-task-0123456789abcdef", "--json"),
        ("status", "--bogus"),
    ):
        via, _ = _entry(tmp_path, *args, "--session", str(session))
        direct = _direct(tmp_path, *args, "--session", str(session))
        assert (via.returncode, via.stdout, via.stderr) == (
            direct.returncode,
            direct.stdout,
            direct.stderr,
        ), args
        assert via.returncode == 2


def test_a_call_that_names_another_session_runs_in_the_caller(serve: Any, tmp_path: Path) -> None:
    session = tmp_path / "session"
    serve(session)
    other = tmp_path / "not-a-session"
    other.mkdir()
    env = {**os.environ, "SHEPHERD_SESSION": str(session)}
    # `--sess` is argparse's abbreviation of --session: the entry point does not see it and
    # asks this session's supervisor, which finds the call names another directory
    done, modules = _entry(tmp_path, "status", "--json", "--sess", str(other), env=env)
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["code"] == "session_unavailable"
    assert str(other) in json.loads(done.stdout)["error"]["message"]
    assert "actors.surfaces.cli" in modules  # run in the caller, against the named directory


@pytest.mark.parametrize("value", ["", "relative", "@", "@" + "x" * 101, 7, None])
def test_a_session_file_without_a_usable_socket_runs_the_call_in_the_caller(
    serve: Any, tmp_path: Path, value: object
) -> None:
    session = tmp_path / "session"
    serve(session)
    path = session / "session.json"
    info = json.loads(path.read_text())
    info["command_socket"] = value
    path.write_text(json.dumps(info))
    done, modules = _entry(tmp_path, "status", "--json", "--session", str(session))
    assert "actors.surfaces.cli" in modules
    if isinstance(value, int):  # not a session file at all: the command line says so
        assert done.returncode == 2
        assert "command_socket" in json.loads(done.stdout)["error"]["message"]
    else:
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_stopped_session_is_told_as_before(serve: Any, tmp_path: Path) -> None:
    session = tmp_path / "session"
    server = serve(session)
    server.stop()
    done, modules = _entry(tmp_path, "status", "--json", "--session", str(session))
    direct = _direct(tmp_path, "status", "--json", "--session", str(session))
    assert (done.returncode, done.stdout) == (direct.returncode, direct.stdout)
    assert json.loads(done.stdout)["error"]["code"] == "session_unavailable"
    assert "actors.surfaces.cli" in modules
