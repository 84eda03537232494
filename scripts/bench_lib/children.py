"""Many real children on the kernel's default limits: does the last of 1,000 agents get its
deliveries as fast as the first, and as fast as in a session of 10? (issue 13: past ~120 agents
every process used to fall back to 1 s polling, because each took one of the user's 128 inotify
instances.)

One job runs two sessions one after the other, each its own ``Supervisor`` of scripted bridges
(``await task`` -> ``done``, forever): first ``base`` children (10, the baseline), then
``children`` (1,000). In each, round-robin over the children so that every child sees the same
load, ``rounds`` times: delegate a task and wait for its completion (the completion notification
includes the 25 ms coalescing window). Reported per session: the round trip's p50 / p99 for the
first, middle and last third of the children, the time from the first spawn to the last
``ready``, the private memory (``Private_Dirty``) and threads of each bridge, the parent's open
descriptors and threads, how many inotify instances the session's processes hold (the previous
design: one per process) and how many agents ``status`` shows as only polled.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from bench_lib.bridge import bridge_missing
from bench_lib.common import ReadyTap, latency_summary, memory_base_dir, temp_dir

LOOP = {
    "steps": [
        {
            "repeat": {
                "times": 10000,
                "steps": [{"await": "task"}, {"done": {"status": "completed", "summary": "ok"}}],
            }
        }
    ]
}


def inotify_instances(pid: int) -> int:
    count = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
    return count


def _private_kb(pid: int) -> int | None:
    """Private dirty memory of ``pid`` in KB: what another such process adds (shared pages of
    the interpreter and its libraries count once for all bridges)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            for line in file:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def _session(tmp: Path, n: int, rounds: int) -> dict[str, Any]:
    """One session of ``n`` scripted children: spawn, round trips, then the facts."""
    from actors.session.supervisor import Supervisor

    script = tmp / "loop.json"
    script.write_text(json.dumps(LOOP))
    ready = ReadyTap()
    supervisor = Supervisor(tmp / "session", tap=ready, mailbox_root=tmp / "mbox")
    try:
        session = supervisor.session
        names = [f"c{i:04d}" for i in range(n)]
        started = time.perf_counter()
        for name in names:
            session.spawn(name, script=str(script), cwd=str(tmp))
        spawned_s = time.perf_counter() - started
        if not ready.wait_count(n, 60 + n):
            return {"unavailable": f"only {len(ready.ready)} of {n} children got ready"}
        start_s = time.perf_counter() - started
        samples: dict[str, list[int]] = {name: [] for name in names}
        failed = 0
        for _ in range(rounds):
            for name in names:
                mark = time.perf_counter_ns()
                task = session.delegate(name, "go")
                done = session.wait([task.task_id], timeout_s=30)
                samples[name].append(time.perf_counter_ns() - mark)
                failed += [r.status for r in done.completed] != ["completed"]
        status = session.status()
        modes: dict[str, int] = {}
        for agent in status.agents:
            key = agent.mailbox_wake or "unreported"
            modes[key] = modes.get(key, 0) + 1
        bridges = [c.pid for c in supervisor.launcher.children.values()]
        private = [kb for kb in map(_private_kb, bridges) if kb is not None]
        threads = [_count(f"/proc/{pid}/task") for pid in bridges]
        instances = sum(inotify_instances(pid) for pid in [os.getpid(), *bridges])
        parent_fds = _count("/proc/self/fd")
        parent_threads = _count("/proc/self/task")
    finally:
        supervisor.shutdown(keep=False)
    third = max(n // 3, 1)
    parts = {
        "first": names[:third],
        "middle": names[(n - third) // 2 : (n - third) // 2 + third],
        "last": names[-third:],
    }
    return {
        "children": n,
        "rounds": rounds,
        "third": third,
        "spawn_calls_s": spawned_s,
        "start_s": start_s,
        "failed": failed,
        **{
            part: latency_summary([s for name in chosen for s in samples[name]])
            for part, chosen in parts.items()
        },
        "all": latency_summary([s for v in samples.values() for s in v]),
        "parent_wake": status.mailbox_wake,
        "agent_wake": modes,
        "inotify_instances": instances,
        "bridge_private_mb": statistics.median(private) / 1024 if private else None,
        "bridge_threads": max(threads, default=0),
        "parent_fds": parent_fds,
        "parent_threads": parent_threads,
    }


def children_job(params: dict[str, Any]) -> dict[str, Any]:
    missing = bridge_missing()
    if missing is not None:
        return {"unavailable": missing}
    result: dict[str, Any] = {
        "max_user_instances": _read_int("/proc/sys/fs/inotify/max_user_instances"),
        "open_files_soft_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }
    for label, n in (("base", params["base"]), ("many", params["children"])):
        with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
            os.environ["XDG_STATE_HOME"] = str(tmp / "state")  # the live-session pointer
            result[label] = _session(tmp, n, params["rounds"])
        if "unavailable" in result[label]:
            return {"unavailable": f"{label}: {result[label]['unavailable']}"}
    return result


def _read_int(path: str) -> int | None:
    try:
        with open(path) as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None
