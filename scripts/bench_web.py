#!/usr/bin/env python3
"""The web board with 1,000 agents: first paint, a completion's card moving, and the board
server's CPU while five browsers watch an idle session.

    python scripts/bench_web.py [--agents N] [--runs R] [--samples S] [--browsers B]
                                [--window SECONDS] [--out FILE] [--quick]

Each run starts a fresh session of ``--agents`` agents, each with one open task
(``bench_lib/web_puppets.py``: ``shepherd serve``'s wiring, the agents without processes),
and a real ``shepherd web`` in front of it; the browsers are Debian's headless Chromium
(``scripts/install_browser.sh``). Per run:

- **first paint**: a fresh browser opens the board; from the navigation's start to the page's
  ``board-painted`` mark (the first board drawn: 5 lanes of up to 50 cards, every count whole),
  and the browser's first contentful paint, both from the Navigation Timing clock.
- **completion to card moved**: ``--samples`` times, one agent's ``task_done`` is handed to the
  session's inbox as its bridge would hand it (wall clock just before), and the board open in a
  browser notes (wall clock, in the first animation frame after the change) when that agent's
  card is drawn in the idle lane: the notifications' follower, the snapshot of every agent, the
  event to the page and the page's redraw, all in the figure. p50 and p99 of the run.
- **idle CPU**: ``--browsers`` browsers open the board and stay; nothing happens in the
  session for ``--window`` seconds; the CPU time ``shepherd web`` used (user + system, from
  ``/proc``) over that window, as a share of one core; the session's process likewise.

Printed, and written to JSON (default ``bench-web-results.json``): each figure's median over
the runs, with min and max, and every run's own figures. A benchmark, not a test: nothing here
asserts on a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_lib.common import percentile, stop_process  # noqa: E402

PUPPETS = ROOT / "scripts" / "bench_lib" / "web_puppets.py"
WEB = [sys.executable, "-m", "actors.surfaces.cli", "web", "--json"]
WAIT_S = 120.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: notes, in the page, the wall clock of the first frame after the agent's card is idle
WATCH_CARD = """
window.__moved = null;
const name = arguments[0];
const seen = () => {
  const c = document.querySelector(`.card[data-agent='${name}']`);
  return c !== null && c.dataset.lane === 'idle';
};
const watcher = new MutationObserver(() => {
  if (window.__moved === null && seen()) {
    watcher.disconnect();
    requestAnimationFrame(() => { window.__moved = Date.now(); });
  }
});
watcher.observe(document.getElementById('board'), {childList: true, subtree: true});
"""
PAINT = """
const mark = performance.getEntriesByName('board-painted')[0];
const fcp = performance.getEntriesByName('first-contentful-paint')[0];
const nav = performance.getEntriesByType('navigation')[0];
return {board_painted_ms: mark ? mark.startTime : null, fcp_ms: fcp ? fcp.startTime : null,
        dom_content_loaded_ms: nav ? nav.domContentLoadedEventEnd : null,
        cards: document.querySelectorAll('.card').length,
        counted: [...document.querySelectorAll('.lane')].reduce(
          (n, l) => n + Number(l.dataset.count), 0)};
