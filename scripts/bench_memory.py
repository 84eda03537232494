#!/usr/bin/env python3
"""Memory per live watcher: N ``watch`` calls in a session on the threaded runtime (an agent
simulated in-process, its task open), measured with tracemalloc, then the task settles and
every watcher's actor must be gone.

    python scripts/bench_memory.py [--watchers N] [--runs R]

Prints, per run, the bytes retained per live watcher (its actor and inbox, its state, its
subscription and the broker's address of it), and the median. A benchmark, not a test: it
asserts only that every watcher was delivered to and stopped.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watchers", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not 1 <= args.watchers <= 200_000 or not 1 <= args.runs <= 20:
        parser.error("--watchers from 1 to 200000, --runs from 1 to 20")
    got = []
    for i in range(args.runs):
        per = one_run(args.watchers)
        got.append(per)
        print(f"run {i + 1}: {per:.0f} bytes per live watcher ({args.watchers} watchers)")
    print(f"median: {statistics.median(got):.0f} bytes per live watcher")
    return 0


if __name__ == "__main__":
    sys.exit(main())
