"""``shepherd a2a``: a real session, a real front door, scripted agents, driven by the a2a-sdk's
own client (and by raw HTTP where a client would never send what is sent).

Nothing sleeps: every wait is on a stream, a call's answer or a process, with a timeout.
"""

from __future__ import annotations

import json
import signal
import socket
import stat
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from protocol.core.limits import MAX_A2A_REQUEST_BYTES, MAX_A2A_STREAMS, MAX_NESTING
from tests.a2a.conftest import SCRIPTS, Team

pytestmark = pytest.mark.processes

State = pb.TaskState


async def _client(team: Team, http: httpx.AsyncClient, *, streaming: bool = False) -> Client:
    card = await A2ACardResolver(http, team.door.url).get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


def _message(text: str, *, agent: str | None = None, task_id: str = "", **meta: Any) -> pb.Message:
    message = pb.Message(role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)], task_id=task_id)
    message.message_id = f"m-{abs(hash((text, agent, task_id)))}"
    if agent is not None:
        meta["agent"] = agent
    if meta:
        message.metadata.update(meta)
    return message


def _request(message: pb.Message, *, now: bool = False) -> pb.SendMessageRequest:
    request = pb.SendMessageRequest(message=message)
    request.configuration.return_immediately = now
    return request


async def _send(client: Client, message: pb.Message, *, now: bool = False) -> pb.Task:
    events = [e async for e in client.send_message(_request(message, now=now))]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


def _summary(task: pb.Task) -> str:
    (artifact,) = [a for a in task.artifacts if a.name == "summary"]
    return "".join(p.text for p in artifact.parts)


