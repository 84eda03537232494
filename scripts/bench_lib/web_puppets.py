#!/usr/bin/env python3
"""A real session of many agents without their processes, for the web board's benchmark.

    python scripts/bench_lib/web_puppets.py SESSION_DIR AGENTS

The session is ``shepherd serve``'s own wiring (a :class:`Supervisor`: its file mailbox,
journal, notifications, ``session.json``), so ``shepherd web`` and the CLI reach it as any
other; only its launcher differs: an agent is a *puppet*, registered with the mailbox's gate,
its inbox made, its ``ready`` said for it, and no process started (a thousand bridge processes
would measure the machine, not the board). Each agent gets one task, which stays open.

On stdin, one command a line; each answered with one JSON line on stdout:

- ``done NAME``: the agent's ``task_done`` (completed) is handed to the parent's inbox, exactly
  as its bridge would hand it; answered with ``{"sent": WALL_CLOCK_SECONDS}`` taken just before.
- ``quit``: the session shuts down.

The first line it prints is ``{"ready": {"tasks": {NAME: TASK_ID}}}`` once every agent is idle
and every task delegated.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import actors.session.supervisor as supervisor_module
from actors.runtime.transport import PARENT_INBOX
from actors.session.agent import AgentHandle, AgentSpec
from actors.session.launcher import ProcessLauncher
from actors.session.supervisor import Supervisor
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.core.limits import MAX_BATCH
from protocol.wire.envelopes import AnyEnvelope, RuntimeEnvelope, TaskDoneEnvelope

#: what a puppet's envelopes go through (the supervisor's transport, set once it exists)
PUBLISH: list[Callable[[str, AnyEnvelope], None]] = []
#: agent id -> its spec (its capability signs what is said in its name)
PUPPETS: dict[str, AgentSpec] = {}
_counter = iter(range(1, 1 << 62))


def _message_id() -> str:
    return make_id(IdKind.MESSAGE, f"{next(_counter):016x}")


class _Puppet:
    def __init__(self, on_exit: Callable[[int], None]) -> None:
        self._on_exit = on_exit

    def stop(self) -> None:
        threading.Thread(target=self._on_exit, args=(0,), daemon=True).start()


class PuppetLauncher(ProcessLauncher):
    """Agents without processes: registered, inbox made, ``ready`` said for them."""

    def _launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        self._register(spec)
        self._ensure_inbox(spec.agent_id)
        PUPPETS[spec.agent_id] = spec
        PUBLISH[0](PARENT_INBOX, _envelope(RuntimeEnvelope, spec, event="ready"))
        return _Puppet(on_exit)

    def wait_all_exited(self, timeout: float) -> bool:
        return True


def _envelope(kind: Any, spec: AgentSpec, **fields: Any) -> Any:
    return kind(
        message_id=_message_id(),
        session_id=spec.session_id,
        sender_id=spec.agent_id,
        target_id=PARENT_ID,
        created_at=time.time(),
        capability=spec.capability,
        **fields,
    )


def _puppets(descriptor: str) -> type[ProcessLauncher]:
    return PuppetLauncher


def _idle(sup: Supervisor) -> int:
    summary = sup.call("status", {}).summary
    return int(summary.processes.get("idle", 0)) if summary is not None else 0


def main() -> int:
    session_dir, agents = Path(sys.argv[1]), int(sys.argv[2])
    # the one change to serve's wiring: the launcher (see the module docstring)
    supervisor_module.launcher_class = _puppets  # type: ignore[attr-defined]
    sup = Supervisor(session_dir)
    PUBLISH.append(sup.mailbox.publish)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"steps": [{"await": "task"}, {"await": "any"}]}, f)
        names = [f"w{i:04d}" for i in range(agents)]
        for start in range(0, agents, MAX_BATCH):
            chunk = names[start : start + MAX_BATCH]
            sup.call("spawn_many", {"names": chunk, "adapter": "scripted", "script": f.name})
        while _idle(sup) < agents:
            time.sleep(0.05)  # a set-up step, not a measurement
        tasks: dict[str, str] = {}
        for start in range(0, agents, MAX_BATCH):
            chunk = names[start : start + MAX_BATCH]
            items = [{"target": n, "task": f"task of {n}"} for n in chunk]
            answer = sup.call("delegate_many", {"items": items})
            tasks.update(zip(chunk, answer.task_ids, strict=True))
        ids = {spec.name: spec for spec in PUPPETS.values()}
        print(json.dumps({"ready": {"tasks": tasks}}), flush=True)
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["quit"]:
                break
            if words[:1] == ["done"] and len(words) == 2:
                name = words[1]
                done = {"task_id": tasks[name], "status": "completed", "summary": "ok"}
                env = _envelope(TaskDoneEnvelope, ids[name], **done)
                sent = time.time()
                PUBLISH[0](PARENT_INBOX, env)
                print(json.dumps({"sent": sent}), flush=True)
    finally:
        sup.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
