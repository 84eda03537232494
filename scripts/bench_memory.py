#!/usr/bin/env python3
"""Memory per live watcher and per open task, in a session on the threaded runtime, measured
with tracemalloc.

    python scripts/bench_memory.py [--watchers N] [--tasks N] [--runs R]

- watchers: N ``watch`` calls of one open task (an agent simulated in-process); then the task
  settles and every watcher must be told. Per live watcher: its actor and inbox, its state,
  its subscription and the broker's address of it.
- tasks: N agents (simulated in-process) spawned first, then one task delegated to each. Per
  open task: its actor and inbox, its record and the broker's read model of it, its deadline,
  its journal and note effects' leftovers, the agent's slot, the transport's de-duplication
  window's entries for its envelopes (what the parent is told is counted, not kept); then every
  task is cancelled and every task's actor must be gone.

Prints, per run, the bytes retained per live watcher or task, and the medians. A benchmark,
not a test: it asserts only that every watcher was told and every task's actor stopped.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import InMemoryTransport
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing.simagent import SimLauncher
from protocol.records.notifications import TaskCompletion
from protocol.scripted.script import parse_script

QUIET = {"steps": [{"await": "task"}, {"await": "any"}]}


def one_run(n: int) -> float:
    runtime = ThreadedRuntime(workers=2)
    transport = InMemoryTransport()
    sink = CollectingSink()
    session = Session(runtime, transport, SimLauncher(runtime, transport), sink=sink)
    try:
        agent = session.spawn("worker", script=parse_script(QUIET))
        task_id = session.delegate(agent.agent_id, "work").task_id
        session.status()
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for _ in range(n):
            session.watch(task_id)
        session.status()  # the broker handled every watch: each watcher's actor is started
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        per = sum(d.size_diff for d in after.compare_to(before, "filename")) / n
        session.cancel(task_id, "the benchmark settles it")
        done = threading.Event()

        def all_told() -> bool:
            told = sum(1 for x in sink.items if isinstance(x, TaskCompletion))
            return told >= n

        if not runtime.wait_until(all_told, 120):
            raise SystemExit("not every watcher was told")
        done.set()
        return per
    finally:
        session.shutdown()


def one_task_run(n: int) -> float:
    from actors.session.task_actor import TaskActor

    runtime = ThreadedRuntime(workers=2)
    transport = InMemoryTransport()
    told: list[int] = [0]  # what the parent is told is counted, not kept: it is not the tasks'

    def sink(_: object) -> None:
        told[0] += 1

    session = Session(runtime, transport, SimLauncher(runtime, transport), sink=sink)
    try:
        names = [f"w{i}" for i in range(n)]
        for name in names:
            session.spawn(name, script=parse_script(QUIET))
        session.status()
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        tasks = [session.delegate(name, "work").task_id for name in names]
        session.status()  # every delegation handled: each task's actor is started
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        per = sum(d.size_diff for d in after.compare_to(before, "filename")) / n
        live = sum(1 for a in runtime.actors() if isinstance(a, TaskActor))
        if live != n:
            raise SystemExit(f"{live} task actors for {n} open tasks")
        for task_id in tasks:
            session.cancel(task_id, "the benchmark settles it")

        def all_gone() -> bool:
            return not any(isinstance(a, TaskActor) for a in runtime.actors())

        if not runtime.wait_until(all_gone, 120):
            raise SystemExit("a task's actor outlived its settlement")
        return per
    finally:
        session.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watchers", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not 0 <= args.watchers <= 200_000 or not 0 <= args.tasks <= 50_000:
        parser.error("--watchers from 0 to 200000, --tasks from 0 to 50000")
    if not 1 <= args.runs <= 20:
        parser.error("--runs from 1 to 20")
    for what, n, run in (("watcher", args.watchers, one_run), ("task", args.tasks, one_task_run)):
        if n == 0:
            continue
        got = []
        for i in range(args.runs):
            per = run(n)
            got.append(per)
            print(f"run {i + 1}: {per:.0f} bytes per live {what} ({n} of them)")
        print(f"median: {statistics.median(got):.0f} bytes per live {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
