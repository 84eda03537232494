"""Issue 16, item 4: many agents on a stock kernel, every delivery woken by an event.

200 real bridges in one session, more than the user's default inotify budget (128 instances):
the design where each process took an instance would leave ~70 of them polling. Here every
inbox must be woken by its doorbell (or inotify), never by polling: ``status`` says so for each
agent, no bridge holds an inotify instance, and a delegate -> done -> completion round trip to
every agent completes although the fallback poll is set to an hour. So each round trip was
woken by an event; nothing here reads a clock to decide (the waits are ceilings only).

The agents start and settle one after the other on a loaded machine; the test's ceiling is
generous (start-up is about 100-250 ms of CPU per bridge, 2 cores).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from actors.session.supervisor import Supervisor
from actors.transports.mailbox.inotify import inotify_available
from protocol.records.settings import Settings
from tests.reliability.live import Story

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not inotify_available(), reason="the inotify budget exists on Linux only"),
]

AGENTS = 200
#: a polled inbox would wait this long: a round trip that completes was woken by an event
FALLBACK_POLL_S = 3600.0
#: ceilings, never measurements
START_CEILING_S = 600.0
ROUND_TRIP_CEILING_S = 120.0
LOOP = {
    "steps": [
        {
            "repeat": {
                "times": 100,
                "steps": [{"await": "task"}, {"done": {"status": "completed", "summary": "ok"}}],
            }
        }
    ]
}


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    monkeypatch.delenv("SHEPHERD_WAKER", raising=False)


def _inotify_fds(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
    return count


@pytest.mark.timeout(1200)
def test_two_hundred_agents_are_each_woken_by_an_event_never_by_polling(tmp_path: Path) -> None:
    script = tmp_path / "loop.json"
    script.write_text(json.dumps(LOOP))
    story = Story(timeout=START_CEILING_S)
    sup = Supervisor(
        tmp_path / "session",
        mailbox_root=tmp_path / "mailbox",
        tap=story,
        settings=Settings(fallback_poll_s=FALLBACK_POLL_S),
    )
    try:
        names = [f"a{i:03d}" for i in range(AGENTS)]
        for name in names:
            sup.session.spawn(name, script=str(script), cwd=str(tmp_path))
        for name in names:
            story.wait(f"{name}: process idle")
        status = sup.session.status()
        assert status.mailbox_wake in ("inotify", "bell")
        modes = {agent.name: agent.mailbox_wake for agent in status.agents}
        assert sorted(modes) == names
        polled = {name: mode for name, mode in modes.items() if mode not in ("bell", "inotify")}
        assert polled == {}, f"{len(polled)} agents not woken by an event: {polled}"
        pids = [child.pid for child in sup.launcher.children.values()]
        assert len(pids) == AGENTS
        # no bridge holds an inotify instance: the session needs at most the parent's one
        assert sum(_inotify_fds(pid) for pid in pids) == 0
        for name in names:
            task = sup.session.delegate(name, "go")
            done = sup.session.wait([task.task_id], timeout_s=ROUND_TRIP_CEILING_S)
            assert [r.status for r in done.completed] == ["completed"], (name, done)
        # and again from the last to the first: no agent's bell went quiet after its first use
        for name in reversed(names):
            task = sup.session.delegate(name, "again")
            done = sup.session.wait([task.task_id], timeout_s=ROUND_TRIP_CEILING_S)
            assert [r.status for r in done.completed] == ["completed"], (name, done)
        still = {a.name: a.mailbox_wake for a in sup.session.status().agents}
        assert still == modes
    finally:
        sup.shutdown()
