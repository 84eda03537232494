"""Watchdog alert gating (cooldown, evidence dedup, pause, disabled) and the alert text."""

from __future__ import annotations

import itertools

import pytest

from protocol.watchdog import (
    AlertGate,
    Verdict,
    WatchdogConfig,
    decide_alert,
    detect_stuck,
    gate_verdict,
    record_alert,
    render_alert,
    reset_episode,
)
from tests.protocol.test_watchdog_detect import RG_OUTPUT, Script

CONFIG = WatchdogConfig()  # cooldown 60 s


def looping(times: int = 3, command: str = "rg load_config src") -> Script:
    script = Script()
    for _ in range(times):
        script.run(command, RG_OUTPUT)
    return script


def test_first_stuck_verdict_alerts() -> None:
    script = looping()
    decision = decide_alert(AlertGate(), script.verdict(), CONFIG, script.now)
    assert decision.alert and decision.reason == "alert"
    assert any(k.startswith("repeated_command:") for k in decision.fresh_keys)


def test_not_stuck_never_alerts() -> None:
    script = looping(2)
    decision = decide_alert(AlertGate(), script.verdict(), CONFIG, script.now)
    assert not decision.alert and decision.reason == "not_stuck"


def test_same_evidence_does_not_alert_twice_inside_the_cooldown() -> None:
    script = looping()
    verdict = script.verdict()
    first, gate = gate_verdict(AlertGate(), verdict, CONFIG, 100.0)
    assert first.alert
    again, gate2 = gate_verdict(gate, verdict, CONFIG, 130.0)
    assert not again.alert and again.reason == "cooldown"
    assert again.retry_after == 160.0
    assert gate2 == gate  # nothing recorded


def test_new_evidence_inside_the_cooldown_still_waits() -> None:
    script = looping()
    _, gate = gate_verdict(AlertGate(), script.verdict(), CONFIG, 100.0)
    for _ in range(3):
        script.run("rg other_thing src", "other")
    decision = decide_alert(gate, script.verdict(), CONFIG, 110.0)
    assert decision.reason == "cooldown"  # one alert per agent per cooldown window


def test_after_the_cooldown_stale_evidence_does_not_alert_again() -> None:
    script = looping()
    verdict = script.verdict()
    _, gate = gate_verdict(AlertGate(), verdict, CONFIG, 100.0)
    decision = decide_alert(gate, verdict, CONFIG, 1000.0)
    assert not decision.alert and decision.reason == "duplicate_evidence"


def test_after_the_cooldown_a_loop_that_keeps_going_alerts_again() -> None:
    script = looping()
    _, gate = gate_verdict(AlertGate(), script.verdict(), CONFIG, 100.0)
    script.run("rg load_config src", RG_OUTPUT)  # the same evidence key, grown
    decision = decide_alert(gate, script.verdict(), CONFIG, 161.0)
    assert decision.alert


def test_after_the_cooldown_new_evidence_alerts() -> None:
    script = looping()
    _, gate = gate_verdict(AlertGate(), script.verdict(), CONFIG, 100.0)
    for _ in range(3):
        script.run("rg other_thing src", "other")
    decision = decide_alert(gate, script.verdict(), CONFIG, 200.0)
    assert decision.alert
    assert all("repeated_command" in k or "read_only_loop" in k for k in decision.fresh_keys)


def test_paused_and_disabled_suppress_alerts() -> None:
    verdict = looping().verdict()
    assert decide_alert(AlertGate(), verdict, CONFIG, 0.0, paused=True).reason == "paused"
    off = WatchdogConfig(enabled=False)
    assert decide_alert(AlertGate(), verdict, off, 0.0).reason == "disabled"
    decision, gate = gate_verdict(AlertGate(), verdict, CONFIG, 0.0, paused=True)
    assert not decision.alert and gate == AlertGate()
    # resuming alerts on the same evidence: nothing was recorded while paused
    assert decide_alert(gate, verdict, CONFIG, 1.0).alert


