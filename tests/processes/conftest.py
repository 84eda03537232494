"""Real processes: a real `shepherd serve`, real `shepherd-child` bridges, a real mailbox.

Every test isolates its state directory (``XDG_STATE_HOME``) so nothing touches the user's
home, and kills whatever it started. Nothing sleeps: tests wait on output lines, files and
notifications with timeouts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from tests.reliability.live import PLANNER, session_pids, write_script

SCOUT = {
    "steps": [
        {"await": "task"},
        {"say": "scout: looking around"},
        {"message": {"to": "planner", "text": "which module first?", "expects_reply": True}},
        {"await": "reply"},
        {"done": {"status": "completed", "summary": "explored {last}"}},
        {"await": "any"},
    ]
}
IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    """Every test here keeps its state out of the user's home (tests/conftest.py)."""
    return isolated_state


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    return {
        name: write_script(tmp_path, name, script)
        for name, script in (("scout", SCOUT), ("planner", PLANNER), ("idle", IDLE))
    }


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[tuple[Supervisor, CollectingSink]]:
    sink = CollectingSink()
    sup = Supervisor(tmp_path / "session", sinks=[sink], mailbox_root=tmp_path / "mailbox")
    try:
        yield sup, sink
    finally:
        sup.shutdown()


#: If pytest itself dies (a timeout ends it without teardown), `serve` must not outlive it:
#: util-linux's setpriv sets the parent-death signal, which survives the exec into Python.
DIE_WITH_PYTEST = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


def stop_group(proc: subprocess.Popen[Any], what: str, sig: int = signal.SIGTERM) -> int:
    """Signal a process started in a group of its own and wait for it (at most 30 s, then its
    group is killed and the test fails naming ``what``); its pipes are closed."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        raise AssertionError(f"{what} did not stop within 30 s of its signal") from None
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return code


class Serve:
    """A `shepherd serve` process; its stdout lines are collected as they arrive."""

    def __init__(self, session_dir: Path, env: dict[str, str], *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *DIE_WITH_PYTEST,
                sys.executable,
                "-m",
                "actors.surfaces.cli",
                "serve",
                "--session-dir",
                str(session_dir),
                "--json",
                "--verbose",  # lifecycle lines too: tests wait on them instead of polling
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.lines: list[dict[str, Any]] = []
        #: its output ended (it exited, or closed stdout): nothing more will come
        self.ended = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        # ``stop`` closes the pipe if its output has not ended by then (something the
        # process started still holds it): the end of what can come, as an exit is
        with contextlib.suppress(ValueError, OSError):
            for raw in self.proc.stdout:
                try:
                    item = json.loads(raw)
                except ValueError:
                    continue
                with self._cond:
                    self.lines.append(item)
                    self._cond.notify_all()
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float = 90.0) -> bool:
        """Until ``predicate(lines)`` holds, or nothing more can come (its output ended), or
        ``timeout``; whether it holds."""
        with self._cond:
            self._cond.wait_for(lambda: self.ended or predicate(self.lines), timeout=timeout)
            return bool(predicate(self.lines))

    def wait_story(self, *words: str, timeout: float = 60.0) -> bool:
        """Wait for a lifecycle line containing every word (e.g. "scout", "waiting")."""
        return self.wait_for(
            lambda lines: any(
                all(w in x.get("story", "") for w in words) for x in lines if "story" in x
            ),
            timeout=timeout,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._reader.join(timeout=5)  # its output ends with the process, as a rule
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self._reader.join(timeout=5)


#: how long a test waits for `serve` to say its session is up (it ends sooner if serve exits)
START_S = 300.0


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Serve] = []

    def start(session_dir: Path | None = None, *extra: str) -> Serve:
        server = Serve(session_dir or tmp_path / "session", dict(os.environ), *extra)
        started.append(server)
        # a ceiling, not a pace: over a cluster of three on a busy machine, making the
        # session's streams may wait out the servers' own elections
        assert server.wait_for(lambda lines: any("session" in x for x in lines), START_S), (
            "serve did not start"
        )
        return server

    yield start
    for server in started:
        server.stop()


#: the transports a reliability scenario runs over: the file mailbox, and a real cluster of
#: three ``nats-server``s (R3)
TRANSPORTS = ("file", "nats-cluster")


def _transport_args(kind: str, root: Path, *records: str) -> Iterator[tuple[str, ...]]:
    if kind == "file":
        yield ()
        return
    from actors.transports.nats.server import start_cluster

    servers = start_cluster(root)
    try:
        yield ("--transport", ",".join(s.url for s in servers), *records)
    finally:
        for server in servers:
            server.kill()


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, ...]]:
    """``serve``'s options for the transport under test (none for the file mailbox; on NATS
    the records are kept there too, ``--journal nats``); a cluster is started for the test and
    killed after it."""
    yield from _transport_args(request.param, tmp_path / "nats-cluster", "--journal", "nats")


@pytest.fixture(params=TRANSPORTS)
def envelope_transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, ...]]:
    """As :func:`transport`, with the records in the session directory on both (a test that
    reads the journal file)."""
    yield from _transport_args(request.param, tmp_path / "nats-cluster")


def cli(*args: str, session: Path | None = None, check: bool = True) -> tuple[int, Any]:
    """Run `shepherd ARGS --json` (its entry point, as the installed command: a session
    operation goes to the supervisor's command socket); return (exit status, parsed JSON)."""
    argv = [sys.executable, "-m", "actors.surfaces.entry", *args, "--json"]
    if session is not None:
        argv += ["--session", str(session)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    try:
        data = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        data = done.stdout
    if check and done.returncode != 0:
        raise AssertionError(
            f"shepherd {args} exited {done.returncode}: {done.stdout}{done.stderr}"
        )
    return done.returncode, data


def bridge_pids(session_dir: Path) -> list[int]:
    """Pids of live processes whose environment names this session (bridges and their tools)."""
    return session_pids(json.loads((session_dir / "session.json").read_text())["session_id"])
