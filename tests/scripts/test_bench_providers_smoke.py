"""``scripts/bench_providers.py`` still runs end to end: one tiny run of every mode in a
subprocess (a simulated provider, real command agents of a real session), its JSON complete
and every task accounted for. It never looks at a timing: a benchmark is never a timed test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.scripts.test_bench_smoke import ROOT

pytestmark = pytest.mark.timeout(300)


def test_the_providers_benchmark_runs_every_mode() -> None:
    argv = ["--agents", "4", "--tasks", "2", "--rate", "3", "--runs", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_providers.py"), *argv],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(document["providers"]) == {"gate", "gate+cap", "own retries"}
    for mode, row in document["providers"].items():
        assert row["completed"] + row["failed"] == 8 and row["unfinished"] == 0, (mode, row)
        assert row["requests"] >= row["completed"], (mode, row)
    # the gate loses no task to the rate limit
    assert document["providers"]["gate"]["failed"] == 0
    assert document["providers"]["gate+cap"]["failed"] == 0
