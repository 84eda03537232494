"""The watchdog actor in a session: detection from real runtime events, alerts, gating."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from protocol.core.errors import InvalidHandle
from protocol.records.notifications import WatchdogAlert
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.watchdog import WatchdogConfig
from tests.sim.scenarios import broker, new_session


def _looper(times: int, gap_s: float = 1.0) -> dict[str, Any]:
    return {
        "steps": [
            {"await": "task"},
            {"repeat": {"times": times, "steps": [{"run": "rg -n TODO src"}, {"sleep": gap_s}]}},
            {"await": "any"},
        ]
    }


def _alerts(sink) -> list[WatchdogAlert]:  # type: ignore[no-untyped-def]
    return [n for n in sink.items if isinstance(n, WatchdogAlert)]


def test_three_identical_rg_runs_raise_one_alert_and_the_task_keeps_running() -> None:
    s, sink = new_session(1)
    s.spawn("scout", script=_looper(3))
    task = s.delegate("scout", "find the TODOs")
    s.sim.run_all(max_time=100)
    (alert,) = _alerts(sink)
    assert alert.agent_name == "scout" and alert.task_id == task.task_id
    assert "repeated_command" in alert.reasons
    assert alert.confidence in ("medium", "high")
    assert "[Watchdog Alert]" in alert.text and "rg -n TODO src" in alert.text
    assert broker(s).tasks[task.task_id].state is TaskState.RUNNING  # never touched


def test_a_long_loop_alerts_once_per_cooldown_window() -> None:
    s, sink = new_session(2)
    s.spawn("scout", script=_looper(60, gap_s=5.0))  # 300 s of the same command
    s.delegate("scout", "loop")
    s.sim.run_all(max_time=400)
    times = [a.created_at for a in _alerts(sink)]
    assert 4 <= len(times) <= 6, times
    assert all(b - a >= 60 for a, b in itertools.pairwise(times))


def test_pause_resume_and_disabled() -> None:
    s, sink = new_session(3)
    s.spawn("scout", script=_looper(3))
    s.watchdog("pause")
    s.delegate("scout", "loop")
    s.sim.run_all(max_time=100)
    assert _alerts(sink) == []
    assert s.watchdog("status")["paused"] is True
    s.watchdog("resume")
    assert s.watchdog("detect", agent="scout")["likely_stuck"] is True
    off, off_sink = new_session(4, settings=Settings(watchdog=WatchdogConfig(enabled=False)))
    off.spawn("scout", script=_looper(5))
    off.delegate("scout", "loop")
    off.sim.run_all(max_time=100)
    assert _alerts(off_sink) == []


def test_a_new_instruction_resets_the_evidence_window() -> None:
    s, sink = new_session(5)
    script = {
        "steps": [
            {"await": "task"},
            {"run": "rg x"},
            {"run": "rg x"},
            {"await": "message"},
            {"run": "rg x"},
            {"await": "any"},
        ]
    }
    s.spawn("scout", script=script)
    s.delegate("scout", "go")
    s.sim.run_all(max_time=10)
    s.message("scout", "try something else")
    s.sim.run_all(max_time=10)
    assert _alerts(sink) == []  # 2 before + 1 after the instruction: never 3 in one window
    inspected = s.watchdog("inspect", agent="scout")
    assert inspected["verdict"]["likely_stuck"] is False
    assert len(inspected["events"]) >= 6


def test_operations_steer_is_dry_run_by_default_and_unknown_agents_are_refused() -> None:
    s, _ = new_session(6)
    s.spawn("scout", script=_looper(1))
    s.sim.run_all(max_time=1)
    dry = s.watchdog("steer", agent="scout")
    assert dry["dry_run"] and not dry["sent"] and dry["message"]
    before = len(s.sim_launcher.driver("scout").received)
    s.sim.run_all(max_time=1)
    assert len(s.sim_launcher.driver("scout").received) == before  # nothing was sent
    sent = s.watchdog("steer", agent="scout", message="stop and summarise", dry_run=False)
    assert sent["sent"]
    s.sim.run_all(max_time=1)
    got = [getattr(e, "content", "") for e in s.sim_launcher.driver("scout").received]
    assert "stop and summarise" in got
    assert s.watchdog("set", key="cooldown_s", value="5")["cooldown_s"] == 5.0
    with pytest.raises(InvalidHandle):
        s.watchdog("inspect", agent="nobody")
    targets = s.watchdog("list_targets")
    assert [t["name"] for t in targets] == ["scout"] and targets[0]["kind"] == "task"


def test_the_watchdogs_own_nudge_is_not_a_new_instruction() -> None:
    """With ``alert_mode = both`` the agent is nudged with the rescue message at the
    threshold; the nudge does not reset its counts, so going on with the loop is stuck beyond
    the threshold. A parent's message is an instruction and does reset them."""
    script = {
        "steps": [
            {"await": "task"},
            {"repeat": {"times": 3, "steps": [{"run": "rg -n TODO src"}, {"sleep": 1.0}]}},
            {"await": "message"},
            {"run": "rg -n TODO src"},
            {"await": "any"},
        ]
    }
    s, sink = new_session(7, settings=Settings(watchdog=WatchdogConfig(alert_mode="both")))
    s.spawn("scout", script=script)
    s.delegate("scout", "find the TODOs")
    s.sim.run_all(max_time=30)
    (alert,) = _alerts(sink)
    got = [getattr(e, "content", "") for e in s.sim_launcher.driver("scout").received]
    assert alert.rescue_message in got  # nudged
    inspected = s.watchdog("inspect", agent="scout")
    nudges = [e for e in inspected["events"] if e["kind"] == "message" and e["source"] != "agent"]
    assert [e["source"] for e in nudges] == ["user", "watchdog"]  # the task, then the nudge
    verdict = inspected["verdict"]
    assert verdict["likely_stuck"] is True
    (item,) = [e for e in verdict["evidence"] if e["code"] == "repeated_command"]
    assert item["count"] == 4  # beyond the threshold: the nudge did not start a new episode
