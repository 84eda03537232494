"""Following notifications needs no inotify instance: with the user's instances used up (every
watch fails with EMFILE, "Too many open files", as inotify_init does then), ``shepherd
notifications --follow`` and ``shepherd mcp``'s ``shepherd_notifications`` wait still work.

The exhaustion is injected into the real processes at the library boundary (a
``sitecustomize`` on their ``PYTHONPATH``): exhausting the real, user-wide limit would break
every other process of the user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import cli
from tests.reliability.live import write_script
from tests.tools.mcp_stdio import McpProcess

pytestmark = pytest.mark.processes

EXHAUSTED = """
import errno

import watchfiles
import watchfiles._rust_notify


def _exhausted(*args, **kwargs):
    raise OSError(errno.EMFILE, "Too many open files")


watchfiles.watch = watchfiles.awatch = watchfiles._rust_notify.RustNotify = _exhausted
"""

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


def _exhausted_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "no-inotify"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(EXHAUSTED)
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{path}" if path else str(site)}


def test_following_needs_no_inotify_instance(serve: Any, tmp_path: Path) -> None:
    server = serve()
    session = tmp_path / "session"
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors.surfaces.cli",
            "notifications",
            "--follow",
            "--session",
            str(session),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_exhausted_env(tmp_path),
    )
    try:
        cli("spawn", "quick", "--script", write_script(tmp_path, "idle", IDLE), session=session)
        _, task = cli("delegate", "quick", "x", session=session)
        cli("watch", task["task_id"], session=session)
        cli("cancel", task["task_id"], session=session)
        assert follower.stdout is not None and follower.stderr is not None
        seen = []
        for line in follower.stdout:  # as they arrive: a turn's notice, then the completion
            seen.append(line)
            if '"task_completion"' in line:
                break
        assert task["task_id"] in seen[-1] and '"task_completion"' in seen[-1], seen
        cli("shutdown", session=session)
        server.proc.wait(timeout=30)
        assert follower.wait(timeout=30) == 0  # the session ended: following ends too
    finally:
        if follower.poll() is None:
            follower.kill()
        follower.wait(timeout=10)
        for stream in (follower.stdout, follower.stderr):
            if stream is not None:
                stream.close()


def test_the_mcp_wait_needs_no_inotify_instance(serve: Any, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    server = McpProcess(tmp_path, "--session", str(session), env=_exhausted_env(tmp_path))
    try:
        answer = server.call("shepherd_notifications", {"wait_seconds": 0.5})
        assert answer.get("notifications") == [], (answer, server.stderr())
        assert answer["more"] is False
    finally:
        server.close()
