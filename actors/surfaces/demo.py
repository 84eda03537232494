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

from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from protocol.calls.render import render_notification
from protocol.calls.views import render_status
from protocol.records.notifications import AnyNotification, TaskCompletion

__all__ = [
    "PLANNER_SCRIPT",
    "SCOUT_SCRIPT",
    "run_pi_demo",
    "run_process_demo",
    "run_simulated_demo",
]

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
    session = SimSession.simulated(seed, sink=sink, tap=teller)
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

    from actors.session.supervisor import Supervisor

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


# ---------------------------------------------------------------------- two real Pi agents

#: What the scout's scripted model answers, request by request.
PI_SCOUT_STEPS: tuple[dict[str, Any], ...] = (
    {"tool": "bash", "args": {"command": "ls"}},
    {
        "tool": "shepherd_message",
        "args": {
            "target": "planner",
            "message": "Which module should I map first?",
            "expects_reply": True,
        },
    },
    {"text": "I asked the planner; I will go on when the answer arrives."},
    {"tool": "shepherd_done", "args": {"status": "completed", "summary": "Mapped src/core"}},
)


def _user_texts(request: dict[str, Any]) -> list[str]:
    texts = []
    for message in request.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(part.get("text", "")) for part in content)
            texts.append(str(content))
    return texts


def _told(out: TextIO, name: str, requests: list[dict[str, Any]]) -> None:
    """What each request of an agent's model ended with."""
    out.write(f"\nwhat {name}'s model was told (the newest message of each request):\n")
    for number, request in enumerate(requests, 1):
        texts = _user_texts(request)
        last = (request.get("messages") or [{}])[-1]
        if last.get("role") == "user" and texts:
            shown = " | ".join(line for line in texts[-1].splitlines() if line)[:160]
        else:
            shown = f"(the result of its {last.get('role')} call)"
        out.write(f"  #{number} {shown}\n")


class _Story(_Teller):
    """The teller, also waitable: the demo waits for the scout to go idle after its done."""

    def __init__(self, out: TextIO, now: Any) -> None:
        import threading

        super().__init__(out, now)
        self.lines: list[str] = []
        self.cond = threading.Condition()

    def __call__(self, text: str) -> None:
        super().__call__(text)
        with self.cond:
            self.lines.append(text)
            self.cond.notify_all()


class _PiModels:
    """The two scripted model servers. The planner's answers the scout's question with
    ``shepherd_message reply_to=ID``, reading ID from what it was told, as a real model
    would: its request is held (a gate) until :meth:`answer` has read it."""

    def __init__(self, timeout_s: float) -> None:
        import threading

        from actors.child.scripted_model import Gate, ScriptedModel, Step, Text, ToolCall

        steps: list[Step] = [
            ToolCall(str(s["tool"]), s["args"]) if "tool" in s else Text(str(s["text"]))
            for s in PI_SCOUT_STEPS
        ]
        self.release = threading.Event()
        self.reply: dict[str, Any] = {"target": "scout", "message": "src/core"}
        self.scout = ScriptedModel(steps)
        self.planner = ScriptedModel(
            [
                Text("Drafting the plan for the core refactor."),
                Gate(
                    self.release,
                    then=ToolCall("shepherd_message", self.reply),
                    timeout=timeout_s,
                ),
                Text("Answered the scout; back to the plan."),
            ]
        )
        self.thread = threading.Thread(
            target=self.answer, args=(timeout_s,), name="demo-planner-model", daemon=True
        )
        self.teller: Any = None

    def answer(self, timeout_s: float) -> None:
        import re

        try:
            requests = self.planner.wait_for_requests(2, timeout=timeout_s)
        except TimeoutError:
            return
        told = "\n".join(_user_texts(requests[1]))
        found = re.findall(r"reply_to=(shepherd-message-[0-9a-f]+)", told)
        if found:
            self.reply["reply_to"] = found[-1]
            if self.teller is not None:
                self.teller(f"planner's model answers request {found[-1]}")
        self.release.set()

    def close(self) -> None:
        self.release.set()
        self.scout.close()
        self.planner.close()
        self.thread.join(timeout=5)


def run_pi_demo(out: TextIO | None = None, timeout_s: float = 90.0, pi: str | None = None) -> int:
    """The scenario with two real Pi coding agents (``pi-rpc``), each driven by its own
    scripted model server on 127.0.0.1 (no network, no real model). The scout's model runs
    ``ls``, asks the planner with ``shepherd_message`` and ends its turn (idle, task waiting);
    the planner's model replies (``reply_to``); the reply starts a new turn of the scout,
    whose model calls ``shepherd_done``: exactly one completion."""
    import time

    import msgspec

    from actors.child.pi.launch import find_pi
    from actors.child.scripted_model import models_json
    from actors.session.supervisor import Supervisor

    out = out or sys.stdout
    found = find_pi()
    binary = pi or (str(found) if found is not None else None)
    if binary is None:
        out.write("the Pi coding agent is not installed: run `bash scripts/install_pi.sh`\n")
        return 2
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="shepherd-pi-demo-"))
    models = _PiModels(timeout_s)
    holder: list[Supervisor] = []
    story = _Story(out, lambda: holder[0].runtime.clock.now() if holder else 0.0)
    models.teller = story
    sink = _Sink(story)
    sup = Supervisor(workdir / "session", sinks=[sink], tap=story)
    holder.append(sup)
    try:
        out.write(f"session {sup.session_id}\ndirectory {sup.session_dir}\npi {binary}\n")
        s = sup.session
        for name, model in (("scout", models.scout), ("planner", models.planner)):
            path = workdir / f"{name}-models.json"
            path.write_text(json.dumps(models_json(model.base_url)))
            s.spawn(name, adapter="pi-rpc", pi=binary, models_json=str(path), cwd=str(workdir))
        models.thread.start()
        s.delegate("planner", "Plan the refactor of the core")
        task = s.delegate("scout", "Map the code base for the refactor")
        story(f"watching {task.task_id}: {s.watch(task.task_id).watcher_id}")
        if not sink.wait_for(lambda items: _count(sink) > 0, timeout=timeout_s):
            out.write(f"no completion within {timeout_s:g}s\n")
        else:  # done ended the scout's run: let its turn end show before the status
            with story.cond:
                done_at = len(story.lines)
                story.cond.wait_for(
                    lambda: "scout: process idle" in story.lines[done_at - 1 :], timeout=10
                )
        code = _finish(out, msgspec.to_builtins(s.status()), _count(sink))
        _told(out, "the scout", models.scout.requests)
        _told(out, "the planner", models.planner.requests)
        return code
    finally:
        sup.shutdown()
        models.close()
        out.write(f"wall time: {time.monotonic() - started:.2f}s\n")
