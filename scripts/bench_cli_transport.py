#!/usr/bin/env python3
"""Command-line round trips over each transport, side by side in the same run.

    python scripts/bench_cli_transport.py [--runs N] [--calls N]

What a user and an agent's shell pay per call: ``shepherd status --json`` and
``shepherd-child message shepherd TEXT --json`` (start-up, the command socket of ``serve`` or
of the agent's bridge, which opens the session's transport for the call, its answer), each a
fresh process, against one live session over the file
mailbox and one over NATS (a ``nats-server`` of the ``nats`` extra, ``sync_interval: always``,
on a temporary store). Baseline in the same run: ``python -c pass``. The subjects of one round
are interleaved so that a change of the machine's load spreads over all of them. Prints the
median of the runs' medians (ms) of wall and CPU time; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_lib.cli import _command, _round, spawn_quiet_agent
from bench_lib.common import ReadyTap, temp_dir


def one_run(calls: int) -> dict[str, float]:
    from actors.session.supervisor import Supervisor
    from actors.surfaces.forwarded import run_forwarded  # as `shepherd serve` runs it
    from actors.transports.nats.server import start_server

    with temp_dir("shepherd-bench-transport-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "SHEPHERD_SESSION"}
        env["XDG_STATE_HOME"] = os.environ["XDG_STATE_HOME"] = str(tmp / "state")
        server = start_server(tmp / "nats")
        supervisors = []
        try:
            subjects = {"python": ([sys.executable, "-c", "pass"], env)}
            for name, kwargs in (
                ("file", {"mailbox_root": tmp / "mbox"}),
                ("nats", {"transport": server.url}),
            ):
                ready = ReadyTap()
                sup = Supervisor(
                    tmp / f"session-{name}", tap=ready, commands=run_forwarded, **kwargs
                )
                supervisors.append(sup)
                agent_env = spawn_quiet_agent(sup.session, f"a{name}", tmp, ready, 1)
                session = str(tmp / f"session-{name}")
                shepherd = _command("shepherd", "actors.surfaces.entry")
                subjects[f"status_{name}"] = (
                    [*shepherd, "status", "--json", "--session", session],
                    env,
                )
                child = _command("shepherd-child", "actors.child.entry")
                subjects[f"message_{name}"] = (
                    [*child, "message", "--json", "--", "shepherd", "bench"],
                    {**env, **agent_env},
                )
            samples = _round(calls, subjects, tmp)
        finally:
            for sup in supervisors:
                sup.shutdown(keep=False)
            server.kill()
    return {name: statistics.median(values) / 1e6 for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10, help="calls per subject in one run")
    args = parser.parse_args()
    runs = [one_run(args.calls) for _ in range(args.runs)]
    print(f"medians of {args.runs} runs x {args.calls} calls, ms (wall / CPU)")
    for name in [n for n in runs[0] if not n.endswith("_cpu")]:
        wall = statistics.median(run[name] for run in runs)
        cpu = statistics.median(run[f"{name}_cpu"] for run in runs)
        print(f"  {name:16} {wall:8.1f} / {cpu:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
