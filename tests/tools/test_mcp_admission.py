"""Admission over MCP (the MCP SDK's client against ``python -m actors.surfaces.mcp_server``)
and the Python API, on a session that hands at most one task over at once: a delegation
beyond it is queued with its place, its priority counts, hostile values of the new fields are
refused naming the field, and the queue is shown by ``shepherd_status``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.core.errors import InvalidArgument
from protocol.records.settings import Settings

from .conftest import Running
from .test_mcp_server import DEADLINE_S, _server_log, call, call_error, mcp_session

pytestmark = pytest.mark.processes

HOSTILE = {
    "priority": (1001, -1001, 1.5, "2", None, float("nan"), True),
    "timeout_from": ("later", "", 3, None),
}


@pytest.fixture
def capped(tmp_path: Path, state_home: Path) -> Iterator[Running]:
    sink = CollectingSink()
    sup = Supervisor(
        tmp_path / "session",
        sinks=[sink],
        mailbox_root=tmp_path / "mailbox",
        settings=Settings(max_running=1),
    )
    try:
        yield Running(sup, sink, tmp_path)
    finally:
        sup.shutdown()


def test_queued_delegations_over_mcp_and_the_python_api(capped: Running) -> None:
    (capped.root / "idle.json").write_text(json.dumps({"steps": [{"await": "any"}]}))

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(capped.root, capped.supervisor.session_dir) as session:
                for name in ("a", "b", "c"):
                    await call(session, "shepherd_spawn", {"name": name, "script": "idle.json"})
                for field, values in HOSTILE.items():
                    for bad in values:
                        args = {"target": "a", "task": "x", field: bad}
                        err = await call_error(session, "shepherd_delegate", args)
                        assert err["code"] == "invalid_argument", (field, bad, err)
                        assert field in err["message"], (field, bad, err)
                first = await call(session, "shepherd_delegate", {"target": "a", "task": "1"})
                assert not first.get("queued")
                second = await call(session, "shepherd_delegate", {"target": "b", "task": "2"})
                third = await call(
                    session,
                    "shepherd_delegate",
                    {"target": "c", "task": "3", "priority": 9, "timeout_from": "start"},
                )
                assert (second["queued"], second["queue_place"]) == (True, 1)
                assert (third["queued"], third["queue_place"]) == (True, 1)
                status = await call(session, "shepherd_status", {})
                places = {
                    a["name"]: a["task"].get("queue_place") for a in status["agents"] if a["task"]
                }
                assert places == {"a": None, "b": 2, "c": 1}
                assert status["summary"]["queued"] == 2

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(capped.root), file=sys.stderr)
        raise
    session = capped.supervisor.session
    with pytest.raises(InvalidArgument, match="priority"):
        session.delegate("a", "x", priority=5000)
    session.cancel(session.status("a").agents[0].task.task_id)  # type: ignore[union-attr]
    row = session.status("c").agents[0]
    assert row.task is not None and row.task.state.value == "running"  # the higher priority


def test_a_providers_cool_down_over_mcp(running: Running) -> None:
    from tests.processes.test_providers_cli import REFUSED_ONCE

    script = running.root / "agent.py"
    script.write_text(REFUSED_ONCE)
    cmd = f"env REFUSE=once {sys.executable} {script} {{message}}"

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                spawned = {
                    "name": "caller",
                    "adapter": "command",
                    "cmd": cmd,
                    "provider": "sim",
                    "cwd": str(running.root),
                }
                await call(session, "shepherd_spawn", spawned)
                task = await call(session, "shepherd_delegate", {"target": "caller", "task": "t"})
                codes: list[str] = []
                while "provider_cooldown" not in codes:
                    got = await call(session, "shepherd_notifications", {"wait_seconds": 30})
                    codes += [n.get("code", "") for n in got["notifications"]]
                status = await call(session, "shepherd_status", {})
                assert "sim" in status["summary"]["cooldowns"]
                while "provider_cooldown_ended" not in codes:
                    got = await call(session, "shepherd_notifications", {"wait_seconds": 30})
                    codes += [n.get("code", "") for n in got["notifications"]]
                watched = await call(session, "shepherd_watch", {"ids": [task["task_id"]]})
                while not watched["completed"]:
                    await call(session, "shepherd_notifications", {"wait_seconds": 30})
                    watched = await call(session, "shepherd_watch", {"ids": [task["task_id"]]})
                assert watched["completed"][0]["status"] == "completed"

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise
