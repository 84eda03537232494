"""`serve --recover` with a real Pi agent against the scripted model: Pi saves its own session
in the agent's directory, and the Pi started again continues it, so the model sees the
conversation it had before the whole process tree was killed, then the resumed task."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from actors.child.scripted_model import ScriptedModel, Text, ToolCall, models_json
from tests.processes.conftest import bridge_pids, cli
from tests.reliability.live import wait_gone
from tests.serving import Servers

pytestmark = [pytest.mark.pi, pytest.mark.processes]

WAIT_S = 90.0


def _has(code: str, task_id: str) -> Any:
    return lambda lines: any(
        (x.get("kind") == "notice" and x.get("code") == code and x.get("task_id") == task_id)
        or (
            x.get("kind") == "task_completion"
            and code == "completion"
            and task_id in [r["task_id"] for r in x["results"]]
        )
        for x in lines
    )


def _texts(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content or "")


def test_a_recovered_pi_agent_continues_its_own_session(
    pi_bin: Path, tmp_path: Path, servers: Servers
) -> None:
    model = ScriptedModel([Text("Noted: I start with the lexer.")])  # a turn without done
    try:
        models = tmp_path / "models.json"
        models.write_text(json.dumps(models_json(model.base_url)))
        work = tmp_path / "work"
        work.mkdir()
        session = tmp_path / "session"
        first = servers.start(session)
        _, spawned = cli(
            "spawn",
            "scout",
            "--adapter",
            "pi-rpc",
            "--pi",
            str(pi_bin),
            "--models-json",
            str(models),
            "--cwd",
            str(work),
            session=session,
        )
        _, task = cli("delegate", "scout", "map the code base", session=session)
        task_id = task["task_id"]
        cli("watch", task_id, session=session)
        assert first.wait_for(_has("turn_ended_without_done", task_id), timeout=WAIT_S)
        saved = session / "agents" / spawned["agent_id"] / "pi" / "sessions"
        assert list(saved.rglob("*.jsonl")), "Pi saved no session"
        first.stop(signal.SIGKILL)
        for pid in bridge_pids(session):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert wait_gone(lambda: bridge_pids(session))
        before = len(model.requests)

        model.add_steps(
            ToolCall("shepherd_done", {"status": "completed", "summary": "lexer mapped"}),
            Text("Done."),
        )
        second = servers.start(session, "--recover")
        assert second.wait_for(_has("completion", task_id), timeout=WAIT_S), second.lines
        resumed = model.requests[before]
        said = [(m.get("role"), _texts(m)) for m in resumed["messages"]]
        users = [t for r, t in said if r == "user"]
        # the conversation before the kill (its own session file), then the resumed task
        assert "map the code base" in users[0] and "[resumed]" not in users[0]
        assert ("assistant", "Noted: I start with the lexer.") in said
        assert "[Shepherd delegated task, resumed]" in users[-1]
        lines = [json.loads(x) for x in (session / "notifications.jsonl").read_text().splitlines()]
        results = [r for n in lines if n.get("kind") == "task_completion" for r in n["results"]]
        assert [(r["task_id"], r["text"]) for r in results] == [(task_id, "lexer mapped")]
        cli("shutdown", session=session)
        second.proc.wait(timeout=30)
    finally:
        model.close()
