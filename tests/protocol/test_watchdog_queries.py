"""protocol.watchdog.queries: a watchdog agent's answers are bounded (the newest targets, the
newest events that fit, the stuck ones first) and its alert quotes it under a header naming who
wrote it, with the detector's verdict; a target's kind follows its role."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.calls.views import status_line
from protocol.core.limits import MAX_WATCHDOG_TARGETS
from protocol.watchdog.detect import Verdict
from protocol.watchdog.queries import (
    fit_events,
    fit_list,
    newest_targets,
    render_agent_alert,
    stuck_list,
)
from protocol.watchdog.targets import WatchdogTarget, apply_target_event, make_target


def _target(i: int, active: float) -> WatchdogTarget:
    return make_target(
        f"shepherd-agent-{i:08x}", name=f"a{i}", created_at=0.0, last_active_at=active
    )


def test_the_newest_targets_first_at_most_the_bound() -> None:
    targets = [_target(i, float(i % 7)) for i in range(MAX_WATCHDOG_TARGETS + 30)]
    shown, total = newest_targets(targets)
    assert total == MAX_WATCHDOG_TARGETS + 30 and len(shown) == MAX_WATCHDOG_TARGETS
    actives = [t.last_active_at for t in shown]
    assert actives == sorted(actives, reverse=True)
    assert newest_targets([]) == ([], 0)


def test_the_stuck_list_names_only_verdicts_above_none_most_confident_first() -> None:
    a, b, c, d = (_target(i, 10.0 - i) for i in range(4))
    verdicts = [
        (a, None, Verdict(confidence="low", reasons=["no_progress"])),
        (b, "shepherd-task-1", Verdict(likely_stuck=True, confidence="high", reasons=["x"])),
        (c, None, Verdict()),
        (d, None, Verdict(confidence="low", reasons=["read_only_loop"])),
    ]
    found = stuck_list(verdicts)
    assert [(f["name"], f["confidence"]) for f in found] == [
        ("a1", "high"),
        ("a0", "low"),
        ("a3", "low"),
    ]
    assert found[0]["task_id"] == "shepherd-task-1" and found[0]["likely_stuck"] is True


def _answer(n: int, preview: str = "x" * 300) -> dict[str, object]:
    events = [{"seq": i, "command": f"rg {i}", "preview": preview} for i in range(n)]
    return {"agent_id": "shepherd-agent-1", "name": "scout", "events": events, "dropped": 0}


def test_an_answer_that_fits_is_kept_as_it_is() -> None:
    answer = _answer(3)
    assert fit_events(answer, 10_000) is answer


@given(n=st.integers(0, 200), budget=st.integers(200, 70_000))
def test_events_that_do_not_fit_lose_their_oldest_first_and_say_how_many(
    n: int, budget: int
) -> None:
    answer = _answer(n)
    fitted = fit_events(answer, budget)
    events = fitted["events"]
    assert isinstance(events, list)
    if len(msgspec.json.encode(answer)) <= budget:
        assert fitted == answer
        return
    cut = fitted["cut"]
    assert cut == n - len(events)
    assert events == answer["events"][cut:]  # type: ignore[index]  # the newest kept, in order
    assert not events or len(msgspec.json.encode(fitted)) <= budget


@given(n=st.integers(0, 150), budget=st.integers(200, 40_000))
def test_a_list_most_important_first_loses_its_tail(n: int, budget: int) -> None:
    targets = [{"id": f"a{i}", "name": "x" * 100} for i in range(n)]
    answer: dict[str, object] = {"targets": targets, "total": n}
    fitted = fit_list(answer, "targets", budget, keep="first")
    items = fitted["targets"]
    if len(msgspec.json.encode(answer)) <= budget:
        assert fitted is answer
        return
    assert items == targets[: len(items)]  # the first ones kept, in order
    assert fitted["cut"] == n - len(items)
    assert not items or len(msgspec.json.encode(fitted)) <= budget


def test_the_alert_quotes_the_watchdog_agent_with_the_detectors_verdict() -> None:
    text = render_agent_alert(
        reporter="wd",
        reporter_id="shepherd-agent-2",
        agent_name="scout",
        agent_id="shepherd-agent-1",
        task_id=None,
        text="scout ran rg three times\nsame output",
        verdict=Verdict(likely_stuck=True, confidence="medium", reasons=["repeated_command"]),
    )
    lines = text.splitlines()
    assert lines[0] == "[Watchdog Alert] from the watchdog agent wd (shepherd-agent-2)"
    assert "agent: scout (shepherd-agent-1)" in lines and "task: none" in lines
    assert "  scout ran rg three times" in lines and "  same output" in lines
    assert any("confidence medium" in line and "repeated_command" in line for line in lines)
    assert lines[-1].startswith("No action was taken")


@pytest.mark.parametrize(
    ("name", "role", "kind"),
    [
        ("wd", "watchdog", "watchdog"),
        ("scout", "worker", "task"),
        ("my-watchdog", None, "watchdog"),
    ],
)
def test_a_targets_kind_follows_its_role(name: str, role: str | None, kind: str) -> None:
    targets = apply_target_event({}, "shepherd-agent-1", 1.0, name=name, role=role)
    assert targets["shepherd-agent-1"].kind == kind
    later = apply_target_event(targets, "shepherd-agent-1", 2.0, status="idle")
    assert later["shepherd-agent-1"].kind == kind  # a later event keeps it


def test_status_marks_a_watchdog_agent() -> None:
    row = {"name": "wd", "process_state": "idle", "last_active_at": 1.0, "role": "watchdog"}
    assert "[watchdog]" in status_line(row, {}, 2.0)
    assert "[watchdog]" not in status_line({**row, "role": "worker"}, {}, 2.0)
