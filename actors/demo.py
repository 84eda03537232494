"""``shepherd demo``: the canonical scenario, told as it happens.

A scout gets a task, asks the busy planner a question, and its turn ends: its process is
idle while its task is *waiting* (not done). The planner answers; the scout resumes and calls
done; the watcher reports exactly one completion. By default both agents are real
``shepherd-child`` processes on a real session mailbox; ``--simulated`` tells the same story
from the deterministic simulation. The story is the broker's own lifecycle tap: one line per
change, as it happens.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from actors.session import Session
from actors.sinks import CollectingSink
from actors.views import render_status
from protocol.notifications import AnyNotification, TaskCompletion
from protocol.render import render_notification

__all__ = ["PLANNER_SCRIPT", "SCOUT_SCRIPT", "run_process_demo", "run_simulated_demo"]

SCOUT_SCRIPT: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "scout: reading the code base"},
        {"run": "ls"},
        {
            "message": {
                "to": "planner",
                "text": "Which module should I map first?",
                "expects_reply": True,
            }
        },
        {"await": "reply"},
        {"say": "scout: the planner says {last}"},
        {"done": {"status": "completed", "summary": "Mapped {last}"}},
        {"await": "any"},
    ]
}

PLANNER_SCRIPT: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "planner: drafting the plan (busy for a while)"},
        {"sleep": 1.5},
        {"await": "message"},
        {"reply": {"text": "src/core"}},
        {"await": "any"},
    ]
}


class _Teller:
    def __init__(self, out: TextIO, now: Any) -> None:
        self._out = out
        self._now = now
        self._t0: float | None = None

    def __call__(self, text: str) -> None:
        now = self._now()
        if self._t0 is None:
            self._t0 = now
        self._out.write(f"[{now - self._t0:7.3f}s] {text}\n")
        self._out.flush()


class _Sink(CollectingSink):
    def __init__(self, teller: _Teller) -> None:
        super().__init__()
        self._teller = teller

    def __call__(self, note: AnyNotification) -> None:
        self._teller("notification to the parent:\n" + render_notification(note))
        super().__call__(note)


def _finish(out: TextIO, status: Any, completions: int) -> int:
    out.write("\nfinal status:\n" + render_status(status) + "\n")
    out.write(f"completions delivered: {completions}\n")
    return 0 if completions == 1 else 1


def _count(sink: CollectingSink) -> int:
    return sum(1 for n in sink.items if isinstance(n, TaskCompletion))


def run_simulated_demo(seed: int = 1, out: TextIO | None = None) -> int:
    """The scenario in the deterministic simulation (virtual time)."""
    import msgspec

    out = out or sys.stdout
    holder: list[Session] = []
    teller = _Teller(out, lambda: holder[0].runtime.clock.now() if holder else 0.0)
    sink = _Sink(teller)
    session = Session.simulated(seed, sink=sink, tap=teller)
    holder.append(session)
    out.write(f"session {session.session_id} (simulated, seed {seed})\n")
    session.spawn("scout", script=SCOUT_SCRIPT)
    session.spawn("planner", script=PLANNER_SCRIPT)
    session.delegate("planner", "Plan the refactor of the core")
    task = session.delegate("scout", "Map the code base for the refactor")
    teller(f"watching {task.task_id}: {session.watch(task.task_id).watcher_id}")
    session.sim.run_until(lambda: _count(sink) > 0, max_time=600)
    session.sim.run_all(max_time=1)
    code = _finish(out, msgspec.to_builtins(session.status()), _count(sink))
    session.shutdown()
    return code


def run_process_demo(out: TextIO | None = None, timeout_s: float = 60.0) -> int:
    """The scenario with two real ``shepherd-child`` processes on a real mailbox."""
    import msgspec

    from actors.supervisor import Supervisor

    out = out or sys.stdout
    workdir = Path(tempfile.mkdtemp(prefix="shepherd-demo-"))
    holder: list[Supervisor] = []
    teller = _Teller(out, lambda: holder[0].runtime.clock.now() if holder else 0.0)
    sink = _Sink(teller)
    sup = Supervisor(workdir / "session", sinks=[sink], tap=teller)
    holder.append(sup)
    try:
        out.write(f"session {sup.session_id}\ndirectory {sup.session_dir}\n")
        scripts = {}
        for name, script in (("scout", SCOUT_SCRIPT), ("planner", PLANNER_SCRIPT)):
            path = workdir / f"{name}.json"
            path.write_text(json.dumps(script))
            scripts[name] = str(path)
        s = sup.session
        s.spawn("scout", script=scripts["scout"], cwd=str(workdir))
        s.spawn("planner", script=scripts["planner"], cwd=str(workdir))
        s.delegate("planner", "Plan the refactor of the core")
        task = s.delegate("scout", "Map the code base for the refactor")
        teller(f"watching {task.task_id}: {s.watch(task.task_id).watcher_id}")
        if not sink.wait_for(lambda items: _count(sink) > 0, timeout=timeout_s):
            out.write(f"no completion within {timeout_s:g}s\n")
        return _finish(out, msgspec.to_builtins(s.status()), _count(sink))
    finally:
        sup.shutdown()
