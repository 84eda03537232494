"""`serve --recover` with an ACP agent (the scripted one, built with the SDK's agent side): the
whole process tree is killed while the agent's task is open; the recovered session starts the
agent again, which loads its own ACP session (``session/load``) instead of opening a new one,
is handed the resumed task, and finishes it."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pi.test_pi_recover import _has
from tests.processes.conftest import bridge_pids, cli
from tests.reliability.live import wait_gone
from tests.serving import Servers

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

AGENT = Path(__file__).with_name("scripted_agent.py")
WAIT_S = 60.0


def _log(script: Path) -> list[dict[str, Any]]:
    path = Path(f"{script}.log")
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_recovered_acp_agent_loads_its_session_and_finishes_the_resumed_task(
    tmp_path: Path, servers: Servers
) -> None:
    script = tmp_path / "scout.json"
    script.write_text(json.dumps([[{"say": "noted: I start with the lexer"}]]))
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))} {shlex.quote(str(script))}"
    work = tmp_path / "work"
    work.mkdir()
    session = tmp_path / "session"
    first = servers.start(session)
    cli("spawn", "scout", "--adapter", "acp", "--acp-cmd", cmd, "--cwd", str(work), session=session)
    _, task = cli("delegate", "scout", "map the code base", session=session)
    task_id = task["task_id"]
    cli("watch", task_id, session=session)
    assert first.wait_for(_has("turn_ended_without_done", task_id), timeout=WAIT_S)
    (opened,) = [line["new_session"] for line in _log(script) if "new_session" in line]
    first.stop(signal.SIGKILL)
    for pid in bridge_pids(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert wait_gone(lambda: bridge_pids(session))

    child = str(Path(sys.executable).with_name("shepherd-child"))
    done = [child, "done", "--status", "completed", "--summary", "lexer mapped"]
    script.write_text(json.dumps([[{"shell": done}]]))  # the agent started again reads this
    second = servers.start(session, "--recover")
    assert second.wait_for(_has("completion", task_id), timeout=WAIT_S), second.lines
    log = _log(script)
    assert [line["load_session"] for line in log if "load_session" in line] == [opened]
    assert [line for line in log if "new_session" in line] == [
        {"new_session": opened, "cwd": str(work)}
    ]
    prompts = [json.loads(x) for x in Path(f"{script}.prompts").read_text().splitlines()]
    assert "map the code base" in prompts[0]
    assert "resumed" in prompts[-1] and "map the code base" in prompts[-1]
    lines = [json.loads(x) for x in (session / "notifications.jsonl").read_text().splitlines()]
    results = [r for n in lines if n.get("kind") == "task_completion" for r in n["results"]]
    assert [(r["task_id"], r["text"]) for r in results] == [(task_id, "lexer mapped")]
