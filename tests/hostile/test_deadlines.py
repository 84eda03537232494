"""Defect 1: one huge timeout once stopped every timer of a session.

Every deadline a user can give, from every surface (CLI, MCP, Python API, child envelopes,
settings files), is finite, positive and at most seven days; anything else is
``invalid_argument`` naming the field and the bound, and the session goes on keeping its
deadlines and delivering its completions (the canary). A timer callback that raises, and a
delay too long for the platform, never stop the shared timer thread.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import anyio
import pytest

from actors.runtime.clock import MAX_DELAY_S, SystemClock
from actors.surfaces.config import load_settings
from protocol.core.errors import InvalidArgument
from protocol.core.limits import MAX_DEADLINE_MINUTES, MAX_DEADLINE_S
from protocol.records.settings import Settings, check_settings
from tests.processes.conftest import cli
from tests.tools.test_mcp_server import call_error, mcp_session

from .conftest import Live

pytestmark = pytest.mark.processes

HOSTILE_MINUTES = ["200000000", "1e12", "nan", "inf", "-inf", "-1", "0", "-0", "1e400"]


def _spawn_idle(live: Live, name: str = "idle") -> None:
    path = live.root / f"{name}.json"
    path.write_text(json.dumps({"steps": [{"await": "task"}, {"await": "any"}]}))
    live.sup.call("spawn", {"name": name, "script": str(path)})


def test_cli_refuses_every_hostile_task_deadline_and_the_session_keeps_its_timers(
    live: Live,
) -> None:
    _spawn_idle(live)
    for value in HOSTILE_MINUTES:
        code, out = cli(
            "delegate", "idle", "x", f"--timeout={value}", session=live.session, check=False
        )
        assert code == 2, (value, out)
        assert out["error"]["code"] == "invalid_argument", (value, out)
        assert "timeout_minutes" in out["error"]["message"], (value, out)
    assert live.sup.session.status("idle").agents[0].task is None  # nothing was accepted
    live.canary.check()


def test_cli_names_the_bound_it_enforces(live: Live) -> None:
    _spawn_idle(live)
    _, out = cli(
        "delegate", "idle", "x", "--timeout", "200000000", session=live.session, check=False
    )
    assert f"{MAX_DEADLINE_MINUTES:g}" in out["error"]["message"].replace(".0", "")
    code, out = cli(
        "wait", "shepherd-task-0", "--timeout", "nan", session=live.session, check=False
    )
    assert code == 2 and out["error"]["code"] == "invalid_argument"
    assert "timeout_s" in out["error"]["message"]


def test_a_tiny_deadline_is_a_deadline_that_passes_at_once(live: Live) -> None:
    _spawn_idle(live)
    _, task = cli("delegate", "idle", "x", "--timeout=1e-320", session=live.session)
    _, got = cli("wait", task["task_id"], "--timeout", "30", session=live.session)
    assert [r["status"] for r in got["completed"]] == ["timed_out"]
    live.canary.check()


def test_cli_takes_the_longest_deadline_it_allows(live: Live) -> None:
    _spawn_idle(live)
    _, task = cli(
        "delegate", "idle", "x", "--timeout", f"{MAX_DEADLINE_MINUTES:g}", session=live.session
    )
    (row,) = live.sup.session.status("idle").agents
    assert row.task is not None and row.task.task_id == task["task_id"]
    live.canary.check()


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("shepherd_delegate", {"target": "idle", "task": "x", "timeout_minutes": 1e12}, "timeout"),
        (
            "shepherd_message",
            {"target": "idle", "message": "q", "expects_reply": True, "reply_timeout_s": 1e300},
            "reply_timeout_s",
        ),
        ("shepherd_message", {"target": "idle", "message": "q", "reply_timeout_s": 0}, "reply"),
    ],
)
def test_mcp_refuses_hostile_deadlines(live: Live, tool: str, arguments: dict, field: str) -> None:  # type: ignore[type-arg]
    _spawn_idle(live)

    async def scenario() -> dict[str, str]:
        async with mcp_session(live.root, live.session) as session:
            return await call_error(session, tool, arguments)

    error = anyio.run(scenario)
    assert error["code"] == "invalid_argument", error
    assert field in error["message"], error
    live.canary.check()


@pytest.mark.parametrize("minutes", [1e12, math.nan, math.inf, -1.0, 0.0, -0.0])
def test_python_api_refuses_hostile_deadlines(live: Live, minutes: float) -> None:
    _spawn_idle(live)
    with pytest.raises(InvalidArgument, match="timeout_minutes"):
        live.sup.session.delegate("idle", "x", timeout_minutes=minutes)
    with pytest.raises(InvalidArgument, match="reply_timeout_s"):
        live.sup.session.message("idle", "q", expects_reply=True, reply_timeout_s=minutes * 1e300)
    with pytest.raises(InvalidArgument, match="timeout_s"):
        live.sup.session.wait("shepherd-task-0", timeout_s=minutes * 1e300)


def test_settings_files_cannot_set_a_deadline_out_of_bounds(tmp_path: Path) -> None:
    config = tmp_path / "config" / "shepherd"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        "default_task_timeout_s = 1e300\ndefault_reply_timeout_s = inf\n"
        "stale_wait_threshold_s = nan\nfallback_poll_s = -1\n"
        "[watchdog]\nidle_no_progress_s = 1e18\n"
    )
    settings, warnings = load_settings()
    assert settings == Settings()
    for key in (
        "default_task_timeout_s",
        "default_reply_timeout_s",
        "stale_wait_threshold_s",
        "fallback_poll_s",
        "idle_no_progress_s",
    ):
        assert any(key in w for w in warnings), (key, warnings)


def test_settings_built_in_python_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="default_task_timeout_s"):
        check_settings(Settings(default_task_timeout_s=MAX_DEADLINE_S * 2))
    assert check_settings(Settings(default_task_timeout_s=MAX_DEADLINE_S)) is not None


def test_a_timer_callback_that_raises_never_stops_the_timer_thread() -> None:
    clock = SystemClock()
    fired = threading.Event()
    try:
        clock.call_later(0.0, lambda: 1 / 0)

        def raise_exit() -> None:
            raise SystemExit(3)

        clock.call_later(0.0, raise_exit)
        clock.call_later(0.01, fired.set)
        assert fired.wait(10), "a timer after two failing callbacks never fired"
    finally:
        clock.close()


def test_a_delay_beyond_any_platform_limit_never_stops_the_timer_thread() -> None:
    """Once a far timer is the earliest, the thread waits for it: 1e300 s once raised
    OverflowError there and every later timer of the session was silently never fired."""
    clock = SystemClock()
    try:
        far = [clock.call_later(1e300, lambda: None), clock.call_later(math.inf, lambda: None)]
        clock.call_later(MAX_DELAY_S * 10, lambda: None)
        for attempt in range(3):  # each time the thread went back to waiting for the far one
            fired = threading.Event()
            clock.call_later(0.01, fired.set)
            assert fired.wait(10), f"timer {attempt} after a far one never fired"
        for timer in far:
            timer.cancel()
    finally:
        clock.close()


def test_a_nan_delay_is_refused_at_the_caller_not_in_the_timer_thread() -> None:
    clock = SystemClock()
    fired = threading.Event()
    try:
        with pytest.raises(ValueError, match="NaN"):
            clock.call_later(math.nan, fired.set)
        clock.call_later(0.0, fired.set)
        assert fired.wait(10)
    finally:
        clock.close()
