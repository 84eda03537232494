"""A real `shepherd serve`, a real `shepherd a2a` in front of it, scripted agents, and the
a2a-sdk's own client.

Nothing sleeps: the tests wait on the front door's printed line, on streams and on the
session's answers, each with a timeout. Every process started here is stopped after the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes.conftest import DIE_WITH_PYTEST, START_S, Serve, cli, stop_group
from tests.reliability.live import write_script

#: each test does a handful of calls; a ceiling, not a pace
CALL_S = 30.0

SCRIPTS: dict[str, dict[str, Any]] = {
    "worker": {
        "steps": [
            {"await": "task"},
            {"say": "working on it"},
            {"done": {"status": "completed", "summary": "did: {last}"}},
            {"await": "task"},
            {"done": {"status": "completed", "summary": "again: {last}"}},
            {"await": "any"},
        ]
    },
    "refuser": {
        "steps": [
            {"await": "task"},
            {"done": {"status": "blocked", "summary": "cannot: no access to {last}"}},
            {"await": "any"},
        ]
    },
    "asker": {
        "steps": [
            {"await": "task"},
            {"message": {"to": "shepherd", "text": "which branch?", "expects_reply": True}},
            {"await": "reply"},
            {"done": {"status": "completed", "summary": "went with {last}"}},
            {"await": "any"},
        ]
    },
    "idle": {"steps": [{"await": "task"}, {"await": "any"}]},
    # takes a task, then reads follow-ups without end
    "listener": {
        "steps": [{"await": "task"}, {"repeat": {"times": 10000, "steps": [{"await": "message"}]}}]
    },
    # asks a peer that never answers: its task waits on the peer only
    "consulter": {
        "steps": [
            {"await": "task"},
            {"message": {"to": "idle", "text": "any idea?", "expects_reply": True}},
            {"await": "reply"},
            {"done": {"status": "completed", "summary": "consulted"}},
        ]
    },
}


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


class FrontDoor:
    """A `shepherd a2a` process: its URL and token from the one line it prints."""

    def __init__(self, session_dir: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *DIE_WITH_PYTEST,
                sys.executable,
                "-m",
                "actors.surfaces.cli",
                "a2a",
                "--session",
                str(session_dir),
                "--listen",
                "127.0.0.1:0",
                "--json",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # its first line, or EOF if it failed
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"shepherd a2a did not start: {err}")
        header = json.loads(line)["a2a"]
        self.url: str = header["url"]
        self.token: str = header["token"]
        self.token_file = Path(header["token_file"])

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self, sig: int = signal.SIGTERM) -> int:
        return stop_group(self.proc, "shepherd a2a", sig)


class Team:
    """A session with the scripted agents of :data:`SCRIPTS`, and its front door."""

    def __init__(self, serve: Serve, session_dir: Path, door: FrontDoor) -> None:
        self.serve, self.session_dir, self.door = serve, session_dir, door

    def cli(self, *args: str, check: bool = True) -> tuple[int, Any]:
        return cli(*args, session=self.session_dir, check=check)

    def run(self, body: Any) -> Any:
        """Run ``body(http)`` (a coroutine function) with an authorised httpx client."""

        async def main() -> Any:
            async with httpx.AsyncClient(headers=self.door.headers(), timeout=CALL_S) as http:
                # under the test's own timeout: a wait that never ends fails here, and the
                # fixtures still stop every process
                return await asyncio.wait_for(body(http), CALL_S * 1.5)

        return asyncio.run(main())


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    session_dir = tmp_path / "session"
    serve = Serve(session_dir, dict(os.environ))
    door: FrontDoor | None = None
    try:
        assert serve.wait_for(lambda lines: any("session" in x for x in lines), START_S)
        for name, script in SCRIPTS.items():
            path = write_script(tmp_path, name, script)
            cli("spawn", name, "--script", path, session=session_dir)
        door = FrontDoor(session_dir)
        yield Team(serve, session_dir, door)
    finally:
        try:
            if door is not None:
                door.stop()
        finally:
            serve.stop()
