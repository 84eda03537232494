"""Approvals for a parent over MCP (the SDK's client over stdio): the agent's approval request
reaches the parent as a notification, ``shepherd_approve`` / ``shepherd_deny`` answer it, and
the blocked child call goes on; hostile answers are tool errors. A client that supports
elicitation is asked at once, and its user's answer approves or denies."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from actors.surfaces.mcp_elicit import answer_for
from protocol.records.notifications import Notice, TaskCompletion
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


def _is_settled(running: Running, task_id: str, _items: object) -> bool:
    return bool(_settled(running, task_id))


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


@asynccontextmanager
async def _eliciting_session(
    running: Running, answers: list[types.ElicitResult], asked: list[str]
) -> AsyncIterator[ClientSession]:
    """The SDK's stdio client with an elicitation callback: it declares the capability, and
    answers each elicitation with the next of ``answers`` (recording the message asked)."""

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return answers.pop(0)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "actors.surfaces.mcp_server", "--session", str(running.supervisor.session_dir)],
        env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"], "SHEPHERD_LOG_LEVEL": "WARNING"},
        cwd=running.root,
    )
    with open(running.root / "mcp-server.stderr", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=on_elicit) as session,
        ):
            await session.initialize()
            await session.list_tools()  # the server learns the client can be asked
            yield session


def test_a_client_that_supports_elicitation_is_asked_at_once(running: Running) -> None:
    _spawn_asking_agent(running)
    s = running.supervisor.session
    answers = [
        types.ElicitResult(action="accept", content={"approve": True, "text": "asked and ok"}),
        types.ElicitResult(action="decline"),
    ]
    asked: list[str] = []

    async def scenario() -> None:
        with anyio.fail_after(2 * SLOW_S):
            async with _eliciting_session(running, answers, asked):
                for task_text in ("release 4", "release 5"):
                    task_id = s.delegate("builder", task_text).task_id
                    s.watch(task_id)
                    await wait_for_sink(running, partial(_is_settled, running, task_id))

    anyio.run(scenario)
    results = [r for n in running.sink.items if isinstance(n, TaskCompletion) for r in n.results]
    assert [(r.status, r.text) for r in results] == [
        ("completed", "pushed: asked and ok"),
        ("blocked", "denied: declined by the user"),
    ]
    assert len(asked) == 2 and "release 4" in asked[0] and "release 5" in asked[1]


def test_what_each_elicitation_answer_does() -> None:
    accept = types.ElicitResult
    req = "shepherd-message-00000000000000aa"
    assert answer_for(req, accept(action="accept", content={"approve": True})) == (
        "shepherd_approve",
        {"request_id": req},
    )
    assert answer_for(req, accept(action="accept", content={"approve": False, "text": " "})) == (
        "shepherd_deny",
        {"request_id": req, "reason": "denied by the user"},
    )
    assert answer_for(req, accept(action="decline"))[1]["reason"] == "declined by the user"  # type: ignore[index]
    assert answer_for(req, accept(action="cancel")) is None  # left pending: the tools still can
