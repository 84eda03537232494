"""The figures: what each one is, its unit and target (issue 7, part 2), the runs collected for
it, and the two outputs — the JSON document and the printed table."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

Better = Literal["lower", "higher"]
THREAD_BUDGET = 2 * (os.cpu_count() or 1) + 16


@dataclass(frozen=True)
class Figure:
    unit: str
    better: Better
    description: str
    target: float | None = None  # the bound (≤ for lower, ≥ for higher)


def _delivery(phase: str, q: str, target: float) -> Figure:
    gaps = "one envelope every 50-150 ms" if phase == "idle" else "one every 0-10 ms"
    return Figure(
        "ms",
        "lower",
        f"{q} latency, publish in another process -> actor on the parent ({gaps})",
        target,
    )


def _notify(rate: int, q: str) -> Figure:
    return Figure(
        "ms",
        "lower",
        f"{q} task_done handed to the transport -> TaskCompletion at the sink, {rate}/s "
        "(includes the 25 ms coalescing window)",
        30.0 if rate == 1000 and q == "p99" else None,
    )


def _scale(point: str) -> dict[str, Figure]:
    what = "1,000 agents" if point == "agents" else "10,000 live tasks"
    final = point == "tasks"
    return {
        f"scale.{point}.start_s": Figure(
            "s",
            "lower",
            f"{what}, each with a task and a watcher: time to create them all",
            1.0 if final else None,
        ),
        f"scale.{point}.kb_per_actor": Figure(
            "KB", "lower", f"{what}: RSS growth / actors created", 8.0 if final else None
        ),
        f"scale.{point}.os_threads": Figure(
            "threads",
            "lower",
            f"{what}: OS threads of the process",
            THREAD_BUDGET if final else None,
        ),
        f"scale.{point}.notify_p50_ms": Figure(
            "ms", "lower", f"{what}: p50 done -> notification when all settle at once"
        ),
        f"scale.{point}.notify_p99_ms": Figure(
            "ms", "lower", f"{what}: p99 done -> notification when all settle at once"
        ),
    }


FIGURES: dict[str, Figure] = {
    "delivery.idle.p50_ms": _delivery("idle", "p50", 3.0),
    "delivery.idle.p99_ms": _delivery("idle", "p99", 10.0),
    "delivery.burst.p50_ms": _delivery("burst", "p50", 3.0),
    "delivery.burst.p99_ms": _delivery("burst", "p99", 10.0),
    "throughput.1to1.envelopes_per_s": Figure(
        "env/s", "higher", "1 producer process -> 1 consumer, whole stack", 20000.0
    ),
    "throughput.1to1.lost": Figure(
        "envelopes", "lower", "1 -> 1: published - delivered + duplicates (must be 0)", 0.0
    ),
    "throughput.8to1.envelopes_per_s": Figure(
        "env/s", "higher", "8 producer processes -> 1 consumer, whole stack", 20000.0
    ),
    "throughput.8to1.lost": Figure(
        "envelopes", "lower", "8 -> 1: published - delivered + duplicates (must be 0)", 0.0
    ),
    **{
        f"notify.rate_{rate}.{q}_ms": _notify(rate, q)
        for rate in (1, 100, 1000)
        for q in ("p50", "p99")
    },
    **_scale("agents"),
    **_scale("tasks"),
    "idle.cpu_s_per_30s": Figure(
        "CPU-s",
        "lower",
        "CPU seconds per 30 s, parent watching 100 idle agent inboxes + its own",
        0.3,
    ),
    "idle.core_pct": Figure("% core", "lower", "the same, as a share of one core", 1.0),
    "demo.simulated_wall_s": Figure("s", "lower", "`shepherd demo --simulated`, wall time"),
    "demo.process_wall_s": Figure("s", "lower", "`shepherd demo` (real child processes), wall"),
    "bridge.spawn_to_ready_ms": Figure(
        "ms", "lower", "Supervisor spawn -> agent process state leaves 'starting'", 300.0
    ),
    "requests.open_ms": Figure(
        "ms",
        "lower",
        "broker CPU time handling one question with expects_reply (request opened and checked "
        "for a wait cycle, question forwarded, receipt sent), mean over the last `window` "
        "(1,000) of n requests; 20 agents, one request at a time. previous_design: "
        "wait-for graph rebuilt from every request, closed requests kept forever",
    ),
    "requests.round_trip_ms": Figure(
        "ms",
        "lower",
        "question published as an agent -> its reply handed to the asker's inbox (the target "
        "answers at once), one request at a time, mean over the last `window` of n requests",
    ),
    "requests.held": Figure(
        "requests",
        "lower",
        "len(broker.requests) after n requests, every one closed (memory held)",
    ),
    **{
        f"children.{part}.{q}_ms": Figure(
            "ms",
            "lower",
            f"{q} round trip delegate -> the scripted child's done -> completion (25 ms "
            f"coalescing included), {part} third of n real children on default kernel limits "
            "(baseline: all of a 10-child session, same run)",
            300.0 if q == "p99" else None,
        )
        for part in ("first", "middle", "last")
        for q in ("p50", "p99")
    },
    "children.start_s": Figure(
        "s", "lower", "n children: first spawn -> the last one ready (baseline: 10 children)"
    ),
    "children.bridge_private_mb": Figure(
        "MB",
        "lower",
        "median private dirty memory of one bridge (what each more agent costs; shared pages "
        "of the interpreter count once)",
    ),
    "children.bridge_threads": Figure("threads", "lower", "most OS threads of one bridge"),
    "children.parent_fds": Figure(
        "descriptors",
        "lower",
        "open descriptors of the parent with n children (one pidfd each; the parent raises "
        "its soft limit, often 1,024, towards the hard one)",
    ),
    "children.parent_threads": Figure(
        "threads", "lower", "OS threads of the parent with n children (baseline: 10 children)"
    ),
    "children.inotify_instances": Figure(
        "instances",
        "lower",
        "inotify instances held by the session's processes with n children (previous design: "
        "one per process, n + 1; the user's budget is fs.inotify.max_user_instances, 128)",
    ),
    "children.polled_agents": Figure(
        "agents", "lower", "agents whose inbox `status` shows as only polled (must be 0)", 0.0
    ),
    **{
        f"cli.{call}.{q}_ms": Figure(
            "ms",
            "lower",
            f"{q} of {what}, a fresh process each, start to exit",
            target if q == "p50" else None,
        )
        for call, what, target in (
            (
                "child_message",
                "`shepherd-child message shepherd TEXT --json` run as an agent (receipt included)",
                120.0,
            ),
            ("status_empty", "`shepherd status --json` of a session with no agents", 150.0),
            ("status_agents", "`shepherd status --json` of a session with n agents", 300.0),
        )
        for q in ("p50", "p99")
    },
    **{
        f"runtime.{workload}.msgs_per_s": Figure(
            "msgs/s",
            "higher",
            f"Savina-style {what}, messages handled per second on the actor runtime (goal: "
            "at least 2x pykka's ThreadingActor and ahead of Thespian's simpleSystemBase)",
        )
        for workload, what in (
            ("ping_pong", "ping-pong: two actors, n round trips"),
            ("thread_ring", "thread ring: a token passed n times round a ring of 100 actors"),
            ("fork_join", "fork-join: one actor fans n messages out to 8 workers, joins answers"),
            ("counting", "counting: one producer tells a counter n times, then asks the count"),
        )
    },
    **{
        f"nats.delivery.{q}_ms": Figure(
            "ms",
            "lower",
            f"{q} publish -> handler, one envelope at a time, durable (JetStream sync_interval "
            "always; the file mailbox with fsync), publisher and receiver in one process",
            target,
        )
        for q, target in (("p50", 2.0), ("p99", 10.0))
    },
    "nats.durable_per_s": Figure(
        "env/s",
        "higher",
        "envelopes published one after another, each durable before publish returns, until "
        "the receiver handled the last",
        1500.0,
    ),
    "nats.failover_s": Figure(
        "s",
        "lower",
        "3 servers, R3 stream: SIGKILL of the stream leader -> the next publish accepted "
        "(nothing accepted lost or handed over twice)",
        10.0,
    ),
}

FIGURES.update(
    {
        "create.tasks.create_s": Figure(
            "s",
            "lower",
            "n tasks, each watched, created in a session whose n agents are up, wall time "
            "(shepherd: delegate_many of 100 with watch; one_by_one: delegate + watch per task)",
            1.0,
        ),
        "create.tasks.cpu_s": Figure(
            "s", "lower", "the same, CPU time of the process (its simulated agents included)"
        ),
        **{
            f"settle.n_{n}.{q}_ms": Figure(
                "ms",
                "lower",
                f"{q} done -> notification, {n:,} watched tasks settling at once in a durable "
                "session (fsync'd journal file, batched receiving; includes the 25 ms window)",
                50.0 if q == "p99" else 30.0,
            )
            for n in (50, 1000, 10000)
            for q in ("p50", "p99")
        },
        **{
            f"settle.n_{n}.first_ms": Figure(
                "ms",
                "lower",
                f"the first of {n:,} watched tasks settling at once told to the parent: its "
                "batch of done envelopes durable, then its watcher's 25 ms window (no task of "
                "the n is told sooner, so the p50 is never below it)",
            )
            for n in (50, 1000, 10000)
        },
        **{
            f"journal.{kind}.records_per_s": Figure(
                "records/s",
                "higher",
                f"durable records per second on the {what}, 8 callers at once, each answered once "
                "its record is durable (group commit; baseline: one record per write)",
                target,
            )
            for kind, what, target in (
                ("file", "file journal (fsync)", None),
                ("nats", "NATS journal (one server, sync_interval always)", 1500.0),
            )
        },
    }
)

BENCHMARKS = {
    "delivery": "delivery.",
    "throughput": "throughput.",
    "notify": "notify.",
    "scale": "scale.",
    "idle": "idle.",
    "demo": ("demo.", "bridge."),
    "requests": "requests.",
    "children": "children.",
    "runtime": "runtime.",
    "cli": "cli.",
    "nats": "nats.",
    "create": "create.",
    "settle": "settle.",
    "journal": "journal.",
}

SHEPHERD = "shepherd"
#: the baseline of the ``requests`` figures, reproduced in ``bench_lib/requests.py`` only
PREVIOUS_DESIGN = "previous_design"
PREVIOUS_DESIGN_LABEL = (
    "previous design: graph rebuilt from every request, closed requests kept forever"
)


@dataclass
class Collected:
    values: dict[str, list[float]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # subject -> why there is no value
    params: dict[str, Any] = field(default_factory=dict)


class Results:
    def __init__(self) -> None:
        self.figures: dict[str, Collected] = {}
        self.errors: list[str] = []
        self.raw: dict[str, list[Any]] = {}

    def _get(self, key: str) -> Collected:
        if key not in FIGURES:
            raise KeyError(f"unknown figure {key!r}")
        return self.figures.setdefault(key, Collected())

    def add(self, key: str, subject: str, value: float) -> None:
        self._get(key).values.setdefault(subject, []).append(float(value))

    def missing(self, key: str, subject: str, why: str) -> None:
        self._get(key).problems.setdefault(subject, why)

    def params(self, key: str, **params: Any) -> None:
        self._get(key).params.update(params)

    def error(self, benchmark: str, message: str) -> None:
        self.errors.append(f"{benchmark}: {message}")

    def keep_raw(self, benchmark: str, item: Any) -> None:
        self.raw.setdefault(benchmark, []).append(item)

    # ------------------------------------------------------------------ output

    def figure_json(self, key: str) -> dict[str, Any]:
        meta = FIGURES[key]
        got = self.figures.get(key, Collected())
        subjects: dict[str, Any] = {}
        for subject, values in got.values.items():
            subjects[subject] = {
                "min": min(values),
                "median": statistics.median(values),
                "max": max(values),
                "runs": len(values),
                "values": values,
            }
        for subject, why in got.problems.items():
            if subject not in subjects:
                subjects[subject] = {"unavailable": why}
        out: dict[str, Any] = {
            "unit": meta.unit,
            "better": meta.better,
            "description": meta.description,
            "target": meta.target,
            "runs": max((len(v) for v in got.values.values()), default=0),
            "params": got.params,
            "subjects": subjects,
        }
        mine = median_of(subjects.get(SHEPHERD))
        if mine is not None:
            out["ratios_vs_shepherd"] = {
                s: _advantage(meta.better, mine, m)
                for s in subjects
                if s != SHEPHERD and (m := median_of(subjects[s])) is not None
            }
            if meta.target is not None:
                out["target_met"] = (
                    mine <= meta.target if meta.better == "lower" else mine >= meta.target
                )
        return out

    def document(self, header: dict[str, Any], keys: list[str]) -> dict[str, Any]:
        return {
            **header,
            "figures": {key: self.figure_json(key) for key in keys},
            "errors": self.errors,
            "raw": self.raw,
        }


def median_of(subject: dict[str, Any] | None) -> float | None:
    if not subject or "median" not in subject:
        return None
    value = subject["median"]
    return float(value)


def _advantage(better: Better, mine: float, theirs: float) -> float | None:
    """How many times better Shepherd's median is than the baseline's (> 1: Shepherd wins)."""
    if better == "lower":
        return theirs / mine if mine > 0 else None
    return mine / theirs if theirs > 0 else None


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(document: dict[str, Any]) -> str:
    """The readable table: figure, target, Shepherd's median, each baseline's median and how
    many times better Shepherd is than it (x > 1: Shepherd better)."""
    rows = [("figure", "unit", "target", "shepherd", "baselines: median (shepherd advantage)")]
    for key, fig in document["figures"].items():
        subjects = fig["subjects"]
        mine = subjects.get(SHEPHERD, {})
        if "median" in mine:
            met = fig.get("target_met")
            shown = _num(mine["median"]) + ("" if met is None else (" ok" if met else " MISS"))
        else:
            shown = "n/a"
        target = ""
        if fig["target"] is not None:
            target = ("<= " if fig["better"] == "lower" else ">= ") + _num(fig["target"])
        parts = []
        for subject, stats in subjects.items():
            if subject == SHEPHERD:
                continue
            if "median" in stats:
                ratio = fig.get("ratios_vs_shepherd", {}).get(subject)
                parts.append(
                    f"{subject} {_num(stats['median'])}"
                    + (f" ({_num(ratio)}x)" if ratio is not None else "")
                )
            else:
                parts.append(f"{subject} n/a")
        label = key + (f" [n={fig['params']['n']}]" if "n" in fig["params"] else "")
        rows.append((label, fig["unit"], target, shown, " | ".join(parts)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
        + "  "
        + row[4]
        for row in rows
    ]
    lines.insert(1, "-" * min(160, max(len(line) for line in lines)))
    notes = [
        f"  {key}: {subject}: {stats['unavailable']}"
        for key, fig in document["figures"].items()
        for subject, stats in fig["subjects"].items()
        if "unavailable" in stats
    ]
    if notes:
        lines += ["", "unavailable:", *notes]
    return "\n".join(lines)
