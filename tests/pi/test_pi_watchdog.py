"""A watchdog agent that is a REAL Pi child (``spawn --role watchdog``) against the scripted
model: the model calls the watchdog tools the extension gives it (status, another agent's
events, an alert), and the parent receives the alert as a ``watchdog_alert`` naming the
watchdog agent; a worker Pi agent is never given those tools."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.child.scripted_model import ScriptedModel, Step, Text, ToolCall
from protocol.records.notifications import WatchdogAlert
from tests.pi.test_pi_approvals import SLOW_S, _settled, _tool_results
from tests.pi.test_pi_live import Team

pytestmark = [pytest.mark.pi, pytest.mark.timeout(300)]

WATCHDOG_TOOLS = {
    "watchdog_status",
    "watchdog_read_events",
    "watchdog_detect_stuck",
    "watchdog_alert_main",
}
LOOP = "printf 'src/a.py:1: TODO fix\\n'"
ALERT = "looper ran the same printf three times with the same output; ask it to change approach"


def _spawn_pi(team: Team, name: str, *steps: Step, role: str = "worker") -> ScriptedModel:
    return team.spawn_pi(name, *steps, role=role)


def _looping(team: Team) -> str:
    """A scripted agent that runs one command three times (the detector's repeated_command),
    then waits; its task's id once the watchdog's own alert about it has arrived."""
    script = team.tmp_path / "loop.json"
    steps = [{"await": "task"}, {"repeat": {"times": 3, "steps": [{"run": LOOP}]}}]
    script.write_text(json.dumps({"steps": [*steps, {"await": "any"}]}))
    team.session.spawn("looper", script=str(script), cwd=str(team.workdir))
    task = team.session.delegate("looper", "find the TODOs")

    def rule_alert(items: list[Any]) -> bool:
        return any(isinstance(n, WatchdogAlert) and n.reported_by is None for n in items)

    assert team.sink.wait_for(rule_alert, SLOW_S), team.sink.items
    return task.task_id


def _tools(request: dict[str, Any]) -> dict[str, Any]:
    return {t["function"]["name"]: t["function"] for t in request.get("tools", [])}


def test_a_pi_watchdog_reads_another_agents_events_and_alerts_the_parent(team: Team) -> None:
    looper_task = _looping(team)
    model = _spawn_pi(
        team,
        "wd",
        ToolCall("watchdog_status", {}),
        ToolCall("watchdog_read_events", {"agent": "looper", "limit": 4}),
        ToolCall("watchdog_alert_main", {"agent": "looper", "text": ALERT}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "alerted about looper"}),
        role="watchdog",
    )
    s = team.session
    task = s.delegate("wd", "Watch the other agents; alert the parent about any stuck one.")
    s.watch(task.task_id)
    assert _settled(team, task.task_id).status == "completed"

    requests = model.wait_for_requests(4, SLOW_S)
    tools = _tools(requests[0])
    assert set(tools) >= WATCHDOG_TOOLS
    assert set(tools["watchdog_read_events"]["parameters"]["properties"]) == {"agent", "limit"}
    # what the model was told: the targets, then the looper's events (normalised commands,
    # hashes and previews), then the parent's acceptance of its alert
    status = json.loads(_tool_results(requests[1])[-1])
    assert {t["name"] for t in status["targets"]} == {"looper", "wd"}
    assert next(t for t in status["targets"] if t["name"] == "wd")["kind"] == "watchdog"
    events = json.loads(_tool_results(requests[2])[-1])
    assert events["name"] == "looper" and 1 <= len(events["events"]) <= 4
    assert all(e["command"] == LOOP for e in events["events"])
    assert all("output" not in e for e in events["events"])
    alerted = json.loads(_tool_results(requests[3])[-1])
    assert alerted["alerted"] is True

    wd_id = s.status("wd").agents[0].agent_id
    (alert,) = [n for n in team.sink.items if isinstance(n, WatchdogAlert) and n.reported_by]
    assert alert.reported_by == wd_id
    assert alert.agent_name == "looper" and alert.task_id == looper_task
    assert ALERT in alert.text and "from the watchdog agent wd" in alert.text
    assert "repeated_command" in alert.reasons  # the detector's verdict comes with it
    looper = s.status("looper").agents[0]
    assert looper.task is not None and looper.task.state.value == "running"  # nothing touched


def test_a_worker_pi_agent_gets_no_watchdog_tools(team: Team) -> None:
    model = _spawn_pi(team, "worker", Text("nothing to do"))
    s = team.session
    s.delegate("worker", "Say hello.")
    (first,) = model.wait_for_requests(1, SLOW_S)[:1]
    names = set(_tools(first))
    assert "shepherd_done" in names
    assert not names & WATCHDOG_TOOLS
    assert s.status("worker").agents[0].role == "worker"
