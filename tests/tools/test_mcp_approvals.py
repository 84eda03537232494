"""Approvals for a parent over MCP (the SDK's client over stdio): the agent's approval request
reaches the parent as a notification, ``shepherd_approve`` / ``shepherd_deny`` answer it, and
the blocked child call goes on; hostile answers are tool errors."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import anyio

from protocol.notifications import Notice, TaskCompletion
from tests.processes.test_approvals import ASKING_AGENT

from .conftest import Running
from .test_mcp_server import DEADLINE_S, call, call_error, mcp_session, wait_for_sink

#: a command agent's shell start-up and two child commands, on a loaded machine
SLOW_S = 3 * DEADLINE_S


def _spawn_asking_agent(running: Running) -> None:
    agent = running.root / "asking_agent.py"
    agent.write_text(ASKING_AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    running.supervisor.session.spawn("builder", adapter="command", cmd=cmd)


async def _approval_requested(session: Any) -> dict[str, Any]:
    """Collect notifications (waiting for each) until the approval request arrives."""
    while True:
        batch = await call(session, "shepherd_notifications", {"wait_seconds": 30})
        for note in batch["notifications"]:
            if note.get("code") == "approval_requested":
                return note  # type: ignore[no-any-return]


def _settled(running: Running, task_id: str) -> Any:
    def results(items: list[Any]) -> list[Any]:
        return [r for n in items if isinstance(n, TaskCompletion) for r in n.results]

    return [r for r in results(running.sink.items) if r.task_id == task_id]


def test_a_parent_over_mcp_approves_and_denies(running: Running) -> None:
    _spawn_asking_agent(running)

    async def scenario() -> None:
        with anyio.fail_after(2 * SLOW_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                first = (
                    await call(
                        session, "shepherd_delegate", {"target": "builder", "task": "release 2"}
                    )
                )["task_id"]
                await call(session, "shepherd_watch", {"ids": [first]})
                note = await _approval_requested(session)
                request_id = note["refs"][0]
                assert note["task_id"] == first and "release 2" in note["text"]
                status = await call(session, "shepherd_status", {"agent": "builder"})
                assert status["agents"][0]["task"]["state"] == "waiting"

                # hostile answers: tool errors, nothing answered
                for args, code in [
                    ({"request_id": "shepherd-message-00000000deadbeef"}, "invalid_handle"),
                    ({"request_id": ""}, "invalid_argument"),
                    ({"request_id": request_id, "note": None}, "invalid_argument"),
                    ({"request_id": request_id, "note": "x" * 100_000}, "limit_exceeded"),
                ]:
                    error = await call_error(session, "shepherd_approve", args)
                    assert error["code"] == code, (args, error)
                error = await call_error(session, "shepherd_deny", {"request_id": request_id})
                assert error["code"] == "invalid_argument"

                approved = await call(
                    session, "shepherd_approve", {"request_id": request_id, "note": "ship it"}
                )
                assert approved["approved"] is True and approved["agent_name"] == "builder"
                twice = await call_error(
                    session, "shepherd_deny", {"request_id": request_id, "reason": "no"}
                )
                assert twice["code"] == "invalid_transition"
                await wait_for_sink(running, lambda items: bool(_settled(running, first)))
                (result,) = _settled(running, first)
                assert result.status == "completed" and result.text == "pushed: ship it"

                second = (
                    await call(
                        session, "shepherd_delegate", {"target": "builder", "task": "release 3"}
                    )
                )["task_id"]
                await call(session, "shepherd_watch", {"ids": [second]})
                request_id = (await _approval_requested(session))["refs"][0]
                await call(session, "shepherd_deny", {"request_id": request_id, "reason": "frozen"})
                await wait_for_sink(running, lambda items: bool(_settled(running, second)))
                (result,) = _settled(running, second)
                assert result.status == "blocked" and result.text == "denied: frozen"

    anyio.run(scenario)
    told = [n for n in running.sink.items if isinstance(n, Notice)]
    assert [n.code for n in told].count("approval_requested") == 2
