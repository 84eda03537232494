"""A watchdog agent on the acp adapter (a real supervisor, the scripted ACP agent): spawned with
``--role watchdog`` its ``shepherd`` MCP server has the watchdog tools, which read another
agent's events and alert the parent; a worker's server has none of them."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.records.notifications import WatchdogAlert
from tests.acp.test_acp_bridge import lines
from tests.acp.test_acp_session import AGENT, settled
from tests.pi.test_pi_live import Team

pytestmark = [pytest.mark.timeout(180)]

RUN = "printf 'src/a.py:1: TODO\\n'"


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    """The acp tests' team: a real supervisor (no Pi: only the supervisor is used)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    built = Team(tmp_path, Path(sys.executable))
    try:
        yield built
    finally:
        built.close()


def _spawn(team: Team, name: str, turns: list[list[dict[str, Any]]], role: str) -> Path:
    script = team.tmp_path / f"{name}.json"
    script.write_text(json.dumps(turns))
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))} {shlex.quote(str(script))}"
    team.session.spawn(name, adapter="acp", acp_cmd=cmd, cwd=str(team.workdir), role=role)
    return script


def _mcp_answers(script: Path) -> list[str]:
    return [line["mcp"] for line in lines(Path(f"{script}.log")) if "mcp" in line]


def test_an_acp_watchdog_reads_events_and_alerts_and_a_worker_cannot(team: Team) -> None:
    s = team.session
    loop = team.tmp_path / "loop.json"
    steps = [{"await": "task"}, {"repeat": {"times": 3, "steps": [{"run": RUN}]}}]
    loop.write_text(json.dumps({"steps": [*steps, {"await": "any"}]}))
    s.spawn("looper", script=str(loop), cwd=str(team.workdir))
    s.delegate("looper", "find the TODOs")
    assert team.sink.wait_for(lambda items: any(isinstance(n, WatchdogAlert) for n in items), 60), (
        team.sink.items
    )

    done = {"status": "completed", "summary": "checked"}
    asks = [
        {"mcp": "watchdog_read_events", "arguments": {"agent": "looper", "limit": 2}},
        {"mcp": "watchdog_alert_main", "arguments": {"agent": "looper", "text": "looper loops"}},
        {"mcp": "shepherd_done", "arguments": done},
    ]
    wd = _spawn(team, "wd", [asks], "watchdog")
    worker = _spawn(team, "worker", [asks], "worker")
    tasks = [s.delegate(name, "Check the others.").task_id for name in ("wd", "worker")]
    s.watch(list(tasks))
    assert [settled(team, t).status for t in tasks] == ["completed", "completed"]

    events, alerted = (json.loads(answer) for answer in _mcp_answers(wd)[:2])
    assert [e["command"] for e in events["events"]] == [RUN, RUN]
    assert alerted["alerted"] is True
    (alert,) = [n for n in team.sink.items if isinstance(n, WatchdogAlert) and n.reported_by]
    assert alert.reported_by == s.status("wd").agents[0].agent_id
    assert "looper loops" in alert.text
    # a worker's server has no such tools: the SDK answers that the tool is unknown
    refused = _mcp_answers(worker)[:2]
    assert all("watchdog_" in answer and "Unknown tool" in answer for answer in refused), refused