"""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def browser() -> Any:
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    options.binary_location = shutil.which("chromium") or "chromium"
    service = webdriver.ChromeService(shutil.which("chromedriver") or "chromedriver")
    return webdriver.Chrome(options=options, service=service)


class Session:
    """The puppets' session and ``shepherd web`` in front of it, for one run."""

    def __init__(self, directory: Path, agents: int) -> None:
        env = {**os.environ, "XDG_STATE_HOME": str(directory / "state")}
        self.puppets = subprocess.Popen(
            [sys.executable, str(PUPPETS), str(directory / "session"), str(agents)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.puppets.stdout is not None
        assert self.puppets.stdin is not None
        ready = json.loads(self.puppets.stdout.readline())["ready"]
        self.tasks: dict[str, str] = ready["tasks"]
        self.web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors.surfaces.cli",
                "web",
                "--json",
                "--session",
                str(directory / "session"),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self.web.stdout is not None
        header = json.loads(self.web.stdout.readline())["web"]
        self.url = f"{header['url']}?token={header['token']}"

    def done(self, name: str) -> float:
        """``name``'s task done, handed to the session; the wall clock just before."""
        assert self.puppets.stdin is not None
        assert self.puppets.stdout is not None
        self.puppets.stdin.write(f"done {name}\n")
        self.puppets.stdin.flush()
        sent: float = json.loads(self.puppets.stdout.readline())["sent"]
        return sent

    def close(self) -> None:
        stop_process(self.web, grace_s=10)
        if self.puppets.poll() is None and self.puppets.stdin is not None:
            with suppress(OSError):
                self.puppets.stdin.write("quit\n")
                self.puppets.stdin.flush()
        with suppress(subprocess.TimeoutExpired):
            self.puppets.wait(60)
        stop_process(self.puppets)


@contextmanager
def opened(url: str, count: int = 1) -> Iterator[list[Any]]:
    drivers: list[Any] = []
    try:
        for _ in range(count):
            driver = browser()
            drivers.append(driver)
            driver.get(url)
        for driver in drivers:
            WebDriverWait(driver, WAIT_S).until(
                lambda d: d.execute_script("return document.body.dataset.ready") == "1"
            )
        yield drivers
    finally:
        for driver in drivers:
            driver.quit()


def first_paint(session: Session) -> dict[str, Any]:
    with opened(session.url) as (driver,):
        painted: dict[str, Any] = driver.execute_script(PAINT)
    return painted


def card_moves(session: Session, samples: int) -> dict[str, Any]:
    names = sorted(session.tasks)[:samples]
    latencies: list[float] = []
    with opened(session.url) as (driver,):
        for name in names:
            driver.execute_script(WATCH_CARD, name)
            sent = session.done(name)
            moved = WebDriverWait(driver, WAIT_S, poll_frequency=0.02).until(
                lambda d: d.execute_script("return window.__moved")
            )
            latencies.append(moved / 1000.0 - sent)
    ms = [x * 1000 for x in latencies]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
    }


def idle_cpu(session: Session, browsers: int, window_s: float) -> dict[str, Any]:
    with opened(session.url, browsers):
        web0, puppets0 = cpu_s(session.web.pid), cpu_s(session.puppets.pid)
        start = time.monotonic()
        time.sleep(window_s)  # the measured window: nothing happens in it
        elapsed = time.monotonic() - start
        web1, puppets1 = cpu_s(session.web.pid), cpu_s(session.puppets.pid)
    return {
        "window_s": elapsed,
        "web_cpu_s": web1 - web0,
        "web_core_pct": 100 * (web1 - web0) / elapsed,
        "session_core_pct": 100 * (puppets1 - puppets0) / elapsed,
    }


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        started = time.monotonic()
        session = Session(Path(tmp), args.agents)
        try:
            result: dict[str, Any] = {"session_start_s": time.monotonic() - started}
            result["paint"] = first_paint(session)
            result["idle"] = idle_cpu(session, args.browsers, args.window)
            result["moves"] = card_moves(session, args.samples)
            return result
        finally:
            session.close()


FIGURES = {
    "first paint: board drawn (ms)": ("paint", "board_painted_ms"),
    "first paint: first contentful paint (ms)": ("paint", "fcp_ms"),
    "completion to card moved p50 (ms)": ("moves", "p50_ms"),
    "completion to card moved p99 (ms)": ("moves", "p99_ms"),
    "idle, browsers watching: shepherd web (% of a core)": ("idle", "web_core_pct"),
    "idle, browsers watching: the session (% of a core)": ("idle", "session_core_pct"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=100, help="completions per run")
    parser.add_argument("--browsers", type=int, default=5)
    parser.add_argument("--window", type=float, default=30.0, help="idle CPU window, seconds")
    parser.add_argument("--quick", action="store_true", help="3 runs, 50 samples, 10 s window")
    parser.add_argument("--out", default="bench-web-results.json")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.samples, args.window = 3, 50, 10.0
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args))
        print(f"run {i + 1}/{args.runs}: " + json.dumps(runs[-1]), file=sys.stderr)
    medians = {}
    for label, (part, key) in FIGURES.items():
        values = [r[part][key] for r in runs if r[part].get(key) is not None]
        medians[label] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
        }
        print(
            f"{label:55s} {medians[label]['median']:9.1f}  (min {min(values):.1f}, "
            f"max {max(values):.1f})"
        )
    document = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "params": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": {"cpu_count": os.cpu_count(), "load_at_start": os.getloadavg()},
        "medians": medians,
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
