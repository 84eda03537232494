"""``scripts/bench_web.py`` still runs end to end: one tiny run in a subprocess (a session of
puppet agents, ``shepherd web``, headless Chromium), its JSON complete. It never looks at a
timing: a benchmark is never a timed test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts.test_bench_smoke import ROOT

pytestmark = pytest.mark.timeout(300)


def test_the_web_benchmark_runs_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "web.json"
    argv = ["--agents", "30", "--runs", "1", "--samples", "3", "--browsers", "2", "--window", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_web.py"), *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    (run,) = document["runs"]
    assert run["paint"]["counted"] == 30  # every agent counted, whatever the page shows
    assert run["moves"]["n"] == 3
    assert set(document["medians"]) == {
        "first paint: board drawn (ms)",
        "first paint: first contentful paint (ms)",
        "completion to card moved p50 (ms)",
        "completion to card moved p99 (ms)",
        "idle, browsers watching: shepherd web (% of a core)",
        "idle, browsers watching: the session (% of a core)",
    }
