"""Found while testing hostile inputs: ``shutdown`` right after ``spawn`` left a bridge behind.

The agent's actor starts its bridge on its own thread; a shutdown that came before that start
closed the launcher first, and the bridge started afterwards was never killed (still running
when the test ended) or never reaped (a zombie). The launcher now refuses any start after it
closed, and stops everything it started before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.sinks import CollectingSink
from actors.supervisor import Supervisor
from tests.reliability.live import Story, session_pids, wait_gone

pytestmark = pytest.mark.processes


def _script(tmp_path: Path) -> str:
    script = tmp_path / "idle.json"
    script.write_text(json.dumps({"steps": [{"await": "task"}, {"await": "any"}]}))
    return str(script)


def test_an_agent_whose_start_comes_after_the_launcher_closed_starts_nothing(
    tmp_path: Path,
) -> None:
    """The race made deterministic: the launcher closes (as shutdown does first) before the
    agent's actor gets to start its bridge."""
    story = Story()
    sup = Supervisor(
        tmp_path / "session",
        sinks=[CollectingSink()],
        tap=story,
        mailbox_root=tmp_path / "mailbox",
    )
    try:
        sup.launcher.close()
        sup.call("spawn", {"name": "late", "script": _script(tmp_path)})
        story.wait("late: process exited")  # the refused start is reported
        assert session_pids(sup.session_id) == [], "a bridge started after the launcher closed"
        assert sup.launcher.children == {}
    finally:
        sup.shutdown()


def test_shutdown_right_after_spawn_leaves_no_bridge(tmp_path: Path) -> None:
    for attempt in range(3):
        sup = Supervisor(
            tmp_path / f"session{attempt}",
            sinks=[CollectingSink()],
            mailbox_root=tmp_path / f"mailbox{attempt}",
        )
        for n in range(3):
            sup.call("spawn", {"name": f"a{n}", "script": _script(tmp_path)})
        sup.shutdown()
        assert wait_gone(lambda sup=sup: session_pids(sup.session_id), timeout=20), (
            f"attempt {attempt}: bridges outlived the shutdown: {session_pids(sup.session_id)}"
        )
        for child in sup.launcher.children.values():
            assert not isinstance(child.proc, int) and child.proc.returncode is not None, (
                "a bridge was never reaped"
            )
