"""``shepherd mcp``'s stdio (:mod:`actors.surfaces.mcp_wire`): bounded lines, a typed answer to
every frame that is not a message, and every request it has read answered before it ends when
its client closes stdin (a script that writes its requests and then closes the pipe); a request
the client cancelled is not waited for. The session is a real ``Supervisor`` in this process."""

from __future__ import annotations

import io
import json

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, jsonrpc_message_adapter

from actors.surfaces.mcp_wire import Drain, StdinLines, bad_frame

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


@pytest.mark.processes
def test_frames_that_are_no_message_get_typed_answers_and_the_server_goes_on(
    running: Running,
) -> None:
    server = _server(running)
    hostile = {
        b"{this is not json": -32700,
        b"[]": -32600,
        b'"a string"': -32600,
        b'{"jsonrpc": "2.0", "no": "method"}': -32600,
        b"\xff\xfe not utf-8": -32700,
        b"x" * (20 * 1024 * 1024): -32700,  # a huge line (under the bound): read, refused
    }
    for line, code in hostile.items():
        server.send_line(line)
        answer = server.next_message()
        assert answer["id"] is None, answer
        assert answer["error"]["code"] == code, (line[:40], answer)
        assert len(json.dumps(answer)) < 1000  # the reason, never the input
    unknown = server.send_request("no/such/method", {})
    assert server.next_message() == {
        "jsonrpc": "2.0",
        "id": unknown,
        "error": {"code": -32601, "message": "Method not found", "data": "no/such/method"},
    }
    status = server.call("shepherd_status", {})
    assert "error" not in status and "agents" in status
    server.close()


def test_a_line_over_the_bound_is_dropped_whole_and_stands_as_one_refusal() -> None:
    raw = io.BytesIO(b"short\n" + b"x" * 30 + b"\n" + b"y" * 10 + b"\n" + b"tail")
    lines = StdinLines(raw, limit=10)
    read = [lines.readline() for _ in range(5)]
    assert read[0] == "short\n"
    assert json.loads(read[1]) == {"shepherd_line_over_bytes": 10}
    assert read[2:] == ["y" * 10 + "\n", "tail", ""]  # exactly the bound is a line
    answer = bad_frame(_validation_error(read[1]))
    assert isinstance(answer.message, JSONRPCError) and answer.message.id is None
    assert answer.message.error.code == -32600
    assert "a line is at most 10 bytes" in answer.message.error.message


def _validation_error(line: str) -> Exception:
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:
        return exc
    raise AssertionError(f"{line!r} was taken as a message")