def test_zero_cooldown_alerts_on_every_growth() -> None:
    config = WatchdogConfig(cooldown_s=0.0)
    script = looping()
    _, gate = gate_verdict(AlertGate(), script.verdict(), config, 10.0)
    assert decide_alert(gate, script.verdict(), config, 10.0).reason == "duplicate_evidence"
    script.run("rg load_config src", RG_OUTPUT)
    assert decide_alert(gate, script.verdict(), config, 10.0).alert


def test_reset_episode_forgets_keys_but_keeps_the_cooldown() -> None:
    script = looping()
    _, gate = gate_verdict(AlertGate(), script.verdict(), CONFIG, 100.0)
    fresh = reset_episode(gate)
    assert fresh.alerted == {} and fresh.last_alert_at == 100.0
    # a new task that loops the same way again alerts once the cooldown is over
    again = looping()
    assert decide_alert(gate, again.verdict(), CONFIG, 500.0).reason == "duplicate_evidence"
    assert decide_alert(fresh, again.verdict(), CONFIG, 120.0).reason == "cooldown"
    assert decide_alert(fresh, again.verdict(), CONFIG, 500.0).alert


def test_decide_is_pure_and_record_remembers_newest_seq() -> None:
    script = looping()
    verdict = script.verdict()
    gate = AlertGate()
    decide_alert(gate, verdict, CONFIG, 0.0)
    assert gate == AlertGate()
    recorded = record_alert(gate, verdict, 5.0)
    assert recorded.last_alert_at == 5.0
    assert set(recorded.alerted) == {e.key for e in verdict.evidence}
    assert max(recorded.alerted.values()) == max(max(e.seqs) for e in verdict.evidence)


@pytest.mark.parametrize("cooldown", [30.0, 60.0])
def test_a_looping_agent_gets_exactly_one_alert_per_cooldown_window(cooldown: float) -> None:
    """The scripted agent loops for ten minutes; the parent is alerted once per window."""
    config = WatchdogConfig(cooldown_s=cooldown)
    script = Script(config)
    gate = AlertGate()
    alerts: list[float] = []
    while script.now < 600.0:
        script.run("rg load_config src", RG_OUTPUT, dt=4.5)  # one call every 5 s
        decision, gate = gate_verdict(gate, script.verdict(), config, script.now)
        if decision.alert:
            alerts.append(script.now)
    assert alerts[0] == pytest.approx(15.0)  # the third call
    gaps = [b - a for a, b in itertools.pairwise(alerts)]
    assert all(cooldown <= gap < cooldown + 5.0 for gap in gaps)
    assert len(alerts) == 1 + int((600.0 - 15.0) // cooldown)


# --- the alert text --------------------------------------------------------------------------


def test_render_alert_names_agent_task_reasons_evidence_and_rescue() -> None:
    verdict = looping().verdict()
    text = render_alert(
        "scout", "shepherd-agent-1", "shepherd-task-7", verdict, "Stop and rethink."
    )
    lines = text.split("\n")
    assert lines[0] == "[Watchdog Alert]"
    assert "agent: scout (shepherd-agent-1)" in lines
    assert "task: shepherd-task-7" in lines
    assert "reasons: repeated_command, read_only_loop" in lines
    assert any("repeated_command x3 [medium]" in line for line in lines)
    assert "      $ rg load_config src" in lines
    assert any(line.strip().startswith("output sha256: ") for line in lines)
    assert lines.index("suggested rescue message:") < lines.index("  Stop and rethink.")
    assert "No action was taken" in text


def test_render_alert_without_task_or_evidence() -> None:
    text = render_alert("scout", "shepherd-agent-1", None, Verdict(), "msg\nsecond line")
    assert "task: none" in text
    assert "reasons: none" in text
    assert "  (none)" in text
    assert "  msg\n  second line" in text


def test_render_alert_caps_the_evidence_list() -> None:
    script = Script(WatchdogConfig(repeat_threshold=1))
    for i in range(12):
        script.run(f"./step{i}.sh", str(i))
    verdict = detect_stuck(script.events, script.config, script.now)
    text = render_alert("a", "id", "t", verdict, "m")
    assert "more" in text.split("suggested rescue message:")[0]
