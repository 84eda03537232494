"""Issue 6 end to end: a real scripted child loops; the parent gets one alert per cooldown
window, with evidence, while the task keeps running and nothing is killed or steered. And a
real command agent's printed lines are its process's output, not messages of a stuck agent."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import cast

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.records.notifications import WatchdogAlert
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.watchdog import WatchdogConfig

pytestmark = pytest.mark.processes


def test_a_looping_child_gets_one_alert_per_cooldown_window(tmp_path: Path) -> None:
    cooldown = 1.5
    sink = CollectingSink()
    sup = Supervisor(
        tmp_path / "session",
        settings=Settings(watchdog=WatchdogConfig(cooldown_s=cooldown)),
        sinks=[sink],
        mailbox_root=tmp_path / "mailbox",
    )
    try:
        script = tmp_path / "loop.json"
        loop = [{"run": "printf 'src/a.py:1: TODO fix\\n'"}, {"sleep": 0.15}]
        script.write_text(
            json.dumps(
                {
                    "steps": [
                        {"await": "task"},
                        {"repeat": {"times": 30, "steps": loop}},
                        {"await": "any"},
                    ]
                }
            )
        )
        s = sup.session
        s.spawn("looper", script=str(script), cwd=str(tmp_path))
        task = s.delegate("looper", "find the TODOs")

        def alerts(items: list) -> list[WatchdogAlert]:  # type: ignore[type-arg]
            return [n for n in items if isinstance(n, WatchdogAlert)]

        assert sink.wait_for(lambda items: len(alerts(items)) >= 2, timeout=60)
        got = alerts(sink.items)
        first = got[0]
        assert first.agent_name == "looper" and first.task_id == task.task_id
        assert "repeated_command" in first.reasons
        assert any(
            "printf" in cmd
            for e in first.evidence
            for cmd in cast(list[str], e.get("commands", []))
        )
        times = [a.created_at for a in got]
        assert all(b - a >= cooldown for a, b in itertools.pairwise(times)), times
        row = s.status("looper").agents[0]
        assert row.task is not None and row.task.state is TaskState.RUNNING  # not touched
        assert row.process_state != "exited"  # not killed
        inspected = s.watchdog("inspect", agent="looper")
        assert inspected["verdict"]["likely_stuck"] is True
        assert all("output" not in e for e in inspected["events"])  # hashes and previews only
    finally:
        sup.shutdown()


#: a command agent whose work prints the same error line three times within a second (a
#: program retrying a connection), each line apart from the next so that each is its own
#: output event, then exits without calling done
RETRYING = "for attempt in 1 2 3; do echo 'error: connection refused'; sleep 0.3; done; : {message}"


def test_a_command_agents_repeated_output_lines_are_not_a_stuck_agent(tmp_path: Path) -> None:
    sink = CollectingSink()
    sup = Supervisor(tmp_path / "session", sinks=[sink], mailbox_root=tmp_path / "mailbox")
    try:
        s = sup.session
        s.spawn("fetcher", adapter="command", cmd=RETRYING)
        task = s.delegate("fetcher", "fetch the report")

        def turn_ended(items: list) -> bool:  # type: ignore[type-arg]
            return any(getattr(n, "code", None) == "turn_ended_without_done" for n in items)

        assert sink.wait_for(turn_ended, timeout=60), sink.items
        inspected = s.watchdog("inspect", agent="fetcher")
        printed = [e for e in inspected["events"] if "connection refused" in e["preview"]]
        assert len(printed) >= 2, inspected["events"]  # separate events, as they were printed
        assert inspected["verdict"]["reasons"] == [] and not inspected["verdict"]["likely_stuck"]
        assert not [n for n in sink.items if isinstance(n, WatchdogAlert)]
        assert {e["kind"] for e in printed} == {"output"}  # the process's output, not messages
        row = s.status("fetcher").agents[0]
        assert row.task is not None and row.task.task_id == task.task_id
    finally:
        sup.shutdown()
