#!/usr/bin/env python3
"""What ``spawn --sandbox`` costs: a sandboxed agent beside an unsandboxed one, same run.

    python scripts/bench_sandbox.py [--runs N] [--spawns N] [--procs N]

Three figures, each sandboxed and plain, in alternating order so a change of the machine's
load falls on both:

- **process start**: ``bash -c true`` started and reaped directly, and through an agent's
  sandbox (:meth:`actors.child.sandbox.Sandbox.wrap`: bubblewrap, the ``/tmp`` bound, the
  capabilities dropped, the pids group joined), ``--procs`` times per run;
- **spawn to ready**: a ``command`` agent, from the ``spawn`` call to the moment the session
  sees its bridge ready (the sandbox is made by the bridge before its adapter starts: its
  pids group, its socket, one check of bubblewrap);
- **a turn**: ``delegate`` to the task's completion, the turn's process saying ``done`` at
  once (through the sandbox's socket, for the sandboxed one).

A supervisor in this process (state in a temporary directory). Prints the median of the runs'
medians (ms) and sandboxed/plain, and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_lib.common import ReadyTap, temp_dir

MODES = ("plain", "sandbox")


def process_starts(root: Path, procs: int) -> dict[str, float]:
    """Median ms to start and reap ``bash -c true``, directly and sandboxed."""
    from actors.child.sandbox import Sandbox
    from protocol.records.sandbox import SandboxView

    box = Sandbox(
        SandboxView(),
        environ={"PATH": "/usr/bin:/bin"},
        cwd=str(root),
        agent_dir=root / "agent",
        hidden=[],
        runner=None,
        name=f"shepherd-bench-{time.monotonic_ns()}",
    )
    box.start()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for i in range(procs):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                argv, env = ["bash", "-c", "true"], {"PATH": "/usr/bin:/bin"}
                if mode == "sandbox":
                    argv, env = box.wrap(argv, env)
                start = time.perf_counter()
                subprocess.run(argv, env=env, cwd=root, check=True)
                times[mode].append((time.perf_counter() - start) * 1000)
    finally:
        box.close()
    return {mode: statistics.median(values) for mode, values in times.items()}


def agent_figures(
    sup: Any, sink: Any, tap: ReadyTap, work: Path, run: int, spawns: int
) -> dict[str, dict[str, float]]:
    ready: dict[str, list[float]] = {mode: [] for mode in MODES}
    turn: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(spawns):
        for mode in MODES if (run + i) % 2 == 0 else MODES[::-1]:
            name = f"r{run}{mode[0]}{i}"
            args = {"name": name, "adapter": "command", "cwd": str(work)}
            args["cmd"] = "shepherd-child done --status completed --summary ok # {message}"
            start = time.perf_counter()
            sup.call("spawn", {**args, **({"sandbox": True} if mode == "sandbox" else {})})
            ready[mode].append((tap.ready_at(name) - start) * 1000)
            start = time.perf_counter()
            task_id = sup.call("delegate", {"target": name, "task": "go"}).task_id
            sup.call("watch", {"ids": [task_id]})
            done = sink.wait_for(
                lambda items, t=task_id: any(
                    r.task_id == t for n in items for r in getattr(n, "results", ())
                ),
                timeout=60,
            )
            if not done:
                raise TimeoutError(f"{name}'s task did not complete")
            turn[mode].append((time.perf_counter() - start) * 1000)
            sup.call("close", {"agent": name})
    return {
        "spawn to ready": {m: statistics.median(v) for m, v in ready.items()},
        "a turn (delegate to done)": {m: statistics.median(v) for m, v in turn.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spawns", type=int, default=4)
    parser.add_argument("--procs", type=int, default=40)
    options = parser.parse_args()

    import os

    from actors.session.sinks import CollectingSink
    from actors.session.supervisor import Supervisor

    with temp_dir("shepherd-bench-sandbox-") as tmp:
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")
        work = tmp / "work"
        work.mkdir()
        sink, tap = CollectingSink(), ReadyTap()
        sup = Supervisor(tmp / "session", sinks=[sink], mailbox_root=tmp / "mailbox", tap=tap)
        figures: dict[str, dict[str, list[float]]] = {}
        try:
            for run in range(options.runs):
                found = {"process start": process_starts(work, options.procs)}
                found.update(agent_figures(sup, sink, tap, work, run, options.spawns))
                for figure, medians in found.items():
                    for mode, value in medians.items():
                        figures.setdefault(figure, {}).setdefault(mode, []).append(value)
        finally:
            sup.shutdown()
    print(f"{'figure':<28} {'plain ms':>10} {'sandbox ms':>11} {'sandbox/plain':>14}")
    for figure, runs in figures.items():
        plain, boxed = (statistics.median(runs[m]) for m in MODES)
        print(f"{figure:<28} {plain:>10.1f} {boxed:>11.1f} {boxed / plain:>14.2f}")
    print(f"(medians of {options.runs} runs' medians)")


if __name__ == "__main__":
    main()
