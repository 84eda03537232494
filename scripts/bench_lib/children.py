"""Many real children on the kernel's default limits: does the last one get its deliveries as
fast as the first? (issue 13: past ~120 agents every process used to fall back to 1 s polling,
because each took one of the user's 128 inotify instances.)

One ``Supervisor`` starts ``children`` scripted bridges (``await task`` → ``done``, forever),
then, round-robin over the children so that every child sees the same load, ``rounds`` times:
delegate a task and wait for its completion (the completion notification includes the 25 ms
coalescing window). Reported: the round trip's p50 / p99 for the first quarter of the children
(1-50 of 200) and the last quarter (151-200), how many inotify instances the session's
processes hold (the previous design: one per process), and how many agents ``status`` shows
as only polled.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
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


def children_job(params: dict[str, Any]) -> dict[str, Any]:
    missing = bridge_missing()
    if missing is not None:
        return {"unavailable": missing}
    n: int = params["children"]
    rounds: int = params["rounds"]
    with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")  # the live-session pointer goes here
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
            if not ready.wait(n, 60 + n):
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
            pids = [os.getpid(), *(c.pid for c in supervisor.launcher.children.values())]
            instances = sum(inotify_instances(pid) for pid in pids)
        finally:
            supervisor.shutdown(keep=False)
    quarter = max(n // 4, 1)
    first = [s for name in names[:quarter] for s in samples[name]]
    last = [s for name in names[-quarter:] for s in samples[name]]
    return {
        "children": n,
        "rounds": rounds,
        "quarter": quarter,
        "start_s": start_s,
        "failed": failed,
        "first": latency_summary(first),
        "last": latency_summary(last),
        "all": latency_summary([s for v in samples.values() for s in v]),
        "parent_wake": status.mailbox_wake,
        "agent_wake": modes,
        "inotify_instances": instances,
        "max_user_instances": _read_int("/proc/sys/fs/inotify/max_user_instances"),
    }


def _read_int(path: str) -> int | None:
    try:
        with open(path) as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None
