"""Watchdog targets: classifying an agent, building a target, applying events, reconciling."""

from __future__ import annotations

import pytest

from protocol.watchdog import (
    WatchdogTarget,
    apply_target_event,
    classify_kind,
    make_target,
    reconcile_targets,
)


@pytest.mark.parametrize(
    ("name", "description", "kind"),
    [
        ("watchdog", "", "watchdog"),
        ("scout", "Watchdog for the task agents", "watchdog"),
        ("WATCHDOG-2", None, "watchdog"),
        ("scout", "explore campaign-list", "task"),
        ("fixer", None, "task"),
        ("", "", "unknown"),
        (None, None, "unknown"),
    ],
)
def test_classify_kind(name: str | None, description: str | None, kind: str) -> None:
    assert classify_kind(name, description) == kind


def test_make_target_maps_the_agent_record() -> None:
    target = make_target(
        "shepherd-agent-1",
        name="scout",
        description="explore",
        status="working",
        created_at=10.0,
        tool_call_count=12,
    )
    assert target == WatchdogTarget(
        id="shepherd-agent-1",
        name="scout",
        description="explore",
        kind="task",
        status="working",
        tool_call_count=12,
        created_at=10.0,
        last_active_at=10.0,  # starts at creation
    )


def test_an_event_updates_status_and_last_active() -> None:
    targets = {"a": make_target("a", name="scout", status="starting", created_at=1.0)}
    after = apply_target_event(targets, "a", 5.0, status="working", tool_calls=1)
    assert after["a"].status == "working"
    assert after["a"].last_active_at == 5.0
    assert after["a"].tool_call_count == 1
    assert targets["a"].status == "starting"  # the input is not changed
    older = apply_target_event(after, "a", 3.0)  # a late event never moves time back
    assert older["a"].last_active_at == 5.0 and older["a"].status == "working"


def test_an_event_for_an_unknown_agent_creates_a_minimal_target() -> None:
    after = apply_target_event({}, "b", 7.0, status="idle", name="watchdog")
    assert after["b"].kind == "watchdog"
    assert after["b"].created_at == 7.0 and after["b"].status == "idle"


def test_an_event_without_an_agent_id_changes_nothing() -> None:
    targets = {"a": make_target("a", name="x")}
    assert apply_target_event(targets, None, 1.0, status="exited") == targets
    assert apply_target_event(targets, "", 1.0, status="exited") == targets


def test_reconcile_adds_new_keeps_newer_activity_and_keeps_missing() -> None:
    targets = {
        "a": make_target("a", name="scout", status="working", created_at=1.0, last_active_at=50.0),
        "gone": make_target("gone", name="old", status="working", created_at=1.0),
    }
    snapshot = [
        make_target(
            "a", name="scout", status="idle", created_at=1.0, last_active_at=40.0, tool_call_count=9
        ),
        make_target("c", name="watchdog", status="working", created_at=30.0),
    ]
    merged = reconcile_targets(targets, snapshot)
    assert set(merged) == {"a", "gone", "c"}
    assert merged["a"].status == "idle"  # the snapshot's status wins
    assert merged["a"].last_active_at == 50.0  # the later activity is kept
    assert merged["a"].tool_call_count == 9
    assert merged["c"].kind == "watchdog"
    assert merged["gone"] == targets["gone"]
