"""The README's performance table, written from one run's JSON document: one row per line of
the README's table (``| figure | Shepherd | baselines |``), each figure as the median of the
run's runs, each baseline's median beside it (measured in the same run), and the machine's
1-minute load average when that benchmark started. The final re-measure of the README is then
one command (``python scripts/bench.py``) and a copy of these rows."""

from __future__ import annotations

from typing import Any

from bench_lib.report import SHEPHERD, median_of

#: (the row's label, the figures it shows, in order); a row is printed when any figure was run
ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "delivery child → parent actor, idle p50 / p99",
        ("delivery.idle.p50_ms", "delivery.idle.p99_ms"),
    ),
    (
        "delivery under a burst, p50 / p99",
        ("delivery.burst.p50_ms", "delivery.burst.p99_ms"),
    ),
    (
        "throughput through the whole stack, 1→1 / 8→1 (nothing lost)",
        ("throughput.1to1.envelopes_per_s", "throughput.8to1.envelopes_per_s"),
    ),
    (
        "completion notification at 1 / 100 / 1000 settlements/s, p99 (25 ms window included)",
        ("notify.rate_1.p99_ms", "notify.rate_100.p99_ms", "notify.rate_1000.p99_ms"),
    ),
    (
        "{n} agents, a task and a watcher each: create all / notification p50 / p99 when all "
        "settle at once",
        ("scale.agents.start_s", "scale.agents.notify_p50_ms", "scale.agents.notify_p99_ms"),
    ),
    (
        "{n} tasks + watchers: create all / memory per actor / threads",
        ("scale.tasks.start_s", "scale.tasks.kb_per_actor", "scale.tasks.os_threads"),
    ),
    ("idle: 100 idle inboxes, CPU over 30 s", ("idle.cpu_s_per_30s",)),
    (
        "opening a request after {n} requests (broker CPU per question) / requests held",
        ("requests.open_ms", "requests.held"),
    ),
    ("question → reply handed back, after {n} requests", ("requests.round_trip_ms",)),
    ("child bridge spawn → ready", ("bridge.spawn_to_ready_ms",)),
    (
        "`shepherd demo` wall time, processes / simulated",
        ("demo.process_wall_s", "demo.simulated_wall_s"),
    ),
    (
        "{n} real children on default limits: round trip delegate → done → completion, p50 / "
        "p99, first / middle / last third",
        tuple(f"children.{p}.{q}_ms" for p in ("first", "middle", "last") for q in ("p50", "p99")),
    ),
    (
        "{n} real children: first spawn → last ready / private memory per bridge / threads per "
        "bridge / parent's descriptors / parent's threads",
        (
            "children.start_s",
            "children.bridge_private_mb",
            "children.bridge_threads",
            "children.parent_fds",
            "children.parent_threads",
        ),
    ),
    (
        "{n} real children: inotify instances in the session / agents polled",
        ("children.inotify_instances", "children.polled_agents"),
    ),
    (
        "a command-line call, fresh process, p50: `shepherd-child message` / `shepherd status` "
        "with 0 / 150 agents",
        ("cli.child_message.p50_ms", "cli.status_empty.p50_ms", "cli.status_agents.p50_ms"),
    ),
    (
        "the same calls, p99",
        ("cli.child_message.p99_ms", "cli.status_empty.p99_ms", "cli.status_agents.p99_ms"),
    ),
    (
        "actor runtime, Savina-style, msgs/s: ping-pong / thread ring (100 actors) / fork-join "
        "(8 workers) / counting",
        tuple(
            f"runtime.{w}.msgs_per_s" for w in ("ping_pong", "thread_ring", "fork_join", "counting")
        ),
    ),
)


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if float(value).is_integer() and abs(value) < 10000:  # counts: threads, descriptors
        return f"{int(value):,}"
    if abs(value) >= 10000:
        return f"{value / 1000:.1f}k"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _values(figures: dict[str, Any], keys: tuple[str, ...], subject: str) -> str | None:
    """``a / b / c unit`` (a unit after each value when they differ), or None if the subject
    has no figure of the row; a figure it lacks shows as ``n/a``."""
    shown: list[tuple[str, str]] = []
    for key in keys:
        figure = figures.get(key, {"subjects": {}, "unit": ""})
        value = median_of(figure["subjects"].get(subject))
        shown.append(("n/a" if value is None else _num(value), figure["unit"]))
    if all(text == "n/a" for text, _ in shown):
        return None
    units = {unit for text, unit in shown if text != "n/a"}
    if len(units) == 1:
        return " / ".join(text for text, _ in shown) + f" {units.pop()}"
    return " / ".join(text if text == "n/a" else f"{text} {unit}" for text, unit in shown)


def readme_rows(document: dict[str, Any]) -> list[str]:
    """The README's rows for what this run measured: Shepherd's medians, each baseline's
    medians and the load when the benchmark started."""
    figures: dict[str, Any] = document["figures"]
    loads: dict[str, list[float]] = document.get("load_at_start_of", {})
    runs = document.get("runs")
    rows = ["| figure | Shepherd | baselines (same run) |", "|---|---|---|"]
    for label, keys in ROWS:
        present = [key for key in keys if key in figures]
        if not present:
            continue
        ours = _values(figures, keys, SHEPHERD)
        params = figures[present[0]]["params"]
        text = label.format(n=f"{params['n']:,}" if "n" in params else "n")
        subjects = sorted({s for key in present for s in figures[key]["subjects"]} - {SHEPHERD})
        baselines = [
            f"{subject}: {shown}"
            for subject in subjects
            if (shown := _values(figures, keys, subject)) is not None
        ]
        benchmark = present[0].split(".")[0]
        load = loads.get("demo" if benchmark == "bridge" else benchmark)
        notes = f"medians of {runs}" + (f", load {load[0]:.1f}" if load else "")
        rows.append(f"| {text} ({notes}) | {ours or 'n/a'} | {'; '.join(baselines)} |")
    return rows
