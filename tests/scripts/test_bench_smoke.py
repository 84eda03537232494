"""``scripts/bench.py`` still runs end to end: a tiny ``--smoke`` run in a subprocess.

It proves the benchmark script, its worker and publisher processes and its JSON output work;
it never looks at a timing (a benchmark is never a timed test: timings on a
shared machine are noise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "bench.py"

#: Shepherd's receiver woken by the doorbell alone, and by inotify alone
WAKERS = {"shepherd_bell", "shepherd_inotify"}
RECEIVERS = {"poll_500ms", "watchfiles_defaults", "raw_inotify", *WAKERS}
#: rows of the README's performance table (scripts/bench_lib/readme.py ROWS)
README_ROWS = 17
#: every figure issue 7 asks for, next to its baselines
FIGURES = {
    "delivery.idle.p50_ms": RECEIVERS,
    "delivery.idle.p99_ms": RECEIVERS,
    "delivery.burst.p50_ms": RECEIVERS,
    "delivery.burst.p99_ms": RECEIVERS,
    "throughput.1to1.envelopes_per_s": {"inotify_reader", "raw_files_floor", *WAKERS},
    "throughput.1to1.lost": WAKERS,
    "throughput.8to1.envelopes_per_s": {"inotify_reader", "raw_files_floor", *WAKERS},
    "throughput.8to1.lost": WAKERS,
    "create.tasks.create_s": {"one_by_one"},
    "create.tasks.cpu_s": {"one_by_one"},
    "settle.n_50.p50_ms": {"memory_journal", "shape"},
    "settle.n_50.p99_ms": {"memory_journal", "floor", "shape"},
    "settle.n_50.first_ms": {"memory_journal"},
    "journal.file.records_per_s": {"one_per_write"},
    "journal.nats.records_per_s": {"one_per_write"},
    "notify.rate_1.p50_ms": set(),
    "notify.rate_1.p99_ms": set(),
    "notify.rate_100.p50_ms": set(),
    "notify.rate_100.p99_ms": set(),
    "notify.rate_1000.p50_ms": set(),
    "notify.rate_1000.p99_ms": set(),
    **{
        f"scale.{point}.{figure}": baselines
        for point in ("agents", "tasks")
        for figure, baselines in (
            ("start_s", {"pykka_threading_actor"}),
            ("kb_per_actor", {"pykka_threading_actor"}),
            ("os_threads", {"pykka_threading_actor"}),
            ("notify_p50_ms", set()),
            ("notify_p99_ms", set()),
        )
    },
    "idle.cpu_s_per_30s": {"poll_500ms", "watchfiles_defaults", *WAKERS},
    "idle.core_pct": {"poll_500ms", "watchfiles_defaults", *WAKERS},
    "demo.simulated_wall_s": set(),
    "demo.process_wall_s": set(),
    "bridge.spawn_to_ready_ms": set(),
    "requests.open_ms": {"previous_design"},
    "requests.round_trip_ms": {"previous_design"},
    "requests.held": {"previous_design"},
    **{
        f"children.{part}.{q}_ms": {"ten_children"}
        for part in ("first", "middle", "last")
        for q in ("p50", "p99")
    },
    **{
        f"children.{figure}": {"ten_children"}
        for figure in (
            "start_s",
            "bridge_private_mb",
            "bridge_threads",
            "parent_fds",
            "parent_threads",
        )
    },
    "children.inotify_instances": set(),
    "children.polled_agents": set(),
    **{
        f"cli.{call}.{q}_ms": {"python_c_pass"}
        for call in ("child_message", "status_empty", "status_agents")
        for q in ("p50", "p99")
    },
    **{
        f"runtime.{workload}.msgs_per_s": {"pykka_threading_actor", "thespian_simple"}
        for workload in ("ping_pong", "thread_ring", "fork_join", "counting")
    },
}


@pytest.mark.processes
@pytest.mark.timeout(600)
def test_a_smoke_run_exits_0_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["mode"] == "smoke"
    assert document["errors"] == []
    for fact in ("cpu_count", "platform", "python", "kernel", "mailbox_fs"):
        assert fact in document["machine"], fact
    assert set(document["versions"]) == {"pykka", "msgspec", "watchfiles", "loguru"}
    missing = sorted(set(FIGURES) - set(document["figures"]))
    assert not missing, missing
    for key, baselines in FIGURES.items():
        figure = document["figures"][key]
        assert figure["unit"], key
        subjects = figure["subjects"]
        assert {"shepherd", *baselines} <= set(subjects), (key, sorted(subjects))
        for name, stats in subjects.items():
            # a value with its spread, or an honest reason (the child bridge may be missing)
            assert {"min", "median", "max", "runs"} <= set(stats) or "unavailable" in stats, (
                key,
                name,
                stats,
            )
    # the request-table baseline really is the previous design, injected into the broker
    tables = {r["design"]: r for r in document["raw"]["requests"]}
    assert tables["shepherd"]["table"] == "RequestTable"
    assert tables["previous_design"]["table"] == "PreviousDesignTable"
    assert tables["previous_design"]["held"] == document["sizes"]["requests_n"]
    # the table was printed, one line per figure
    for key in FIGURES:
        assert key in done.stdout, key
    # and the README's rows, one per row of its table, each saying the load at the time
    rows = document["readme_rows"]
    assert rows[:2] == ["| figure | Shepherd | baselines (same run) |", "|---|---|---|"]
    assert len(rows) == 2 + README_ROWS
    assert all(", load " in row and row.count(" | ") == 2 for row in rows[2:]), rows
    assert "\n".join(rows) in done.stdout
    assert set(document["load_at_start_of"]) == set(document["benchmarks"])