def _rpc(method: str, params: Any, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


VERSION = {"A2A-Version": "1.0"}


# ---------------------------------------------------------------------- the card, sending


def test_card_names_every_agent_and_a_completed_task_carries_its_summary(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        card = await A2ACardResolver(http, team.door.url).get_agent_card()
        assert {s.id for s in card.skills} == set(SCRIPTS)
        assert card.capabilities.streaming
        assert "bearer" in card.security_schemes
        client = await _client(team, http)
        task = await _send(client, _message("build the parser", agent="worker"))
        assert task.status.state == State.TASK_STATE_COMPLETED
        assert _summary(task) == "did: build the parser"
        assert task.metadata["agent"] == "worker"
        assert task.history[0].parts[0].text == "build the parser"
        # the session has the same task, settled the same way
        _, status = team.cli("status", "worker")
        assert status["agents"][0]["task"]["task_id"] == task.id
        assert status["agents"][0]["task"]["state"] == "completed"
        again = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert again.status.state == State.TASK_STATE_COMPLETED
        assert _summary(again) == "did: build the parser"

    team.run(body)


def test_a_blocked_task_is_rejected_with_the_agents_reason(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        task = await _send(client, _message("the vault", agent="refuser"))
        assert task.status.state == State.TASK_STATE_REJECTED
        assert task.status.message.parts[0].text == "cannot: no access to the vault"
        assert not task.artifacts

    team.run(body)


def test_a_message_naming_no_agent_goes_to_the_sessions_only_live_agent(team: Team) -> None:
    for name in SCRIPTS:
        if name != "worker":
            team.cli("close", name)

    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        task = await _send(client, _message("sort the imports"))
        assert task.status.state == State.TASK_STATE_COMPLETED
        assert _summary(task) == "did: sort the imports"
        _, status = team.cli("status", "worker")
        assert status["agents"][0]["task"]["task_id"] == task.id

    team.run(body)


def test_an_agent_missing_or_unknown_is_a_typed_error(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        with pytest.raises(InvalidParamsError) as missing:
            await _send(client, _message("anything"))
        assert "metadata.agent" in str(missing.value)
        assert f"the session has {len(SCRIPTS)}" in str(missing.value)
        assert missing.value.data == {"code": "agent_required"}
        with pytest.raises(InvalidParamsError) as unknown:
            await _send(client, _message("anything", agent="nobody"))
        assert "no agent 'nobody'" in str(unknown.value)
        assert unknown.value.data == {"code": "invalid_handle"}
        # nothing was delegated
        _, status = team.cli("status")
        assert all(row.get("task") is None for row in status["agents"])

    team.run(body)


def test_cancel_makes_a_task_canceled_and_a_terminal_one_is_not_cancelable(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        task = await _send(client, _message("wait forever", agent="idle"), now=True)
        assert task.status.state in (State.TASK_STATE_SUBMITTED, State.TASK_STATE_WORKING)
        cancelled = await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        assert cancelled.status.state == State.TASK_STATE_CANCELED
        _, result = team.cli("wait", task.id, "--timeout", "60")
        assert result["completed"][0]["status"] == "cancelled"
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(pb.CancelTaskRequest(id="shepherd-task-0000000000000000"))

    team.run(body)


def test_a_question_to_the_parent_is_input_required_and_a_message_answers_it(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        task = await _send(client, _message("ship it", agent="asker"))
        # a waiting send returns when the task needs input
        assert task.status.state == State.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "which branch?"
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.status.state == State.TASK_STATE_INPUT_REQUIRED
        answered = await _send(client, _message("main", task_id=task.id))
        assert answered.id == task.id
        assert answered.status.state == State.TASK_STATE_COMPLETED
        assert _summary(answered) == "went with main"

    team.run(body)


def test_a_task_waiting_on_a_peer_stays_working(team: Team) -> None:
    async def send(http: httpx.AsyncClient) -> pb.Task:
        return await _send(await _client(team, http), _message("ask", agent="consulter"), now=True)

    task_id = team.run(send).id
    assert team.serve.wait_story(task_id, "waiting"), "the consulter never asked its peer"

    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        task = await client.get_task(pb.GetTaskRequest(id=task_id))
        assert task.metadata["shepherdState"] == "waiting"
        assert task.status.state == State.TASK_STATE_WORKING

    team.run(body)


def test_streaming_goes_until_terminal_through_input_required(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        streamer = await _client(team, http, streaming=True)
        plain = await _client(team, http)
        states: list[int] = []
        task_id = ""
        summary = ""
        async for event in streamer.send_message(_request(_message("ship it", agent="asker"))):
            if event.HasField("task"):
                task_id = event.task.id
                states.append(event.task.status.state)
            elif event.HasField("artifact_update"):
                summary = event.artifact_update.artifact.parts[0].text
            elif event.HasField("status_update"):
                states.append(event.status_update.status.state)
            if states and states[-1] == State.TASK_STATE_INPUT_REQUIRED:
                # answered on another connection while this stream stays open
                await _send(plain, _message("release", task_id=task_id), now=True)
        assert states[-1] == State.TASK_STATE_COMPLETED
        assert State.TASK_STATE_INPUT_REQUIRED in states
        assert summary == "went with release"
        with pytest.raises(UnsupportedOperationError):  # nothing more to stream
            async for _ in streamer.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                pass

    team.run(body)


def test_subscribe_follows_a_task_delegated_elsewhere_until_it_is_terminal(team: Team) -> None:
    _, given = team.cli("delegate", "idle", "hold on")
    task_id = given["task_id"]

    async def body(http: httpx.AsyncClient) -> None:
        streamer = await _client(team, http, streaming=True)
        plain = await _client(team, http)
        states: list[int] = []
        async for event in streamer.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
            if event.HasField("task"):
                states.append(event.task.status.state)
                await plain.cancel_task(pb.CancelTaskRequest(id=task_id))
            elif event.HasField("status_update"):
                states.append(event.status_update.status.state)
        assert states[0] == State.TASK_STATE_WORKING or states[0] == State.TASK_STATE_SUBMITTED
        assert states[-1] == State.TASK_STATE_CANCELED

    team.run(body)


def test_a_follow_up_to_a_terminal_task_is_a_new_task_that_refers_to_it(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        first = await _send(client, _message("step one", agent="worker"))
        assert first.status.state == State.TASK_STATE_COMPLETED
        second = await _send(client, _message("step two", task_id=first.id))
        assert second.id != first.id
        assert second.context_id == first.context_id  # the same agent
        assert list(second.history[0].reference_task_ids) == [first.id]
        assert _summary(second) == "again: step two"
        # the first is untouched
        old = await client.get_task(pb.GetTaskRequest(id=first.id))
        assert old.status.state == State.TASK_STATE_COMPLETED
        assert _summary(old) == "did: step one"

    team.run(body)


def test_list_shows_each_agents_task_and_filters_by_context(team: Team) -> None:
    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        done = await _send(client, _message("list me", agent="worker"))
        held = await _send(client, _message("hold", agent="idle"), now=True)
        listed = await client.list_tasks(pb.ListTasksRequest())
        by_id = {t.id: t for t in listed.tasks}
        assert by_id[done.id].status.state == State.TASK_STATE_COMPLETED
        assert by_id[held.id].status.state in (
            State.TASK_STATE_SUBMITTED,
            State.TASK_STATE_WORKING,
        )
        only = await client.list_tasks(pb.ListTasksRequest(context_id=done.context_id))
        assert [t.id for t in only.tasks] == [done.id]
        working = await client.list_tasks(pb.ListTasksRequest(status=State.TASK_STATE_COMPLETED))
        assert held.id not in {t.id for t in working.tasks}

    team.run(body)


def test_a_timed_out_task_is_failed_with_error_type_timeout(team: Team) -> None:
    _, given = team.cli("delegate", "idle", "too slow", "--timeout", "0.001")
    team.cli("wait", given["task_id"], "--timeout", "60")

    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        task = await client.get_task(pb.GetTaskRequest(id=given["task_id"]))
        assert task.status.state == State.TASK_STATE_FAILED
        assert task.metadata["error"]["type"] == "timeout"

    team.run(body)


# ---------------------------------------------------------------------- the guard


def test_every_request_without_the_token_is_refused(team: Team) -> None:
    mode = stat.S_IMODE(team.door.token_file.stat().st_mode)
    assert mode == 0o600
    assert team.door.token_file.read_text().strip() == team.door.token
    url = team.door.url
    card = f"{url}.well-known/agent-card.json"
    frame = _rpc("GetTask", {"id": "shepherd-task-0000000000000000"})
    with httpx.Client(timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": team.door.token}):
            assert http.get(card, headers=headers).status_code == 401
            refused = http.post(url, json=frame, headers={**headers, **VERSION})
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
        assert http.get(card, headers=team.door.headers()).status_code == 200


def test_hostile_frames_get_typed_errors_and_the_server_keeps_serving(team: Team) -> None:
    url = team.door.url
    headers = {**team.door.headers(), **VERSION, "Content-Type": "application/json"}
    with httpx.Client(timeout=30, headers=headers) as http:

        def error_of(content: bytes) -> dict[str, Any]:
            answer = http.post(url, content=content)
            assert answer.status_code == 200, answer.text
            return dict(answer.json()["error"])

        assert error_of(b'{"jsonrpc": "2.0", "id": 1, "method": ')["code"] == -32700
        assert error_of(b"[]")["code"] == -32600
        assert error_of(json.dumps([_rpc("GetTask", {"id": "x"})]).encode())["code"] == -32600
        assert error_of(json.dumps(_rpc("NoSuchMethod", {})).encode())["code"] == -32601
        assert error_of(json.dumps(_rpc("GetTask", {"id": 5})).encode())["code"] == -32602
        # nested past the bound (and past Python's own recursion limit): refused, typed
        for deep in (
            b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1),
            b"[" * 100_000 + b"]" * 100_000,
        ):
            nested = error_of(deep)
            assert nested["code"] == -32600 and f"{MAX_NESTING} levels" in nested["message"]
        for method in ("GetTask", "ListTasks"):
            negative = error_of(json.dumps(_rpc(method, {"id": "x", "historyLength": -1})).encode())
            assert negative["code"] == -32602 and "historyLength" in negative["message"]
        unknown = error_of(json.dumps(_rpc("GetTask", {"id": "shepherd-task-0123"})).encode())
        assert unknown["code"] == -32001
        image = {
            "message": {
                "messageId": "m-1",
                "role": "ROLE_USER",
                "parts": [{"url": "http://x/y.png"}],
                "metadata": {"agent": "worker"},
            }
        }
        assert error_of(json.dumps(_rpc("SendMessage", image)).encode())["code"] == -32602
        # a body over the bound: refused, typed, before it is read whole
        huge = json.dumps(_rpc("SendMessage", {"x": "a" * MAX_A2A_REQUEST_BYTES})).encode()
        too_big = error_of(huge)
        assert too_big["code"] == -32600 and "too large" in too_big["message"].lower()
        # a text within the body's bound but over the session's envelope: the session's error
        long = _message("b" * (MAX_A2A_REQUEST_BYTES // 4), agent="worker")
        from google.protobuf.json_format import MessageToDict

        frame = _rpc("SendMessage", {"message": MessageToDict(long)})
        refused = error_of(json.dumps(frame).encode())
        assert refused["code"] == -32602 and "max_envelope_bytes" in refused["message"]
        assert refused["data"][0]["metadata"] == {"code": "limit_exceeded"}
        # nothing above was taken: the worker's first task is still to come
        _, status = team.cli("status", "worker")
        assert status["agents"][0].get("task") is None
        ok = http.get(f"{url}.well-known/agent-card.json")
        assert ok.status_code == 200


def test_a_client_gone_mid_stream_leaves_the_task_and_the_server_whole(team: Team) -> None:
    _, given = team.cli("delegate", "idle", "keep going")
    task_id = given["task_id"]
    url = team.door.url
    headers = {**team.door.headers(), **VERSION, "Accept": "text/event-stream"}
    frame = _rpc("SubscribeToTask", {"id": task_id})
    with httpx.Client(timeout=30, headers=headers) as http:
        # twice as many clients as may follow at once read the first event, then hang up:
        # a follow kept for any of them would leave no room for more
        for _ in range(2 * MAX_A2A_STREAMS):
            with http.stream("POST", url, json=frame) as stream:
                first = next(line for line in stream.iter_lines() if line.startswith("data:"))
                assert task_id in first

    # the task is as it was, and the server still follows it to its end for a new client
    # (retried while the last hang-ups are still being seen: a condition, with a deadline)
    async def body(client_http: httpx.AsyncClient) -> None:
        streamer = await _client(team, client_http, streaming=True)
        plain = await _client(team, client_http)
        last = -1
        deadline = time.monotonic() + 30
        while True:
            try:
                async for event in streamer.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                    if event.HasField("task"):
                        assert event.task.status.state == State.TASK_STATE_WORKING
                        await plain.cancel_task(pb.CancelTaskRequest(id=task_id))
                    elif event.HasField("status_update"):
                        last = event.status_update.status.state
                break
            except InvalidRequestError as exc:
                assert exc.data == {"code": "limit_exceeded"}
                assert time.monotonic() < deadline, "the hung-up clients' follows were kept"
        assert last == State.TASK_STATE_CANCELED

    team.run(body)
    # and it stops cleanly at once, taking its token file with it
    assert team.door.stop(signal.SIGINT) == 0
    assert not team.door.token_file.exists()


def _subscribe_until_taken(team: Team, task_id: str) -> list[int]:
    """Follow the task to its end (cancelled once the stream began); a stream refused for
    the bound (``limit_exceeded``) is asked again until a deadline: the hang-ups before it
    may still be being seen."""

    async def body(http: httpx.AsyncClient) -> list[int]:
        streamer = await _client(team, http, streaming=True)
        plain = await _client(team, http)
        deadline = time.monotonic() + 30
        while True:
            states: list[int] = []
            try:
                async for event in streamer.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                    if event.HasField("task"):
                        states.append(event.task.status.state)
                        await plain.cancel_task(pb.CancelTaskRequest(id=task_id))
                    elif event.HasField("status_update"):
                        states.append(event.status_update.status.state)
                return states
            except InvalidRequestError as exc:
                assert exc.data == {"code": "limit_exceeded"}
                assert time.monotonic() < deadline, "the hung-up clients' follows were kept"

    result: list[int] = team.run(body)
    return result


def _address(team: Team) -> tuple[str, int]:
    host, port = team.door.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    return host, int(port)


def _raw_send(team: Team, task_id: str, text: str) -> bytes:
    """A waiting SendMessage naming an open task (a follow-up to it), as raw HTTP."""
    message = {"messageId": "m-follow", "role": "ROLE_USER", "taskId": task_id}
    return _raw(team, _rpc("SendMessage", {"message": {**message, "parts": [{"text": text}]}}))


def _raw(team: Team, frame: dict[str, Any]) -> bytes:
    body = json.dumps(frame).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: {_address(team)[0]}\r\n"
        f"Authorization: Bearer {team.door.token}\r\nA2A-Version: 1.0\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def test_a_client_gone_from_a_waiting_send_is_let_go(team: Team) -> None:
    _, given = team.cli("delegate", "listener", "listen")
    task_id = given["task_id"]
    # twice as many clients as may follow at once send a waiting SendMessage (a follow-up
    # to the open task), then hang up without reading the answer
    for _ in range(2 * MAX_A2A_STREAMS):
        with socket.create_connection(_address(team), timeout=30) as conn:
            conn.sendall(_raw_send(team, task_id, "and another thing"))
    states = _subscribe_until_taken(team, task_id)
    assert states[0] == State.TASK_STATE_WORKING
    assert states[-1] == State.TASK_STATE_CANCELED


def test_sigterm_stops_it_cleanly_while_a_stream_and_a_send_wait(team: Team) -> None:
    _, given = team.cli("delegate", "idle", "long")
    headers = {**team.door.headers(), **VERSION, "Accept": "text/event-stream"}
    frame = _rpc("SubscribeToTask", {"id": given["task_id"]})
    new_task = {"messageId": "m-wait", "role": "ROLE_USER", "metadata": {"agent": "listener"}}
    send = _rpc("SendMessage", {"message": {**new_task, "parts": [{"text": "listen"}]}})
    with (
        httpx.Client(timeout=30, headers=headers) as http,
        http.stream("POST", team.door.url, json=frame) as stream,
        socket.create_connection(_address(team), timeout=30) as waiting,
    ):
        lines = stream.iter_lines()
        next(line for line in lines if line.startswith("data:"))
        waiting.sendall(_raw(team, send))
        # the send was taken: its task runs (it waits for the task's end from then on)
        assert team.serve.wait_story("listener", "process working")
        assert team.door.stop(signal.SIGTERM) == 0
        # both were answered with a typed error, not dropped
        answer = b""
        while chunk := waiting.recv(65536):
            answer += chunk
        assert b"200 OK" in answer.split(b"\r\n", 1)[0], answer
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == -32603 and "stopping" in error["message"]
        rest = "\n".join(lines)
        assert "stopping" in rest
    assert not team.door.token_file.exists()
    # the session is untouched: the tasks are still open
    for agent in ("idle", "listener"):
        _, status = team.cli("status", agent)
        assert status["agents"][0]["task"]["state"] in ("created", "running")


def test_a_session_that_ended_is_a_typed_error(team: Team) -> None:
    _, given = team.cli("delegate", "idle", "orphan")
    team.serve.stop()

    async def body(http: httpx.AsyncClient) -> None:
        client = await _client(team, http)
        with pytest.raises(InternalError) as gone:
            await client.get_task(pb.GetTaskRequest(id=given["task_id"]))
        assert gone.value.data == {"code": "session_unavailable"}
        card = await A2ACardResolver(http, team.door.url).get_agent_card()
        assert not card.skills

    team.run(body)


# ---------------------------------------------------------------------- the command line


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "192.0.2.1:80", "example.com:80", "nope"])
def test_a_non_loopback_or_bad_listen_address_is_refused(team: Team, listen: str) -> None:
    from tests.processes.conftest import cli

    code, answer = cli("a2a", "--listen", listen, session=team.session_dir, check=False)
    assert code == 2
    assert answer["error"]["code"] == "invalid_argument"
    assert "listen" in answer["error"]["message"]


def test_without_a_session_it_says_so(tmp_path: Path) -> None:
    from tests.processes.conftest import cli

    code, answer = cli("a2a", session=tmp_path / "none", check=False)
    assert code == 2
    assert answer["error"]["code"] == "session_unavailable"
