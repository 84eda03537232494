"""Budgets over MCP (the MCP SDK's client against ``python -m actors.surfaces.mcp_server``): a
delegation's limits are granted and shown, and every hostile value of every new limit is
refused naming the field, with no task started."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from .conftest import Running
from .test_mcp_server import DEADLINE_S, _server_log, call, call_error, mcp_session

pytestmark = pytest.mark.processes

HOSTILE = (float("nan"), float("inf"), float("-inf"), None, 0, -1, 1e300, "10", "abc", True)
LIMITS = ("max_turns", "max_tokens", "max_cost", "max_minutes")


def test_delegate_limits_over_mcp_are_checked_and_granted(running: Running) -> None:
    (running.root / "idle.json").write_text(json.dumps({"steps": [{"await": "any"}]}))

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                await call(session, "shepherd_spawn", {"name": "idle", "script": "idle.json"})
                for field in LIMITS:
                    for bad in HOSTILE:
                        err = await call_error(
                            session,
                            "shepherd_delegate",
                            {"target": "idle", "task": "x", field: bad},
                        )
                        assert err["code"] == "invalid_argument", (field, bad, err)
                        assert field in err["message"], (field, bad, err)
                status = await call(session, "shepherd_status", {})
                assert [a["task"] for a in status["agents"]] == [None]
                given = {"max_turns": 3, "max_tokens": 500, "max_cost": 0.5, "max_minutes": 2.5}
                task = await call(
                    session, "shepherd_delegate", {"target": "idle", "task": "x", **given}
                )
                assert task["budget"] == given
                status = await call(session, "shepherd_status", {})
                assert status["agents"][0]["task"]["budget"] == given

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise
