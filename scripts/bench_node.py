#!/usr/bin/env python3
"""Spawn to ready: an agent on a ``shepherd node`` beside one on the parent's host, without and
with NATS credentials, same run.

    python scripts/bench_node.py [--runs N] [--spawns N]

Two sessions over NATS (each its own ``nats-server`` of the ``nats`` extra, ``sync_interval:
always``, on a temporary store), their supervisors in this process, each with one ``shepherd
node`` process on the same machine (its own directory standing for another host): ``plain``
has no credentials; ``auth`` has an authority (``--nats-auth``; the node logs in with
``--nats-creds``, and each child, local or on the node, as its own user minted at its spawn).
Each spawn is a scripted agent that waits; the time is from the ``spawn`` call to the moment
the session sees the agent's process leave ``starting`` (its bridge said ready). The four
kinds of spawn alternate, so a change of the machine's load spreads over all of them; every
agent is closed at the end of its run.
Prints the median of the runs' medians (ms) and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_lib.common import ReadyTap, temp_dir

#: the two sessions of a run: over a server without credentials, and over one with an
#: authority (``serve --nats-auth``: a node with ``--nats-creds``, each child its own user)
MODES = ("plain", "auth")
WHERE = ("local", "node")


def one_run(
    run: int, spawns: int, sessions: dict[str, tuple[Any, ReadyTap]], script: Path
) -> dict[str, float]:
    times: dict[str, list[float]] = {f"{m} {w}": [] for m in MODES for w in WHERE}
    names: list[tuple[str, str]] = []
    for i in range(spawns):
        for mode in MODES:
            sup, tap = sessions[mode]
            for where in WHERE:
                name = f"r{run}-{mode[0]}{where[0]}{i}"
                args = {"name": name, "script": str(script)}
                if where == "node":
                    args["node"] = f"bench-{mode}"
                start = time.perf_counter()
                sup.call("spawn", args)
                times[f"{mode} {where}"].append((tap.ready_at(name, 60) - start) * 1000)
                names.append((mode, name))
    for mode, name in names:
        sessions[mode][0].call("close", {"agent": name})
    return {key: statistics.median(values) for key, values in times.items()}


def start_node(url: str, name: str, root: Path, *extra: str) -> subprocess.Popen[str]:
    node = subprocess.Popen(
        [
            *(sys.executable, "-m", "actors.surfaces.cli", "node", "--json"),
            *("--transport", url, "--name", name, "--dir", str(root), *extra),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert node.stdout is not None
    assert "node" in json.loads(node.stdout.readline()), f"the node {name} did not start"
    return node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spawns", type=int, default=5)
    options = parser.parse_args()

    from actors.session.supervisor import Supervisor
    from actors.transports.nats.auth import Authority, make_authority, write_private
    from actors.transports.nats.server import start_server

    with temp_dir("shepherd-bench-node-") as tmp:
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")
        make_authority(tmp / "auth")
        creds = tmp / "bench-auth.creds"
        write_private(creds, Authority.load(str(tmp / "auth")).node_credentials("bench-auth"))
        servers = {
            "plain": start_server(tmp / "nats"),
            "auth": start_server(tmp / "nats-auth", auth=tmp / "auth"),
        }
        nodes = [
            start_node(servers["plain"].url, "bench-plain", tmp / "host-plain"),
            start_node(
                servers["auth"].url, "bench-auth", tmp / "host-auth", "--nats-creds", str(creds)
            ),
        ]
        sessions: dict[str, tuple[Any, ReadyTap]] = {}
        try:
            script = tmp / "wait.json"
            script.write_text(json.dumps({"steps": [{"await": "any"}]}))
            for mode in MODES:
                tap = ReadyTap()
                auth: dict[str, Any] = {"nats_auth": str(tmp / "auth")} if mode == "auth" else {}
                sup = Supervisor(
                    tmp / f"session-{mode}", tap=tap, transport=servers[mode].url, **auth
                )
                sessions[mode] = (sup, tap)
            one_run(0, 2, sessions, script)  # warm-up: imports, first connections
            medians = [
                one_run(r + 1, options.spawns, sessions, script) for r in range(options.runs)
            ]
        finally:
            for sup, _ in sessions.values():
                sup.shutdown()
            for node in nodes:
                node.terminate()
                node.wait(timeout=30)
            for server in servers.values():
                server.kill()
    print(f"spawn to ready, ms (median of {options.runs} runs' medians of {options.spawns}):")
    for key in medians[0]:
        runs = [m[key] for m in medians]
        each = ", ".join(f"{x:.1f}" for x in runs)
        print(f"  {key:<11} {statistics.median(runs):7.1f}   runs: {each}")


if __name__ == "__main__":
    main()
