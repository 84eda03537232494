"""A real `shepherd serve` with scripted agents, and a real `shepherd web` in front of it.

Nothing sleeps: the tests wait on the printed line, on the event stream and on the session's
answers, each with a timeout. Every process started here is stopped after the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver

from tests.processes.conftest import DIE_WITH_PYTEST, START_S, Serve, cli, stop_group
from tests.reliability.live import write_script

SCRIPTS: dict[str, dict[str, Any]] = {
    "worker": {
        "steps": [
            {"await": "task"},
            {"done": {"status": "completed", "summary": "did: {last}"}},
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
}


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


class Web:
    """A `shepherd web` process: its URL and token from the one line it prints."""

    def __init__(self, session_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [
                *DIE_WITH_PYTEST,
                sys.executable,
                "-m",
                "actors.surfaces.cli",
                "web",
                "--session",
                str(session_dir),
                "--listen",
                "127.0.0.1:0",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"shepherd web did not start: {err}")
        header = json.loads(line)["web"]
        self.url: str = header["url"]
        self.token: str = header["token"]

    def headers(self) -> dict[str, str]:
        return {"X-Shepherd-Token": self.token}

    def stop(self) -> int:
        return stop_group(self.proc, "shepherd web")


class Team:
    def __init__(self, serve: Serve, session_dir: Path, web: Web) -> None:
        self.serve, self.session_dir, self.web = serve, session_dir, web

    def cli(self, *args: str, check: bool = True) -> tuple[int, Any]:
        return cli(*args, session=self.session_dir, check=check)

    def spawn(self, name: str, script: dict[str, Any]) -> None:
        """One more scripted agent."""
        self.cli("spawn", name, "--script", write_script(self.session_dir.parent, name, script))


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    yield from _team(tmp_path)


@pytest.fixture
def capped_team(tmp_path: Path) -> Iterator[Team]:
    """The same team, its session handing one task at a time to its agents (the rest queue)."""
    yield from _team(tmp_path, "--max-running", "1")


def _team(tmp_path: Path, *serve_args: str) -> Iterator[Team]:
    session_dir = tmp_path / "session"
    serve = Serve(session_dir, dict(os.environ), *serve_args)
    web: Web | None = None
    try:
        assert serve.wait_for(lambda lines: any("session" in x for x in lines), START_S)
        for name, script in SCRIPTS.items():
            path = write_script(tmp_path, name, script)
            cli("spawn", name, "--script", path, session=session_dir)
        web = Web(session_dir)
        yield Team(serve, session_dir, web)
    finally:
        try:
            if web is not None:
                web.stop()
        finally:
            serve.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by its own driver (never one from the network)."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.fail("chromium and chromedriver are missing: run scripts/install_browser.sh")
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    options.binary_location = chromium
    service = webdriver.ChromeService(executable_path=chromedriver)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
