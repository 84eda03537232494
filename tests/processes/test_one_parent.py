"""One parent per session, from the command line: ``shepherd serve`` started several times at
once on the directory of a dead session runs exactly once; every other one exits 2 with
``session_busy`` naming the live parent, without a traceback, having written nothing. And a
session directory (or a node's) that cannot be made is a typed error naming the path and the
cause, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import START_S, Serve

pytestmark = pytest.mark.processes

#: serves started at once, round after round, on one session directory left by a killed parent
ROUNDS = (2, 4, 8, 3)


def _started(server: Serve) -> bool:
    """It said its session is up, or its output ended (it exited): which one is ``ran``."""
    return server.wait_for(lambda lines: any("session" in x for x in lines), START_S)


def _stderr(server: Serve) -> str:
    assert server.proc.stderr is not None
    return server.proc.stderr.read().decode(errors="replace")


def _race(session_dir: Path, count: int) -> tuple[Serve, list[Serve]]:
    """``count`` serves started together; (the one that runs, the ones that were refused)."""
    env = dict(os.environ)
    servers = [Serve(session_dir, env) for _ in range(count)]
    try:
        ran = [s for s in servers if _started(s)]
        assert len(ran) == 1, f"{len(ran)} of {count} serves run the session at once"
        (winner,) = ran
        refused = [s for s in servers if s is not winner]
        for server in refused:
            assert server.proc.wait(timeout=60) == 2
            (line,) = server.lines  # one JSON object: the error, nothing else
            assert line["error"]["code"] == "session_busy", line
            assert f"pid {winner.proc.pid}" in line["error"]["message"], line
            err = _stderr(server)
            assert "Traceback" not in err, err
            server.stop()
        info = json.loads((session_dir / "session.json").read_text())
        assert info["parent_pid"] == winner.proc.pid  # what the refused ones did not touch
        return winner, refused
    except BaseException:
        for server in servers:
            server.stop(signal.SIGKILL)
        raise


@pytest.mark.timeout(900)
def test_serves_started_at_once_on_a_dead_session_one_runs_the_others_are_busy(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "session"
    first = Serve(session_dir, dict(os.environ))
    assert _started(first) and first.proc.poll() is None, _stderr(first)
    session_id = json.loads((session_dir / "session.json").read_text())["session_id"]
    first.stop(signal.SIGKILL)  # a dead session: its session.json names a pid that is gone
    for count in ROUNDS:
        winner, _ = _race(session_dir, count)
        assert json.loads((session_dir / "session.json").read_text())["session_id"] == session_id
        if count != ROUNDS[-1]:
            winner.stop(signal.SIGKILL)  # dead again, for the next round
            continue
        # the last one is stopped cleanly: exit 0, no traceback, and the session is free again
        os.killpg(winner.proc.pid, signal.SIGTERM)
        assert winner.proc.wait(timeout=60) == 0
        err = _stderr(winner)
        winner.stop()
        assert "Traceback" not in err, err
    again = Serve(session_dir, dict(os.environ))
    try:
        assert _started(again) and again.proc.poll() is None
    finally:
        again.stop()
    assert again.proc.returncode == 0


def _shepherd(*args: str) -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        out: Any = json.loads(done.stdout)
    except ValueError:
        out = done.stdout
    return done.returncode, out, done.stderr


def _unmakeable(tmp_path: Path) -> list[tuple[Path, str]]:
    """Directories that cannot be made, and the cause the error must name."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    return [
        (a_file / "session", "Not a directory"),
        (Path("/proc") / f"shepherd-test-{os.getpid()}" / "session", "No such file"),
    ]


def test_a_session_directory_that_cannot_be_made_is_a_typed_error(tmp_path: Path) -> None:
    for path, cause in _unmakeable(tmp_path):
        rc, out, err = _shepherd("serve", "--session-dir", str(path))
        assert rc == 2, (out, err)
        assert out["error"]["code"] == "invalid_argument", out
        assert str(path) in out["error"]["message"] and cause in out["error"]["message"]
        assert "Traceback" not in err, err


def test_a_state_directory_that_cannot_be_made_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where serve keeps a new session, and the demo its pointer, by default: the state
    directory (``XDG_STATE_HOME``), here under a regular file."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    monkeypatch.setenv("XDG_STATE_HOME", str(a_file))
    for command in (["serve"], ["demo"]):
        rc, out, err = _shepherd(*command)
        assert rc == 2, (command, out, err)
        assert out["error"]["code"] == "invalid_argument", out
        assert str(a_file) in out["error"]["message"], out
        assert "Not a directory" in out["error"]["message"], out
        assert "Traceback" not in err, err


def test_a_node_directory_that_cannot_be_made_is_a_typed_error(tmp_path: Path) -> None:
    """``shepherd node --dir``: made before any server is reached (none is needed here)."""
    for path, cause in _unmakeable(tmp_path):
        rc, out, err = _shepherd(
            "node", "--name", "n1", "--transport", "nats://127.0.0.1:9", "--dir", str(path)
        )
        assert rc == 2, (out, err)
        assert out["error"]["code"] == "invalid_argument", out
        assert str(path) in out["error"]["message"] and cause in out["error"]["message"]
        assert "Traceback" not in err, err


def test_the_python_api_refuses_a_second_supervisor_and_an_unmakeable_directory(
    tmp_path: Path,
) -> None:
    """``Supervisor(...)``, the Python surface: the same typed errors as ``serve``."""
    from actors.session.supervisor import Supervisor
    from protocol.core.errors import InvalidArgument, SessionBusy

    first = Supervisor(tmp_path / "session", mailbox_root=tmp_path / "mailbox")
    try:
        with pytest.raises(SessionBusy, match=f"supervisor pid {os.getpid()}"):
            Supervisor(tmp_path / "session", mailbox_root=tmp_path / "mailbox")
    finally:
        first.shutdown()
    again = Supervisor(tmp_path / "session", mailbox_root=tmp_path / "mailbox")
    again.shutdown()  # a clean shutdown gave the session up
    for path, cause in _unmakeable(tmp_path):
        with pytest.raises(InvalidArgument, match=cause):
            Supervisor(path, mailbox_root=tmp_path / "mailbox")
        # any OS error while it starts, not only its directory's: here, its mailbox's
        with pytest.raises(InvalidArgument, match=cause) as refused:
            Supervisor(tmp_path / "elsewhere", mailbox_root=path)
        assert refused.value.message.startswith(str(path.parent))  # the path that failed


def test_a_directory_that_is_not_a_session_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """``serve --session-dir`` on a directory full of someone else's files (``/etc`` given
    by mistake, as root) never makes it private: it is refused, its mode unchanged."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    theirs.chmod(0o755)
    (theirs / "notes.txt").write_text("not a session\n")
    rc, out, err = _shepherd("serve", "--session-dir", str(theirs))
    assert rc == 2, (out, err)
    assert out["error"]["code"] == "invalid_argument", out
    assert str(theirs) in out["error"]["message"], out
    assert (theirs.stat().st_mode & 0o777) == 0o755
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    assert "Traceback" not in err, err
