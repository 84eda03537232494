"""``scripts/bench_sandbox.py`` still runs end to end: one tiny run, every figure printed for
both kinds of agent. It never looks at a timing: a benchmark is never a timed test."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.scripts.test_bench_smoke import ROOT

pytestmark = pytest.mark.timeout(300)


def test_the_sandbox_benchmark_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_sandbox.py"), "--runs", "1",
         "--spawns", "1", "--procs", "2"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line[:28].strip(): line[28:].split() for line in done.stdout.splitlines()}
    for figure in ("process start", "spawn to ready", "a turn (delegate to done)"):
        assert len(rows[figure]) == 3 and all(float(x) > 0 for x in rows[figure]), done.stdout
