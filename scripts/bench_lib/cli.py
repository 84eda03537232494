"""Command-line round trips, each a fresh process as a user or an agent's shell starts it:
``shepherd-child message shepherd TEXT --json`` run as an agent of a live session (what a
command agent pays per call: start-up, the bridge's command socket, publish, the parent's
receipt; beside it in the same run the same call without the socket, the whole command line in
the calling process) and ``shepherd status --json`` (start-up, the supervisor's command socket,
the call, every page of the answer; beside it the whole command line in the calling process),
with no agents and with ``agents`` of them. Baseline in the same run: ``python -c pass`` (the
interpreter's start-up, which no command can beat).

One ``Supervisor`` runs in this worker (its threads idle while a command runs; the commands
are other processes). The calls of one run are interleaved (baseline, message, status, ...)
so that a change of the machine's load spreads over every subject alike.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from actors.runtime.command_wire import ENV_COMMAND_SOCKET
from bench_lib.bridge import QUIET_SCRIPT, bridge_missing
from bench_lib.common import ReadyTap, latency_summary, memory_base_dir, temp_dir


def _command(script: str, module: str) -> list[str]:
    """The installed console script next to this interpreter, else ``python -m``."""
    installed = Path(sys.executable).parent / script
    if installed.exists():
        return [str(installed)]
    found = shutil.which(script)
    return [found] if found else [sys.executable, "-m", module]


def _agent_env(dump: Path, timeout_s: float) -> dict[str, str]:
    """The ``SHEPHERD_*`` variables the agent's own commands get (its first step wrote them
    with ``env -0``): what a command agent's shell has, the bridge's command socket included."""
    deadline = time.monotonic() + timeout_s
    while not dump.exists() or not dump.read_bytes().endswith(b"\0"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the agent did not write its environment within {timeout_s} s")
        time.sleep(0.01)  # a benchmark's set-up, not a measurement
    pairs = (item.partition(b"=") for item in dump.read_bytes().split(b"\0") if item)
    return {k.decode(): v.decode() for k, _, v in pairs if k.startswith(b"SHEPHERD_")}


def spawn_quiet_agent(
    session: Any, name: str, tmp: Path, ready: ReadyTap, count: int
) -> dict[str, str]:
    """Spawn a quiet scripted agent whose first step writes its environment, wait for it to be
    the ``count``-th ready, and return the ``SHEPHERD_*`` variables its commands get."""
    dump = tmp / f"{name}.env"
    script = tmp / f"{name}.json"
    script.write_text(json.dumps({"steps": [{"run": f"env -0 > {dump}"}, *QUIET_SCRIPT["steps"]]}))
    session.spawn(name, script=str(script), cwd=str(tmp))
    if not ready.wait_count(count, 60):
        raise RuntimeError(f"agent {name} never got ready within 60 s")
    return _agent_env(dump, 60)


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, int]:
    """(wall, CPU) of one call in ns. The CPU time (user + system of the command's process)
    is kept beside the wall time: on a machine shared with other work the wall time mostly
    measures the wait for a core, the CPU time what the call itself costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter_ns()
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    took = time.perf_counter_ns() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-4:])} exited {done.returncode}: {done.stdout}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return took, int(cpu * 1e9)


def _round(
    calls: int, subjects: dict[str, tuple[list[str], dict[str, str]]], cwd: Path
) -> dict[str, list[int]]:
    """Wall times under each subject's name, CPU times under ``NAME_cpu``."""
    samples: dict[str, list[int]] = {}
    for _ in range(calls):
        for name, (argv, env) in subjects.items():
            wall, cpu = _timed(argv, env, cwd)
            samples.setdefault(name, []).append(wall)
            samples.setdefault(f"{name}_cpu", []).append(cpu)
    return samples


def _merge(into: dict[str, list[int]], more: dict[str, list[int]]) -> None:
    for name, values in more.items():
        into.setdefault(name, []).extend(values)


def cli_job(params: dict[str, Any]) -> dict[str, Any]:
    missing = bridge_missing()
    if missing is not None:
        return {"unavailable": missing}
    calls: int = params["calls"]
    agents: int = params["agents"]
    with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
        base_env = dict(os.environ)
        base_env.pop("SHEPHERD_SESSION", None)
        base_env["XDG_STATE_HOME"] = str(tmp / "state")  # the live-session pointer goes here
        os.environ["XDG_STATE_HOME"] = base_env["XDG_STATE_HOME"]
        from actors.session.supervisor import Supervisor
        from actors.surfaces.forwarded import run_forwarded  # as `shepherd serve` runs it

        script = tmp / "quiet.json"
        script.write_text(json.dumps(QUIET_SCRIPT))
        ready = ReadyTap()
        supervisor = Supervisor(
            tmp / "session", tap=ready, mailbox_root=tmp / "mbox", commands=run_forwarded
        )
        try:
            session = supervisor.session
            python = ([sys.executable, "-c", "pass"], base_env)
            shepherd = _command("shepherd", "actors.surfaces.entry")
            status_args = ["status", "--json", "--session", str(tmp / "session")]
            status = ([*shepherd, *status_args], base_env)
            # the whole command line in the calling process: what `shepherd` was before it
            # handed session operations to the supervisor's command socket
            direct = ([sys.executable, "-m", "actors.surfaces.cli", *status_args], base_env)
            subjects = {"python": python, "status_empty": status, "status_empty_direct": direct}
            samples = _round(calls, subjects, tmp)
            agent_env = {**base_env, **spawn_quiet_agent(session, "a0000", tmp, ready, 1)}
            child = _command("shepherd-child", "actors.child.entry")
            argv = [*child, "message", "--json", "--", "shepherd", "bench"]
            if ENV_COMMAND_SOCKET not in agent_env:
                return {"unavailable": "the agent's environment has no command socket"}
            direct_env = {k: v for k, v in agent_env.items() if k != ENV_COMMAND_SOCKET}
            subjects = {
                "python": python,
                "message": (argv, agent_env),  # through the bridge's command socket
                "message_direct": (argv, direct_env),  # the whole command line in the call
            }
            _merge(samples, _round(calls, subjects, tmp))
            started = time.perf_counter()
            for i in range(1, agents):
                session.spawn(f"a{i:04d}", script=str(script), cwd=str(tmp))
            if not ready.wait_count(agents, 60 + 2 * agents):
                return {"unavailable": f"only {len(ready.ready)} of {agents} agents got ready"}
            spawn_s = time.perf_counter() - started
            subjects = {"python": python, "status_agents": status, "status_agents_direct": direct}
            _merge(samples, _round(calls, subjects, tmp))
        finally:
            supervisor.shutdown(keep=False)
    return {
        "calls": calls,
        "agents": agents,
        "spawn_s": spawn_s,
        **{name: latency_summary(values) for name, values in samples.items()},
    }
