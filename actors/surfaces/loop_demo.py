"""``shepherd demo --loop``: a scripted agent stuck in a loop, caught by the watchdog.

Rules: this is a simulation by design (like ``shepherd demo --simulated``): it runs the
production session and watchdog on the seeded simulation (:mod:`actors.testing`), so the same
seed tells the same story, alert for alert. It is one of the two production modules allowed to
import the simulation kit. It only watches: the parent is alerted, nothing is killed or
steered, and the exit status says whether exactly one alert per cooldown window arrived while
the task kept running.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any, TextIO

import msgspec

__all__ = ["LOOP_COMMAND", "LOOP_SCRIPT", "run_loop_demo"]

LOOP_COMMAND = "rg -n TODO src"
LOOP_RUNS = 36
LOOP_GAP_S = 5.0

#: a scout that takes its task, then runs the same search over and over, never finishing
LOOP_SCRIPT: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "scout: looking for the TODOs"},
        {
            "repeat": {
                "times": LOOP_RUNS,
                "steps": [{"run": LOOP_COMMAND}, {"sleep": LOOP_GAP_S}],
            }
        },
        {"await": "any"},
    ]
}

_RG_OUTPUT = "src/app.py:12:    # TODO: handle the timeout\nsrc/db.py:40:    # TODO: retry\n"


class _Teller:
    """Prints one story line, stamped with the seconds since the story began."""

    def __init__(self, out: TextIO, now: Callable[[], float]) -> None:
        self._out = out
        self._now = now
        self.t0: float | None = None

    def since(self, t: float) -> float:
        return t - (self.t0 if self.t0 is not None else t)

    def __call__(self, text: str) -> None:
        now = self._now()
        if self.t0 is None:
            self.t0 = now
        self._out.write(f"[{now - self.t0:8.3f}s] {text}\n")
        self._out.flush()


def _windows_ok(alert_times: list[float], runs: list[float], cooldown: float, gap: float) -> bool:
    """Exactly one alert per cooldown window while the loop ran: alerts at least a cooldown
    apart, never a whole window (plus one loop step) without one, up to the loop's end."""
    if not alert_times or not runs:
        return False
    slack = gap + 1.0  # an alert comes with the first result after the window opens
    pairs = itertools.pairwise(alert_times)
    spaced = all(cooldown <= b - a < cooldown + slack for a, b in pairs)
    return spaced and runs[-1] - alert_times[-1] < cooldown + slack


def run_loop_demo(out: TextIO | None = None, seed: int = 1) -> int:
    """``shepherd demo --loop``: a scripted scout loops on one search in the simulation; the
    watchdog alerts the parent once per cooldown window and the task keeps running. Returns 0
    when exactly one alert per cooldown window arrived and the task is still running."""
    from actors.session.session import Session
    from actors.testing import SimSession
    from protocol.calls.render import render_notification
    from protocol.calls.views import render_status
    from protocol.records.notifications import AnyNotification, WatchdogAlert

    out = out or sys.stdout
    holder: list[Session] = []
    tell = _Teller(out, lambda: holder[0].runtime.clock.now() if holder else 0.0)
    alerts: list[WatchdogAlert] = []
    runs: list[float] = []

    def sink(note: AnyNotification) -> None:
        if isinstance(note, WatchdogAlert):
            alerts.append(note)
        tell("notification to the parent:\n" + render_notification(note))

    def commands(command: str) -> tuple[str, int]:
        runs.append(holder[0].runtime.clock.now())
        same = " (the same output as before)" if len(runs) > 1 else ""
        tell(f"scout $ {command}   run {len(runs)}: {len(_RG_OUTPUT.splitlines())} matches{same}")
        return _RG_OUTPUT, 0

    session = SimSession.simulated(seed, sink=sink, tap=tell, commands=commands)
    holder.append(session)
    try:
        config = session.watchdog("config")
        cooldown = float(config["cooldown_s"])
        out.write(
            f"session {session.session_id} (simulated, seed {seed}): a scout repeats "
            f"`{LOOP_COMMAND}` {LOOP_RUNS} times, every {LOOP_GAP_S:g}s, with the same output\n"
            f"watchdog: repeat_threshold {config['repeat_threshold']}, cooldown {cooldown:g}s, "
            f"alert_mode {config['alert_mode']} (alert the parent; never kill or steer)\n\n"
        )
        session.spawn("scout", script=LOOP_SCRIPT, description="finds the TODOs")
        task = session.delegate("scout", "Find every TODO in src/ and list them")
        session.sim.run_all(max_time=LOOP_RUNS * LOOP_GAP_S + 20)
        status = msgspec.to_builtins(session.status())
        watchdog = session.watchdog("status")
        inspected = session.watchdog("inspect", agent="scout", limit=1)
    finally:
        session.shutdown()
    times = [a.created_at for a in alerts]
    running = any(
        (a.get("task") or {}).get("task_id") == task.task_id
        and a["task"]["state"] in ("running", "waiting")
        for a in status["agents"]
    )
    ok = _windows_ok(times, runs, cooldown, LOOP_GAP_S) and running
    ok = ok and all("repeated_command" in a.reasons for a in alerts)
    loop_s = runs[-1] - runs[0] if runs else 0.0
    out.write("\nfinal status:\n" + render_status(status) + "\n")
    out.write(
        f"watchdog: {watchdog['alerts']} alerts to the parent at "
        f"{', '.join(f'{tell.since(t):.0f}s' for t in times) or 'none'} "
        f"over a {loop_s:.0f}s loop "
        f"(cooldown {cooldown:g}s); last verdict for scout: "
        f"{inspected['verdict']['confidence']} {', '.join(inspected['verdict']['reasons'])}\n"
    )
    out.write(
        f"task {task.task_id}: {'still running' if running else 'NOT running'} "
        "(the watchdog alerted; nothing was killed or steered)\n"
    )
    out.write(
        "exactly one alert per cooldown window: "
        + ("yes\n" if ok else "NO (see the alert times above)\n")
    )
    out.flush()
    return 0 if ok else 1
