"""``shepherd mcp`` answers every request it has read before it ends, when its client closes
stdin (a script that writes its requests and then closes the pipe), and does not wait for a
request the client cancelled. The session is a real ``Supervisor`` in this process."""

from __future__ import annotations

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest

from actors.surfaces.mcp_drain import Drain

from .conftest import Running
from .mcp_stdio import McpProcess


def _server(running: Running) -> McpProcess:
    return McpProcess(running.root, "--session", str(running.supervisor.session_dir))


@pytest.mark.processes
def test_requests_in_flight_when_stdin_closes_are_answered_before_the_server_ends(
    running: Running,
) -> None:
    server = _server(running)
    waiting = server.send_request(
        "tools/call", {"name": "shepherd_notifications", "arguments": {"wait_seconds": 1.5}}
    )
    status = server.send_request("tools/call", {"name": "shepherd_status", "arguments": {}})
    messages = server.end_input()
    answers = {m["id"]: m for m in messages if "id" in m}
    assert set(answers) == {waiting, status}, messages
    assert answers[waiting]["result"]["structuredContent"]["notifications"] == []
    assert "error" not in answers[status]["result"]["structuredContent"]
    assert server.proc.wait(timeout=30) == 0
    server.close()


@pytest.mark.processes
def test_a_request_the_client_cancelled_is_not_waited_for_when_stdin_closes(
    running: Running,
) -> None:
    server = _server(running)
    long_wait = server.send_request(
        "tools/call", {"name": "shepherd_notifications", "arguments": {"wait_seconds": 300}}
    )
    server._send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": long_wait, "reason": "the client gave up"},
        }
    )
    server.end_input()  # within the helper's 30 s, not the 300 s wait
    assert server.proc.wait(timeout=30) == 0
    server.close()


def _request(ident: int) -> SessionMessage:
    return SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=ident, method="tools/call"))


def test_the_end_waits_for_the_open_answers_and_no_longer_than_its_bound() -> None:
    cancelled = SessionMessage(
        JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params={"requestId": 2}
        )
    )

    async def scenario() -> tuple[list[str], bool]:
        events: list[str] = []
        drain = Drain(bound_s=3600.0)
        drain.read(_request(1))
        drain.read(_request(2))

        async def settle() -> None:
            await drain.settled()
            events.append("settled")

        with anyio.fail_after(30):  # the cancelled request ends the wait, not the bound
            async with anyio.create_task_group() as tg:
                tg.start_soon(settle)
                await anyio.wait_all_tasks_blocked()
                drain.answered(1)
                await anyio.wait_all_tasks_blocked()
                events.append("one answered")
                drain.read(cancelled)
        bounded = Drain(bound_s=0.05)
        bounded.read(_request(3))
        with anyio.fail_after(30):
            await bounded.settled()  # nobody answers: the bound ends the wait
        return events, bool(bounded._open)

    events, still_open = anyio.run(scenario)
    assert events == ["one answered", "settled"]
    assert still_open
