#!/usr/bin/env python3
"""Shepherd's benchmarks, each run side by side with its baselines (issue 7).

    python scripts/bench.py [--quick] [--out FILE] [--runs N] [--only NAME,...]

Benchmarks (``--only`` names): ``delivery``, ``throughput``, ``notify``, ``scale``, ``idle``,
``demo``, ``requests``, ``children``, ``runtime``, ``cli``, ``nats``, ``create``, ``settle``,
``journal``.
Every job runs in a fresh worker process (``bench_lib.worker``); publishers are other processes
again (``bench_lib.publisher``). Each figure is collected over several runs (5; 3 with ``--quick``,
which also uses smaller sizes and finishes in a few minutes) and written to JSON (default
``bench-results.json``) as min / median / max per subject — Shepherd and each baseline — with
the unit, the run count, the issue's target, the machine and the package versions. A table of
medians is printed: Shepherd's, each baseline's, and how many times better Shepherd is.

How each figure is measured is described in ``bench_lib/*`` and in the JSON (``description``,
``params``); ``raw`` in the JSON keeps every worker's full answer. A benchmark is never a test:
nothing here asserts on a timing. The exit status is 1 only if a job failed or an envelope was
lost or duplicated (or, in ``requests``, a question was refused or its reply went astray).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench_lib.bridge import demo_wall_time
from bench_lib.common import (
    child_env,
    compile_bytecode,
    git_version,
    machine_facts,
    memory_base_dir,
    parse_result,
    versions,
)
from bench_lib.delivery import THROUGHPUT_VARIANTS
from bench_lib.readme import readme_rows
from bench_lib.receivers import VARIANTS
from bench_lib.report import (
    BENCHMARKS,
    FIGURES,
    PREVIOUS_DESIGN,
    PREVIOUS_DESIGN_LABEL,
    SHEPHERD,
    Results,
    table,
)
from bench_lib.savina import SUBJECTS as RUNTIME_SUBJECTS
from bench_lib.savina import THESPIAN
from bench_lib.savina import WORKLOADS as RUNTIME_WORKLOADS

from protocol.core.limits import MAX_BATCH


@dataclass(frozen=True)
class Sizes:
    runs: int
    idle_count: int  # delivery, idle phase: envelopes, one every 50-150 ms
    burst_count: int  # delivery, burst phase: one every 0-10 ms
    parallel: bool  # receivers of one run side by side at the same time (else one by one)
    throughput: int  # envelopes per throughput figure
    notify: tuple[tuple[int, int], ...]  # (settlements per second, settlements)
    agents_n: int  # scale point "agents"
    tasks_n: int  # scale point "tasks"
    pykka_agents_n: int  # ThreadingActors in the baseline of each point
    pykka_tasks_n: int
    idle_s: float  # idle-cost window
    idle_agents: int
    bridge_agents: int  # spawn-to-ready samples per run
    requests_n: int  # requests made in one session (the standing ones included)
    requests_window: int  # the last requests whose cost is reported
    children: int  # real children in one session (``children``)
    children_rounds: int  # round trips per child
    runtime_n: int  # messages (round trips, token passes) per Savina-style workload
    cli_calls: int  # command-line calls per subject in one run (``cli``)
    cli_agents: int  # agents of the session for ``status`` with agents
    nats_n: int = 500  # envelopes per NATS figure (``nats``), latency samples a fifth of it
    create_n: int = 10000  # tasks (each watched) created at once (``create``)
    settle_ns: tuple[int, ...] = (1000, 10000)  # tasks settling at once, durable (``settle``)
    journal_n: int = 4000  # records per journal figure, from 8 callers at once (``journal``)


FULL = Sizes(5, 100, 500, False, 20000, ((1, 10), (100, 300), (1000, 3000)),
             1000, 10000, 1000, 10000, 30.0, 100, 3, 10000, 1000, 1000, 2, 100000,
             20, 150, create_n=10000)  # fmt: skip
QUICK = Sizes(3, 30, 200, True, 2500, ((1, 2), (100, 30), (1000, 300)),
              1000, 1000, 1000, 1000, 5.0, 100, 1, 2500, 1000, 200, 2, 20000, 10, 150,
              create_n=1000)  # fmt: skip
SMOKE = Sizes(1, 2, 5, True, 200, ((1, 2), (100, 5), (1000, 20)),
              20, 50, 20, 50, 0.5, 100, 1, 150, 50, 3, 1, 500, 2, 3, create_n=50)  # fmt: skip


QUICK = replace(QUICK, nats_n=200, settle_ns=(1000,), journal_n=1600)
SMOKE = replace(SMOKE, nats_n=20, settle_ns=(50,), journal_n=80)


#: children of the baseline session of ``children`` (the same figures for a small session)
BASE_CHILDREN = 10
TEN_CHILDREN = "ten_children"


class WorkerError(RuntimeError):
    pass


def run_jobs(jobs: list[tuple[str, dict[str, Any]]], parallel: bool) -> list[Any]:
    """Run worker jobs (all at once if ``parallel``); each answer, or the WorkerError."""

    def start(job: str, params: dict[str, Any]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "bench_lib.worker", job, json.dumps(params)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )

    def finish(proc: subprocess.Popen[str]) -> Any:
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return WorkerError("worker timed out after 900 s")
        result = parse_result(out)
        if proc.returncode != 0 or result is None:
            return WorkerError(f"worker exited {proc.returncode}: {err.strip()[-1500:]}")
        return result

    if parallel:
        procs = [start(job, params) for job, params in jobs]
        return [finish(proc) for proc in procs]
    return [finish(start(job, params)) for job, params in jobs]


def _failed(results: Results, name: str, keys: list[str], subject: str, exc: Exception) -> None:
    results.error(name, f"{subject}: {exc}")
    for key in keys:
        results.missing(key, subject, f"error: {str(exc)[:300]}")


# ---------------------------------------------------------------------- 1. delivery latency


def bench_delivery(sizes: Sizes, results: Results) -> None:
    phases = [
        {"count": sizes.idle_count, "gap_ms": [50, 150]},
        {"count": sizes.burst_count, "gap_ms": [0, 10]},
    ]
    keys = [f"delivery.{p}.{q}_ms" for p in ("idle", "burst") for q in ("p50", "p99")]
    for key in keys:
        results.params(key, idle=phases[0], burst=phases[1], receivers_at_once=sizes.parallel)
    for run in range(sizes.runs):
        jobs = [
            ("latency", {"variant": v, "phases": phases, "seed": run * 10 + i})
            for i, v in enumerate(VARIANTS)
        ]
        for variant, got in zip(VARIANTS, run_jobs(jobs, sizes.parallel), strict=True):
            if isinstance(got, Exception):
                _failed(results, "delivery", keys, variant, got)
                continue
            results.keep_raw("delivery", got)
            if not got["complete"]:
                results.error("delivery", f"{variant}: only {got['received']} arrived")
            for phase, stats in zip(("idle", "burst"), got["phases"], strict=True):
                results.add(f"delivery.{phase}.p50_ms", variant, stats["p50_ms"])
                results.add(f"delivery.{phase}.p99_ms", variant, stats["p99_ms"])


# ---------------------------------------------------------------------- 2. throughput


def bench_throughput(sizes: Sizes, results: Results) -> None:
    figures = [
        {"label": label, "producers": producers, "envelopes": sizes.throughput}
        for label, producers in (("1to1", 1), ("8to1", 8))
    ]
    keys = [f"throughput.{f['label']}.{k}" for f in figures for k in ("envelopes_per_s", "lost")]
    for figure in figures:
        results.params(
            f"throughput.{figure['label']}.envelopes_per_s",
            producers=figure["producers"],
            envelopes=figure["envelopes"],
        )
    for _ in range(sizes.runs):
        (got,) = run_jobs([("throughput", {"figures": figures})], parallel=False)
        if isinstance(got, Exception):
            for variant in THROUGHPUT_VARIANTS:
                _failed(results, "throughput", keys, variant, got)
            continue
        results.keep_raw("throughput", got)
        for variant, one in got["variants"].items():
            # duplicates, leftovers and quarantined files count against every figure
            spoiled = one["duplicates"] + one["left_in_new"] + one["quarantined"]
            for figure in one["figures"]:
                label, lost = figure["label"], figure["lost"] + spoiled
                if lost or not figure["complete"]:
                    results.error("throughput", f"{label} {variant}: LOST OR DUPLICATED: {one}")
                rate = figure["envelopes_per_s"]
                results.add(f"throughput.{label}.envelopes_per_s", variant, rate)
                results.add(f"throughput.{label}.lost", variant, lost)


# ---------------------------------------------------------------------- 3. notification latency


def bench_notify(sizes: Sizes, results: Results) -> None:
    rates = [{"rate": rate, "count": count} for rate, count in sizes.notify]
    keys = [f"notify.rate_{r}.{q}_ms" for r, _ in sizes.notify for q in ("p50", "p99")]
    for rate, count in sizes.notify:
        for q in ("p50", "p99"):
            results.params(f"notify.rate_{rate}.{q}_ms", settlements=count, watchers="one per task")
    for _ in range(sizes.runs):
        (got,) = run_jobs([("notify", {"rates": rates})], parallel=False)
        if isinstance(got, Exception):
            _failed(results, "notify", keys, SHEPHERD, got)
            continue
        results.keep_raw("notify", got)
        for one in got["rates"]:
            if not one["complete"]:
                results.error("notify", f"rate {one['rate']}: only {one['settled']} notified")
            for q in ("p50", "p99"):
                results.add(f"notify.rate_{one['rate']}.{q}_ms", SHEPHERD, one[f"{q}_ms"])


# ---------------------------------------------------------------------- 4. scale


def bench_scale(sizes: Sizes, results: Results) -> None:
    points = (
        ("agents", sizes.agents_n, sizes.pykka_agents_n, 1000),
        ("tasks", sizes.tasks_n, sizes.pykka_tasks_n, 10000),
    )
    done: dict[tuple[str, int, int], Any] = {}
    for point, n, pykka_n, issue_n in points:
        keys = [k for k in FIGURES if k.startswith(f"scale.{point}.")]
        for key in keys:
            results.params(key, n=n, issue_n=issue_n, agents=n, tasks=n, watchers=n)
        for key in keys[:3]:
            results.params(key, baseline="pykka.ThreadingActor, one per task", baseline_n=pykka_n)
            if pykka_n != n:
                results.params(key, baseline_note=f"baseline reduced to {pykka_n} actors here")
        for run in range(sizes.runs):
            # one job serves both points when they have the same size (--quick, --smoke)
            if ("scale", run, n) not in done:
                (done["scale", run, n],) = run_jobs([("scale", {"n": n})], parallel=False)
            if ("pykka", run, pykka_n) not in done:
                (done["pykka", run, pykka_n],) = run_jobs(
                    [("pykka_baseline", {"n": pykka_n})], parallel=False
                )
            got, base = done["scale", run, n], done["pykka", run, pykka_n]
            if isinstance(got, Exception):
                _failed(results, "scale", keys, SHEPHERD, got)
            else:
                results.keep_raw("scale", {"point": point, **got})
                settle = got["settle"]
                if not settle["complete"]:
                    results.error("scale", f"{point}: only {settle['settled']} of {n} notified")
                results.add(f"scale.{point}.start_s", SHEPHERD, got["start_s"])
                results.add(f"scale.{point}.kb_per_actor", SHEPHERD, got["bytes_per_actor"] / 1024)
                results.add(f"scale.{point}.os_threads", SHEPHERD, got["os_threads"])
                results.add(f"scale.{point}.notify_p50_ms", SHEPHERD, settle["p50_ms"])
                results.add(f"scale.{point}.notify_p99_ms", SHEPHERD, settle["p99_ms"])
            if isinstance(base, Exception):
                _failed(results, "scale", keys[:3], "pykka_threading_actor", base)
                continue
            results.keep_raw("scale", {"baseline_for": point, **base})
            results.add(f"scale.{point}.start_s", "pykka_threading_actor", base["start_s"])
            kb = base["bytes_per_actor"] / 1024
            results.add(f"scale.{point}.kb_per_actor", "pykka_threading_actor", kb)
            results.add(f"scale.{point}.os_threads", "pykka_threading_actor", base["os_threads"])


def bench_create(sizes: Sizes, results: Results) -> None:
    """``create_n`` tasks with watchers in a session whose agents are up: ``delegate_many`` of
    ``MAX_BATCH`` items with ``watch`` (one broker message and one journal write per call)
    against one ``delegate`` and one ``watch`` per task (the previous path), alternating in
    each run."""
    n = sizes.create_n
    subjects = ((SHEPHERD, True), ("one_by_one", False))
    for key in ("create.tasks.create_s", "create.tasks.cpu_s"):
        results.params(key, n=n, batch=MAX_BATCH, baseline="delegate + watch per task")
    for _ in range(sizes.runs):
        for subject, batched in subjects:
            params = {"n": n, "batch": MAX_BATCH, "batched": batched}
            (got,) = run_jobs([("create", params)], parallel=False)
            if isinstance(got, Exception):
                _failed(results, "create", ["create.tasks.create_s"], subject, got)
                continue
            results.keep_raw("create", got)
            if got["accepted"] != n:
                results.error("create", f"{subject}: only {got['accepted']} of {n} accepted")
            results.add("create.tasks.create_s", subject, got["create_s"])
            results.add("create.tasks.cpu_s", subject, got["cpu_s"])


def bench_settle(sizes: Sizes, results: Results) -> None:
    """n tasks (each watched) settling at once in a durable session (a fsync'd journal file,
    the parent's inbox received in batches, as ``serve`` runs) beside the same session with its
    journal in memory and each envelope handed over alone, alternating in each run."""
    subjects = ((SHEPHERD, True), ("memory_journal", False))
    for n in sizes.settle_ns:
        for q in ("p50", "p99"):
            results.params(
                f"settle.n_{n}.{q}_ms",
                n=n,
                baseline="journal in memory, unbatched"
                + "; shape: the same actors and messages, no rules"
                + ("; floor: read+decode n files, 1 write + 1 fsync, 25 ms" if q == "p99" else ""),
            )
    for _ in range(sizes.runs):
        for n in sizes.settle_ns:
            keys = [f"settle.n_{n}.{q}_ms" for q in ("p50", "p99")]
            # the floor, in the same run, as a baseline of the p99: what any design must do
            # (bench_lib.sessions.settle_floor_job); the issue's bound is p99 <= 1.5x it
            (floor,) = run_jobs([("settle_floor", {"n": n})], parallel=False)
            if isinstance(floor, Exception):
                _failed(results, "settle", keys[1:], "floor", floor)
            else:
                results.keep_raw("settle", floor)
                results.add(f"settle.n_{n}.p99_ms", "floor", floor["floor_ms"])
            # the shape's own floor: the session's actors and messages with no rules
            # (bench_lib.shape): whatever the rules cost comes on top of it
            (shape,) = run_jobs([("settle_shape", {"n": n})], parallel=False)
            if isinstance(shape, Exception):
                _failed(results, "settle", keys, "shape", shape)
            elif not shape["complete"]:
                told = RuntimeError(f"only {shape['settled']} of {n} told")
                _failed(results, "settle", keys, "shape", told)
            else:
                results.keep_raw("settle", shape)
                for q in ("p50", "p99"):
                    results.add(f"settle.n_{n}.{q}_ms", "shape", shape[f"{q}_ms"])
            for subject, durable in subjects:
                (got,) = run_jobs([("settle", {"n": n, "durable": durable})], parallel=False)
                if isinstance(got, Exception):
                    _failed(results, "settle", keys, subject, got)
                    continue
                results.keep_raw("settle", got)
                if got["settled"] != n or got["refused"]:
                    results.error("settle", f"{subject}: {got['settled']} of {n} notified")
                for q in ("p50", "p99", "first"):
                    results.add(f"settle.n_{n}.{q}_ms", subject, got[f"{q}_ms"])


# ---------------------------------------------------------------------- 5. idle cost


def bench_idle(sizes: Sizes, results: Results) -> None:
    keys = ["idle.cpu_s_per_30s", "idle.core_pct"]
    for key in keys:
        results.params(
            key,
            inboxes=sizes.idle_agents + 1,
            measured_over_s=sizes.idle_s,
            scaled_to_30s=sizes.idle_s != 30.0,
            receivers_at_once=True,
        )
    batches = [[(v, run) for v in VARIANTS] for run in range(sizes.runs)]
    if sizes.parallel:  # every run at once too: each process measures only itself
        batches = [[job for batch in batches for job in batch]]
    for batch in batches:
        jobs = [
            ("idle", {"variant": v, "agents": sizes.idle_agents, "duration_s": sizes.idle_s})
            for v, _ in batch
        ]
        for (variant, _), got in zip(batch, run_jobs(jobs, parallel=True), strict=True):
            if isinstance(got, Exception):
                _failed(results, "idle", keys, variant, got)
                continue
            results.keep_raw("idle", got)
            results.add("idle.cpu_s_per_30s", variant, got["cpu_s_per_30s"])
            results.add("idle.core_pct", variant, got["core_pct"])


# ---------------------------------------------------------------------- 6. demo and bridge


def bench_demo(sizes: Sizes, results: Results) -> None:
    results.params("bridge.spawn_to_ready_ms", agents_per_run=sizes.bridge_agents)
    for _ in range(sizes.runs):
        for key, simulated in (("demo.simulated_wall_s", True), ("demo.process_wall_s", False)):
            wall = demo_wall_time(simulated)
            if isinstance(wall, str):
                results.missing(key, SHEPHERD, wall)
            else:
                results.add(key, SHEPHERD, wall)
        (got,) = run_jobs([("bridge", {"agents": sizes.bridge_agents})], parallel=False)
        key = "bridge.spawn_to_ready_ms"
        if isinstance(got, Exception):
            _failed(results, "demo", [key], SHEPHERD, got)
        elif "unavailable" in got:
            results.missing(key, SHEPHERD, f"unavailable: {got['unavailable']}")
        else:
            results.keep_raw("bridge", got)
            for subject, field in (
                (SHEPHERD, "spawn_to_ready_s"),
                ("python_startup", "python_startup_s"),
                ("import_bridge_modules", "import_bridge_s"),
            ):
                results.add(key, subject, 1000 * statistics.median(got[field]))


# ---------------------------------------------------------------------- 7. requests


def bench_requests(sizes: Sizes, results: Results) -> None:
    """The broker's cost per request after many requests (``bench_lib/requests.py``), next to
    the previous design reproduced in the benchmark and injected into an identical session.
    One design at a time (never side by side: each process times its own broker)."""
    keys = ["requests.open_ms", "requests.round_trip_ms", "requests.held"]
    for key in keys:
        results.params(
            key,
            n=sizes.requests_n,
            window=sizes.requests_window,
            one_request_at_a_time=True,
            baseline=f"{PREVIOUS_DESIGN}: {PREVIOUS_DESIGN_LABEL}",
        )
    designs = [SHEPHERD, PREVIOUS_DESIGN]
    for run in range(sizes.runs):
        order = designs if run % 2 == 0 else designs[::-1]  # neither always goes first
        jobs = [
            (
                "requests",
                {
                    "design": design,
                    "requests": sizes.requests_n,
                    "window": sizes.requests_window,
                    "seed": run,
                },
            )
            for design in order
        ]
        for design, got in zip(order, run_jobs(jobs, parallel=False), strict=True):
            if isinstance(got, Exception):
                _failed(results, "requests", keys, design, got)
                continue
            results.keep_raw("requests", got)
            spoiled = got["late_replies"] or got["refused"] or got["wait_cycles"]
            if spoiled or got["pending_after"]:
                results.error("requests", f"{design}: the load went wrong: {got}")
            for key in keys:
                results.params(
                    key, agents=got["agents"], closed_requests_kept=got["closed_requests_kept"]
                )
            results.add("requests.open_ms", design, got["open_cpu"]["mean_ms"])
            results.add("requests.round_trip_ms", design, got["round_trip"]["mean_ms"])
            results.add("requests.held", design, got["held"])


# ---------------------------------------------------------------------- 8. many children


def bench_children(sizes: Sizes, results: Results) -> None:
    """Round trips to the first, middle and last third of many real children, beside the same
    figures for 10 children in the same run, on whatever kernel limits this machine has
    (``bench_lib/children.py``)."""
    keys = [k for k in FIGURES if k.startswith("children.")]
    for key in keys:
        results.params(
            key, n=sizes.children, rounds_per_child=sizes.children_rounds, baseline_n=BASE_CHILDREN
        )
    for _ in range(sizes.runs):
        params = {
            "base": BASE_CHILDREN,
            "children": sizes.children,
            "rounds": sizes.children_rounds,
        }
        (got,) = run_jobs([("children", params)], parallel=False)
        if isinstance(got, Exception):
            _failed(results, "children", keys, SHEPHERD, got)
            continue
        if "unavailable" in got:
            for key in keys:
                results.missing(key, SHEPHERD, f"unavailable: {got['unavailable']}")
            continue
        results.keep_raw("children", got)
        many, base = got["many"], got["base"]
        for label, one in (("n", many), ("base", base)):
            if one["failed"]:
                results.error("children", f"{label}: {one['failed']} round trips did not complete")
        for part in ("first", "middle", "last"):
            for q in ("p50", "p99"):
                key = f"children.{part}.{q}_ms"
                results.add(key, SHEPHERD, many[part][f"{q}_ms"])
                results.add(key, TEN_CHILDREN, base["all"][f"{q}_ms"])
        for figure in ("start_s", "bridge_private_mb", "bridge_threads", "parent_fds"):
            results.add(f"children.{figure}", SHEPHERD, many[figure])
            results.add(f"children.{figure}", TEN_CHILDREN, base[figure])
        results.add("children.parent_threads", SHEPHERD, many["parent_threads"])
        results.add("children.parent_threads", TEN_CHILDREN, base["parent_threads"])
        results.add("children.inotify_instances", SHEPHERD, many["inotify_instances"])
        polled = many["agent_wake"].get("polling", 0) + many["agent_wake"].get("unreported", 0)
        results.add("children.polled_agents", SHEPHERD, polled)


# ---------------------------------------------------------------------- 9. actor runtime


def bench_runtime(sizes: Sizes, results: Results) -> None:
    """Savina-style workloads on Shepherd's runtime, pykka and Thespian (``bench_lib/savina``).
    One process per (subject, workload, run); the subjects' order turns from run to run."""
    subjects = list(RUNTIME_SUBJECTS)
    try:
        thespian = metadata.version("thespian")
    except metadata.PackageNotFoundError:
        thespian = None
        subjects.remove(THESPIAN)
        print(
            "[bench] runtime: thespian is not installed, so its baseline is left out; "
            "install it with: pip install -e '.[bench]'",
            file=sys.stderr,
        )
    params = {"n": sizes.runtime_n, "ring": 100, "workers": 8}
    for workload in RUNTIME_WORKLOADS:
        key = f"runtime.{workload}.msgs_per_s"
        results.params(key, **params, thespian=thespian or "not installed")
        if thespian is None:
            results.missing(key, THESPIAN, "thespian not installed: pip install -e '.[bench]'")
    for run in range(sizes.runs):
        turn = run % len(subjects)
        order = subjects[turn:] + subjects[:turn]
        jobs: list[tuple[str, dict[str, Any]]] = [
            ("runtime", {**params, "subject": subject, "workload": workload})
            for workload in RUNTIME_WORKLOADS
            for subject in order
        ]
        for (_, job), got in zip(jobs, run_jobs(jobs, parallel=False), strict=True):
            subject, key = job["subject"], f"runtime.{job['workload']}.msgs_per_s"
            if isinstance(got, Exception):
                _failed(results, "runtime", [key], subject, got)
                continue
            results.keep_raw("runtime", got)
            if not got["ok"]:
                results.error("runtime", f"{job['workload']} {subject}: wrong answer: {got}")
                continue
            results.add(key, subject, got["msgs_per_s"])


# ---------------------------------------------------------------------- 10. command line


def bench_cli(sizes: Sizes, results: Results) -> None:
    """``shepherd-child message`` and ``shepherd status`` end to end, each a fresh process,
    beside ``python -c pass`` in the same run (``bench_lib/cli.py``)."""
    keys = [k for k in FIGURES if k.startswith("cli.")]
    for key in keys:
        results.params(key, calls_per_run=sizes.cli_calls, baseline="python -c pass")
    for key in ("cli.status_agents.p50_ms", "cli.status_agents.p99_ms"):
        results.params(key, n=sizes.cli_agents)
    figures = {
        "child_message": "message",
        "status_empty": "status_empty",
        "status_agents": "status_agents",
    }
    for _ in range(sizes.runs):
        params = {"calls": sizes.cli_calls, "agents": sizes.cli_agents}
        (got,) = run_jobs([("cli", params)], parallel=False)
        if isinstance(got, Exception):
            _failed(results, "cli", keys, SHEPHERD, got)
            continue
        if "unavailable" in got:
            for key in keys:
                results.missing(key, SHEPHERD, f"unavailable: {got['unavailable']}")
            continue
        results.keep_raw("cli", got)
        for figure, sample in figures.items():
            for q in ("p50", "p99"):
                results.add(f"cli.{figure}.{q}_ms", SHEPHERD, got[sample][f"{q}_ms"])
                results.add(f"cli.{figure}.{q}_ms", "python_c_pass", got["python"][f"{q}_ms"])
                direct = got[f"{sample}_direct"][f"{q}_ms"]  # the same call, no command socket
                results.add(f"cli.{figure}.{q}_ms", "without_socket", direct)


# ---------------------------------------------------------------------- 11. NATS transport


def bench_nats(sizes: Sizes, results: Results) -> None:
    """The NATS JetStream transport beside the file mailbox (fsync on) in the same worker, and
    the failover time of a 3-server cluster after its stream leader's SIGKILL
    (``bench_lib/nats.py``). The subjects' order turns from run to run."""
    keys = [k for k in FIGURES if k.startswith("nats.")]
    params = {"latency_n": max(sizes.nats_n // 5, 2), "throughput_n": sizes.nats_n}
    for key in keys:
        results.params(key, **params, failover_n=sizes.nats_n)
    for run in range(sizes.runs):
        job = {**params, "failover_n": sizes.nats_n, "turn": run}
        (got,) = run_jobs([("nats", job)], parallel=False)
        if isinstance(got, Exception):
            _failed(results, "nats", keys, SHEPHERD, got)
            continue
        if "unavailable" in got:
            for key in keys:
                results.missing(key, SHEPHERD, f"unavailable: {got['unavailable']}")
            continue
        results.keep_raw("nats", got)
        for subject in ("nats", "file"):
            figures = got[subject]
            if figures["duplicates"]:
                results.error("nats", f"{subject}: {figures['duplicates']} handed over twice")
            for q in ("p50", "p99"):
                results.add(f"nats.delivery.{q}_ms", subject, figures["delivery"][f"{q}_ms"])
            results.add("nats.durable_per_s", subject, figures["durable_per_s"])
        results.add("nats.durable_per_s", "nats-py", got["raw"]["durable_per_s"])
        for q in ("p50", "p99"):
            results.add(f"nats.delivery.{q}_ms", "nats-py", got["raw"]["delivery"][f"{q}_ms"])
        failover = got["failover"]
        if failover["lost"] or failover["duplicates"]:
            results.error(
                "nats", f"failover lost {failover['lost']}, repeated {failover['duplicates']}"
            )
        results.add("nats.failover_s", "nats", failover["failover_s"])


def bench_journal(sizes: Sizes, results: Results) -> None:
    """Durable records per second from 8 callers at once, each answered once its record is
    durable: the journal's writer with group commit beside one record per write, on the file
    journal and on NATS (bench_lib.journal)."""
    callers = 8
    for kind in ("file", "nats"):
        key = f"journal.{kind}.records_per_s"
        results.params(key, callers=callers, records=sizes.journal_n, baseline="one per write")
        for _ in range(sizes.runs):
            for subject, group in ((SHEPHERD, True), ("one_per_write", False)):
                params = {"journal": kind, "group_commit": group, "callers": callers}
                (got,) = run_jobs([("journal", {**params, "n": sizes.journal_n})], parallel=False)
                if isinstance(got, Exception):
                    _failed(results, "journal", [key], subject, got)
                    continue
                results.keep_raw("journal", got)
                results.add(key, subject, got["records_per_s"])


RUNNERS = {
    "delivery": bench_delivery,
    "throughput": bench_throughput,
    "notify": bench_notify,
    "scale": bench_scale,
    "idle": bench_idle,
    "demo": bench_demo,
    "requests": bench_requests,
    "children": bench_children,
    "runtime": bench_runtime,
    "cli": bench_cli,
    "nats": bench_nats,
    "create": bench_create,
    "settle": bench_settle,
    "journal": bench_journal,
}


def _keys_of(names: list[str]) -> list[str]:
    out = []
    for key in FIGURES:
        for name in names:
            prefixes = BENCHMARKS[name]
            if key.startswith(prefixes if isinstance(prefixes, tuple) else (prefixes,)):
                out.append(key)
                break
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, smaller sizes (~1 min)")
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tests only
    parser.add_argument("--out", default="bench-results.json", help="JSON output file")
    parser.add_argument("--runs", type=int, help="runs per figure (default 5, quick 3)")
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(RUNNERS)}")
    args = parser.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = {"smoke": SMOKE, "quick": QUICK, "full": FULL}[mode]
    if args.runs is not None:
        if args.runs < 1:
            parser.error("--runs must be at least 1")
        sizes = replace(sizes, runs=args.runs)
    names = list(RUNNERS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in RUNNERS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(RUNNERS)}")

    started, wall = datetime.now(UTC), time.perf_counter()
    load_before, git_before = os.getloadavg(), git_version()
    if load_before[0] > 0.5 * (os.cpu_count() or 1):
        print(
            f"[bench] warning: the machine is busy (load {load_before[0]:.1f} on "
            f"{os.cpu_count()} cores); figures will be noisy",
            file=sys.stderr,
        )
    compiled = compile_bytecode()
    results = Results()
    loads: dict[str, tuple[float, float, float]] = {}
    for name in names:
        print(f"[bench] {name} ({mode}, {sizes.runs} runs)...", file=sys.stderr, flush=True)
        loads[name] = os.getloadavg()  # the README's rows say how busy the machine was
        mark = time.perf_counter()
        try:
            RUNNERS[name](sizes, results)
        except Exception as exc:  # one broken benchmark must not lose the others' figures
            results.error(name, f"crashed: {exc!r}")
        print(f"[bench] {name}: {time.perf_counter() - mark:.1f} s", file=sys.stderr, flush=True)
    git_after = git_version()
    if git_after != git_before:
        print(
            f"[bench] warning: the checkout changed during the run ({git_before} -> {git_after});"
            " the figures mix two versions",
            file=sys.stderr,
        )
    header = {
        "schema": 1,
        "mode": mode,
        "runs": sizes.runs,
        "sizes": sizes.__dict__,
        "benchmarks": names,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - wall, 1),
        "command": [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])],
        "machine": {
            **machine_facts(memory_base_dir()),
            "loadavg_at_start": load_before,
            "loadavg_at_end": os.getloadavg(),
            "git_at_start": git_before,
            "git_at_end": git_after,
        },
        "versions": versions(),
        "load_at_start_of": loads,
        "bytecode_compiled_first": compiled,
    }
    document = results.document(header, _keys_of(names))
    document["readme_rows"] = readme_rows(document)
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(table(document))
    print(
        f"\nREADME rows (medians of {sizes.runs} runs; load average at start "
        f"{' / '.join(f'{x:.1f}' for x in load_before)}, at end "
        f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} cores):\n"
    )
    print("\n".join(document["readme_rows"]))
    print(f"\n{mode} run, {sizes.runs} runs per figure, {header['duration_s']} s; JSON: {args.out}")
    if results.errors:
        print("\nerrors:\n  " + "\n  ".join(results.errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
