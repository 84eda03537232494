"""``shepherd demo``: the canonical scenario, told as it happens.

A scout gets a task, asks the busy planner a question, and its turn ends: its process is
idle while its task is *waiting* (not done). The planner answers; the scout resumes and calls
done; the watcher reports exactly one completion. The story printer watches the session's
own records change and prints each change once, with the session clock.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from actors.broker import BrokerActor
from actors.session import Session
from actors.sinks import CollectingSink
from protocol.notifications import TaskCompletion
from protocol.render import render_notification

__all__ = ["PLANNER_SCRIPT", "SCOUT_SCRIPT", "run_simulated_demo"]

SCOUT_SCRIPT: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "scout: reading the code base"},
        {"run": "rg --files src"},
        {
            "message": {
                "to": "planner",
                "text": "Which module should I map first?",
                "expects_reply": True,
            }
        },
        {"await": "reply"},
        {"say": "scout: the planner says {last}"},
        {"run": "rg -n 'def ' src/core"},
        {"done": {"status": "completed", "summary": "Mapped {last}"}},
        {"await": "any"},
    ]
}

PLANNER_SCRIPT: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "planner: drafting the plan (busy for a while)"},
        {"sleep": 3},
        {"await": "message"},
        {"reply": {"text": "src/core"}},
        {"await": "any"},
    ]
}


class _Story:
    def __init__(self, session: Session, out: TextIO) -> None:
        self._s = session
        self._out = out
        self._seen: dict[str, str] = {}
        actor = session.broker._actor_weakref()
        assert isinstance(actor, BrokerActor)
        self._b = actor
        self._t0 = session.runtime.clock.now()

    def say(self, text: str) -> None:
        stamp = self._s.runtime.clock.now() - self._t0
        self._out.write(f"[{stamp:7.3f}s] {text}\n")

    def check(self) -> None:
        b = self._b
        for entry in b.agents.values():
            key, value = f"agent:{entry.agent_id}", entry.process_state
            if self._seen.get(key) != value:
                self._seen[key] = value
                self.say(f"{entry.name:8} process {value}")
        for task_id, record in b.tasks.items():
            key = f"task:{task_id}"
            value = record.state.value
            if self._seen.get(key) != value:
                self._seen[key] = value
                who = b.agents[record.agent_id].name
                extra = ""
                if record.pending_requests:
                    req = b.requests.get(record.pending_requests[0])
                    if req is not None:
                        extra = f" for {b.agents[req.target_id].name}: {req.question!r}"
                self.say(f"{who:8} task {task_id} {value}{extra}")
        for request_id, req in b.requests.items():
            key = f"req:{request_id}"
            if self._seen.get(key) != req.state.value:
                self._seen[key] = req.state.value
                self.say(f"request {request_id} {req.state.value}")


def run_simulated_demo(seed: int = 1, out: TextIO | None = None) -> int:
    """Run the canonical scenario in the simulation and print the story. Returns 0 on success."""
    out = out or sys.stdout
    sink = CollectingSink()
    session = Session.simulated(seed, sink=sink)
    story = _Story(session, out)
    out.write(f"session {session.session_id} (simulated, seed {seed})\n")
    session.spawn("scout", script=SCOUT_SCRIPT)
    session.spawn("planner", script=PLANNER_SCRIPT)
    session.delegate("planner", "Plan the refactor of the core")
    task = session.delegate("scout", "Map the code base for the refactor")
    watch = session.watch(task.task_id)
    story.say(f"watching {task.task_id} (watcher {watch.watcher_id}, pending)")
    sim = session.sim
    notified = 0

    def step_and_tell() -> bool:
        nonlocal notified
        story.check()
        while notified < len(sink.items):
            story.say("notification to the parent:\n" + render_notification(sink.items[notified]))
            notified += 1
        return any(isinstance(n, TaskCompletion) for n in sink.items)

    sim.run_until(step_and_tell, max_time=600)
    sim.run_all(max_time=1)
    step_and_tell()
    completions = [n for n in sink.items if isinstance(n, TaskCompletion)]
    status = session.status()
    out.write("\nfinal status:\n")
    for row in status.agents:
        task_line = f"{row.task.task_id} {row.task.state.value}" if row.task else "no task"
        out.write(f"  {row.name:8} {row.process_state:8} {task_line}\n")
    out.write(f"completions delivered: {len(completions)}\n")
    session.shutdown()
    return 0 if len(completions) == 1 else 1
