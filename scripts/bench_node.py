#!/usr/bin/env python3
"""Spawn to ready: an agent on a ``shepherd node`` beside one on the parent's host, same run.

    python scripts/bench_node.py [--runs N] [--spawns N]

One session over NATS (a ``nats-server`` of the ``nats`` extra, ``sync_interval: always``, on a
temporary store), its supervisor in this process, and one ``shepherd node`` process on the
same machine (its own directory standing for another host). Each spawn is a scripted agent
that waits; the time is from the ``spawn`` call to the moment the session sees the agent's
process leave ``starting`` (its bridge said ready). Local and node spawns alternate, so a
change of the machine's load spreads over both; every agent is closed at the end of its run.
Prints the median of the runs' medians (ms) and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_lib.common import temp_dir


class ReadyAt:
    """The broker's story tap: when each agent's process left ``starting``."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._cond = threading.Condition()

    def __call__(self, line: str) -> None:
        name, _, rest = line.partition(": ")
        if rest.startswith("process ") and rest != "process starting":
            with self._cond:
                self.at.setdefault(name, time.perf_counter())
                self._cond.notify_all()

    def wait(self, name: str, timeout_s: float) -> float:
        with self._cond:
            if not self._cond.wait_for(lambda: name in self.at, timeout_s):
                raise TimeoutError(f"{name} never became ready")
            return self.at[name]


def one_run(run: int, spawns: int, sup: object, tap: ReadyAt, script: Path) -> dict[str, float]:
    times: dict[str, list[float]] = {"local": [], "node": []}
    names = []
    for i in range(spawns):
        for where in ("local", "node"):
            name = f"r{run}-{where[0]}{i}"
            args = {"name": name, "script": str(script)}
            if where == "node":
                args["node"] = "bench"
            start = time.perf_counter()
            sup.call("spawn", args)  # type: ignore[attr-defined]
            times[where].append((tap.wait(name, 60) - start) * 1000)
            names.append(name)
    for name in names:
        sup.call("close", {"agent": name})  # type: ignore[attr-defined]
    return {where: statistics.median(values) for where, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spawns", type=int, default=5)
    options = parser.parse_args()

    from actors.nats.server import start_server
    from actors.session.supervisor import Supervisor

    with temp_dir("shepherd-bench-node-") as tmp:
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")
        server = start_server(tmp / "nats")
        node = subprocess.Popen(
            [
                *(sys.executable, "-m", "actors.surfaces.cli", "node", "--json"),
                *("--transport", server.url, "--name", "bench", "--dir", str(tmp / "host-b")),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert node.stdout is not None
            assert "node" in json.loads(node.stdout.readline()), "the node did not start"
            script = tmp / "wait.json"
            script.write_text(json.dumps({"steps": [{"await": "any"}]}))
            tap = ReadyAt()
            sup = Supervisor(tmp / "session", tap=tap, transport=server.url)
            try:
                one_run(0, 2, sup, tap, script)  # warm-up: imports, first connections
                medians = [
                    one_run(r + 1, options.spawns, sup, tap, script) for r in range(options.runs)
                ]
            finally:
                sup.shutdown()
        finally:
            node.terminate()
            node.wait(timeout=30)
            server.kill()
    print(f"spawn to ready, ms (median of {options.runs} runs' medians of {options.spawns}):")
    for where in ("local", "node"):
        runs = [m[where] for m in medians]
        each = ", ".join(f"{x:.1f}" for x in runs)
        print(f"  {where:<6} {statistics.median(runs):7.1f}   runs: {each}")


if __name__ == "__main__":
    main()
