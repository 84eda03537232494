"""Sandboxed agents (``spawn --sandbox``) in a real session: a :class:`Supervisor` in this
process, real bridges, real bubblewrap sandboxes (installed by the README's test command:
``scripts/install_sandbox.sh``). Each hostile agent is a ``command`` agent whose turn runs a
probe script from its own directory, writes what it found there (the test reads it from the
host) and says ``done`` through its sandbox's socket. Nothing sleeps: the tests wait on the
task's completion (the sink) with a timeout.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.records.tasks import TaskResult
from tests.processes import test_worktrees as worktrees
from tests.processes.conftest import supervisor

__all__ = ["supervisor"]  # a fixture used here

Team = tuple[Supervisor, CollectingSink]

#: a probe's last lines: what it found, then the explicit done (its summary: "probed")
DONE = "shepherd-child done --status completed --summary probed\n"


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


@pytest.fixture
def team(supervisor: Team) -> Team:
    """The real-process tests' supervisor in this process, with its sink."""
    return supervisor


def finish(team: Team, agent: str, text: str = "probe") -> TaskResult:
    """Delegate ``text`` to ``agent``, watch the task, and return its result."""
    return worktrees.finish(team[0], team[1], agent, text)


@pytest.fixture(params=["command", "scripted"])
def kind(request: pytest.FixtureRequest) -> str:
    """The hostile agent's kind: a command agent's turn, or a scripted agent's ``run`` step."""
    return str(request.param)


def probe_spawn(scripts: Path, kind: str, name: str, body: str, **options: Any) -> dict[str, Any]:
    """The spawn of ``name``, sandboxed: a command agent whose every turn runs ``body`` (bash)
    then says done, or a scripted agent whose ``run`` step does (its script in ``scripts``)."""
    if kind == "command":
        cmd = f"bash -c {shlex.quote(body + chr(10) + DONE)} probe {{message}}"
        return {"name": name, "adapter": "command", "cmd": cmd, "sandbox": True, **options}
    steps: list[dict[str, Any]] = [{"await": "task"}, {"run": body}]
    steps += [{"done": {"status": "completed", "summary": "probed"}}, {"await": "any"}]
    script = scripts / f"{name}.json"
    script.write_text(json.dumps({"steps": steps}))
    return {"name": name, "script": str(script), "sandbox": True, **options}


def probe_agent(
    team: Team, work: Path, name: str, body: str, kind: str = "command", **options: Any
) -> None:
    """Spawn ``name`` (:func:`probe_spawn`) to work in ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    spawn = probe_spawn(work.parent, kind, name, body, **options)
    team[0].call("spawn", {**spawn, "cwd": str(work)})


def found(work: Path) -> dict[str, str]:
    """What a probe wrote as ``key=value`` lines into ``work/found.txt``."""
    lines = (work / "found.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def idle_script(tmp_path: Path) -> str:
    """A scripted agent that takes tasks and never ends them."""
    path = tmp_path / "idle.json"
    path.write_text('{"steps": [{"await": "task"}, {"await": "any"}]}')
    return str(path)
