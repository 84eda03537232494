"""Real processes: the child bridge's spawn-to-ready time and ``shepherd demo`` wall time.

Both need the child bridge (``shepherd-child run``, module ``actors.child.cli``). When it is not
installed the figures say ``unavailable: <reason>`` instead of failing the whole run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_lib.common import ReadyTap, memory_base_dir, temp_dir

BRIDGE_MODULE = "actors.child.cli"
QUIET_SCRIPT = {"steps": [{"await": "task"}, {"await": "any"}]}


def bridge_missing() -> str | None:
    """Why the child bridge cannot run here, or None if it can."""
    try:
        found = importlib.util.find_spec(BRIDGE_MODULE) is not None
    except ImportError as exc:
        return f"cannot look for {BRIDGE_MODULE}: {exc}"
    if not found:
        return f"the child bridge ({BRIDGE_MODULE}, `shepherd-child run`) is not installed"
    return None


def _time_command(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - start


def bridge_job(params: dict[str, Any]) -> dict[str, Any]:
    """Spawn ``agents`` scripted agents one after another in a real ``Supervisor``; for each,
    the time from ``spawn`` to its process state leaving ``starting`` (the bridge said ready).
    Baselines: a bare interpreter (``python -c pass``) and importing the bridge's modules."""
    missing = bridge_missing()
    if missing is not None:
        return {"unavailable": missing}
    with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")  # the live-session pointer goes here
        from actors.session.supervisor import Supervisor

        script = tmp / "quiet.json"
        script.write_text(json.dumps(QUIET_SCRIPT))
        tap = ReadyTap()
        supervisor = Supervisor(tmp / "session", tap=tap, mailbox_root=tmp / "mbox")
        samples: list[float] = []
        try:
            for i in range(params["agents"]):
                name = f"bridge{i}"
                start = time.perf_counter()
                supervisor.session.spawn(name, script=str(script), cwd=str(tmp))
                ready = tap.wait(name, 60)
                if ready is None:
                    return {"unavailable": f"agent {name} never left 'starting' within 60 s"}
                samples.append(ready - start)
        finally:
            supervisor.shutdown(keep=False)
    python = [sys.executable, "-c", "pass"]
    imports = [sys.executable, "-c", f"import {BRIDGE_MODULE}"]
    return {
        "spawn_to_ready_s": samples,
        "python_startup_s": [_time_command(python) for _ in samples],
        "import_bridge_s": [_time_command(imports) for _ in samples],
    }


def shepherd_command() -> list[str]:
    installed = Path(sys.executable).parent / "shepherd"
    if installed.exists():
        return [str(installed)]
    found = shutil.which("shepherd")
    return [found] if found else [sys.executable, "-m", "actors.surfaces.cli"]


def demo_wall_time(simulated: bool, timeout_s: float = 120.0) -> float | str:
    """Wall time of one ``shepherd demo [--simulated]`` (seconds), or why it is unavailable.

    Runs with its state, temp and runtime directories inside a temporary directory of ours, so
    nothing it leaves behind outlives the benchmark."""
    if not simulated:
        missing = bridge_missing()
        if missing is not None:
            return f"unavailable: {missing}"
    argv = [*shepherd_command(), "demo", *(["--simulated"] if simulated else [])]
    with temp_dir("shepherd-bench-demo-", memory_base_dir()) as tmp:
        for sub in ("state", "tmp", "run"):
            (tmp / sub).mkdir(mode=0o700)
        env = dict(os.environ)
        env.update(
            XDG_STATE_HOME=str(tmp / "state"),
            TMPDIR=str(tmp / "tmp"),
            XDG_RUNTIME_DIR=str(tmp / "run"),
        )
        start = time.perf_counter()
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return f"unavailable: `{' '.join(argv[-2:])}` did not finish within {timeout_s:g} s"
        wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"unavailable: `shepherd demo` exited {done.returncode}: {' | '.join(tail)}"
    return wall
