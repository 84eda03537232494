"""MCP tasks on ``shepherd mcp`` (the SDK's client over stdio, a real session, scripted
agents): ``shepherd_delegate`` called task-augmented answers with a task at once; ``tasks/get``
follows the Shepherd task (working, input_required while a question waits for the parent, then
completed / failed / cancelled); ``tasks/result`` gives the settled result; ``tasks/cancel``
cancels the Shepherd task; an unknown task id is a typed error; a plain call is unchanged."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from actors.surfaces.mcp_tasks import MAX_RECORDS, PAGE, McpTasks, _Record, mcp_status
from tests.processes.test_approvals import ASKING_AGENT

from .conftest import Running
from .mcp_stdio import McpProcess
from .test_mcp_approvals import SLOW_S
from .test_mcp_server import DEADLINE_S, call, mcp_session

#: asks the parent a question, waits for the reply, then is done with it as its summary
ASKING = {
    "steps": [
        {"await": "task"},
        {"message": {"to": "shepherd", "text": "which branch?", "expects_reply": True}},
        {"await": "reply"},
        {"done": {"status": "completed", "summary": "built on {last}"}},
        {"await": "any"},
    ]
}
#: works until a message from the parent says how to end
HOLDING = {
    "steps": [
        {"await": "task"},
        {"await": "message"},
        {"done": {"status": "blocked", "summary": "blocked: {last}"}},
        {"await": "task"},
        {"done": {"status": "failed", "summary": "failed at once"}},
        {"await": "any"},
    ]
}


def _spawn(running: Running, name: str, script: dict[str, Any]) -> None:
    path = running.root / f"{name}.json"
    path.write_text(json.dumps(script))
    running.supervisor.session.spawn(name, adapter="scripted", script=str(path))


async def _delegate_as_task(
    session: ClientSession, target: str, task: str, ttl: int | None = None
) -> types.Task:
    """``tools/call`` with ``task``. The SDK's ``ClientSession.send_request`` checks a
    ``tools/call`` answer against the revision's ``CallToolResult`` (it implements no tasks) and
    refuses a ``CreateTaskResult``; its dispatcher, one level down, sends the request with the
    SDK's own framing and returns the answer unchecked, and the answer is checked here."""
    params = types.CallToolRequestParams(
        name="shepherd_delegate",
        arguments={"target": target, "task": task},
        task=types.TaskMetadata(ttl=ttl),
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    raw = await session._dispatcher.send_raw_request("tools/call", params)
    return types.CreateTaskResult.model_validate(raw, by_name=False).task


async def _get(session: ClientSession, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.GetTaskResult)


async def _until(session: ClientSession, task_id: str, status: str) -> types.GetTaskResult:
    """Poll ``tasks/get`` (at the interval the server suggests) until ``status``."""
    while True:
        got = await _get(session, task_id)
        if got.status == status:
            return got
        assert got.status not in {"completed", "failed", "cancelled"}, got
        await anyio.sleep((got.poll_interval or 100) / 1000)


async def _result(session: ClientSession, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await session.send_request(request, types.CallToolResult)


def test_a_delegation_as_a_task_asks_the_parent_then_completes(running: Running) -> None:
    _spawn(running, "builder", ASKING)

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                init = session.server_capabilities
                assert init is not None and init.tasks is not None
                assert init.tasks.requests is not None and init.tasks.requests.tools is not None
                tools = {t.name: t for t in (await session.list_tools()).tools}
                execution = tools["shepherd_delegate"].execution
                assert execution is not None and execution.task_support == "optional"

                task = await _delegate_as_task(session, "builder", "build it")
                assert task.status == "working" and task.task_id.startswith("shepherd-mcptask-")
                asked = await _until(session, task.task_id, "input_required")
                assert asked.status_message
                status = await call(session, "shepherd_status", {"agent": "builder"})
                shepherd_task = status["agents"][0]["task"]
                (request,) = shepherd_task["pending_requests"]
                await call(
                    session,
                    "shepherd_message",
                    {"target": "builder", "message": "main", "reply_to": request["request_id"]},
                )
                result = await _result(session, task.task_id)
                assert not result.is_error
                settled = result.structured_content
                assert settled is not None
                assert settled["task_id"] == shepherd_task["task_id"]
                assert settled["status"] == "completed" and settled["text"] == "built on main"
                assert (await _get(session, task.task_id)).status == "completed"
                listed = await session.send_request(types.ListTasksRequest(), types.ListTasksResult)
                assert [t.task_id for t in listed.tasks] == [task.task_id]

    anyio.run(scenario)


def test_blocked_and_failed_agents_fail_the_task_with_the_settled_result(
    running: Running,
) -> None:
    _spawn(running, "holder", HOLDING)

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                task = await _delegate_as_task(session, "holder", "hold")
                # working while the agent works (it waits for our message: it cannot end)
                assert (await _get(session, task.task_id)).status == "working"
                await call(session, "shepherd_message", {"target": "holder", "message": "no disk"})
                result = await _result(session, task.task_id)
                assert result.is_error and result.structured_content is not None
                assert result.structured_content["status"] == "blocked"
                assert result.structured_content["text"] == "blocked: no disk"
                got = await _get(session, task.task_id)
                assert got.status == "failed" and got.status_message == "blocked"

                second = await _delegate_as_task(session, "holder", "again")
                result = await _result(session, second.task_id)
                assert result.is_error and result.structured_content is not None
                assert result.structured_content["status"] == "failed"
                assert (await _get(session, second.task_id)).status == "failed"

    anyio.run(scenario)


def test_tasks_cancel_cancels_the_shepherd_task(running: Running) -> None:
    _spawn(running, "holder", HOLDING)

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                task = await _delegate_as_task(session, "holder", "hold")
                request = types.CancelTaskRequest(
                    params=types.CancelTaskRequestParams(task_id=task.task_id)
                )
                cancelled = await session.send_request(request, types.CancelTaskResult)
                assert cancelled.status == "cancelled"
                result = await _result(session, task.task_id)
                assert result.structured_content is not None
                shepherd_id = result.structured_content["task_id"]
                assert result.structured_content["status"] == "cancelled"
                # the Shepherd task is cancelled in the session, not only in this server
                status = await call(session, "shepherd_status", {"agent": "holder"})
                in_session = status["agents"][0]["task"]
                assert in_session["task_id"] == shepherd_id
                assert in_session["state"] == "cancelled"
                # a task that ended cannot be cancelled again
                with pytest.raises(MCPError) as again:
                    await session.send_request(request, types.CancelTaskResult)
                assert again.value.code == types.INVALID_PARAMS

    anyio.run(scenario)


def test_unknown_task_ids_are_typed_errors_and_plain_calls_are_unchanged(
    running: Running,
) -> None:
    _spawn(running, "holder", HOLDING)

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                for task_id in ["shepherd-mcptask-" + "0" * 32, "", "../x", "x" * 100_000]:
                    for request, result_type in [
                        (
                            types.GetTaskRequest(
                                params=types.GetTaskRequestParams(task_id=task_id)
                            ),
                            types.GetTaskResult,
                        ),
                        (
                            types.GetTaskPayloadRequest(
                                params=types.GetTaskPayloadRequestParams(task_id=task_id)
                            ),
                            types.CallToolResult,
                        ),
                        (
                            types.CancelTaskRequest(
                                params=types.CancelTaskRequestParams(task_id=task_id)
                            ),
                            types.CancelTaskResult,
                        ),
                    ]:
                        with pytest.raises(MCPError) as error:
                            await session.send_request(request, result_type)  # type: ignore[arg-type]
                        assert error.value.code == types.INVALID_PARAMS
                        assert len(error.value.message) < 200
                bad_page = types.ListTasksRequest(
                    params=types.PaginatedRequestParams(cursor="not-a-cursor")
                )
                with pytest.raises(MCPError) as error:
                    await session.send_request(bad_page, types.ListTasksResult)
                assert error.value.code == types.INVALID_PARAMS

                # a tool that is no task refuses to be one
                with pytest.raises(MCPError) as error:
                    await session._dispatcher.send_raw_request(
                        "tools/call", {"name": "shepherd_status", "arguments": {}, "task": {}}
                    )
                assert error.value.code == types.METHOD_NOT_FOUND

                # the plain call: the delegate result at once, no task made
                delegated = await call(
                    session, "shepherd_delegate", {"target": "holder", "task": "x"}
                )
                assert set(delegated) >= {"task_id", "agent_id", "accepted"}
                listed = await session.send_request(types.ListTasksRequest(), types.ListTasksResult)
                assert listed.tasks == []

    anyio.run(scenario)


def test_a_client_with_the_tasks_capability_is_sent_each_status(running: Running) -> None:
    """The SDK's client cannot declare the ``tasks`` capability, so this one speaks JSON-RPC
    itself (tests/tools/mcp_stdio.py), at revision 2025-11-25."""
    _spawn(running, "builder", ASKING)
    mcp = McpProcess(
        running.root,
        "--session",
        str(running.supervisor.session_dir),
        version="2025-11-25",
        capabilities={"tasks": {"list": {}, "cancel": {}}},
    )
    try:
        created = mcp.request(
            "tools/call",
            {
                "name": "shepherd_delegate",
                "arguments": {"target": "builder", "task": "build it"},
                "task": {"ttl": 60_000},
            },
        )
        task_id = created["task"]["taskId"]
        assert created["task"]["status"] == "working" and created["task"]["ttl"] == 60_000

        def next_status() -> dict[str, Any]:
            note = mcp.next_notification()
            while note.get("method") != "notifications/tasks/status":
                note = mcp.next_notification()
            assert note["params"]["taskId"] == task_id
            return note["params"]  # type: ignore[no-any-return]

        assert next_status()["status"] == "input_required"
        status = mcp.call("shepherd_status", {"agent": "builder"})
        (request,) = status["agents"][0]["task"]["pending_requests"]
        mcp.call(
            "shepherd_message",
            {"target": "builder", "message": "main", "reply_to": request["request_id"]},
        )
        statuses = [next_status()["status"]]
        while statuses[-1] != "completed":  # a look may catch it working again, or not
            statuses.append(next_status()["status"])
        assert set(statuses) <= {"working", "completed"}
        result = mcp.request("tasks/result", {"taskId": task_id})
        assert result["structuredContent"]["text"] == "built on main"
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    finally:
        mcp.close()


def test_an_approval_for_the_parent_makes_the_task_input_required(running: Running) -> None:
    agent = running.root / "asking_agent.py"
    agent.write_text(ASKING_AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    running.supervisor.session.spawn("pusher", adapter="command", cmd=cmd)

    async def scenario() -> None:
        with anyio.fail_after(SLOW_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                task = await _delegate_as_task(session, "pusher", "release 2")
                await _until(session, task.task_id, "input_required")
                status = await call(session, "shepherd_status", {"agent": "pusher"})
                (request,) = status["agents"][0]["task"]["pending_requests"]
                await call(session, "shepherd_approve", {"request_id": request["request_id"]})
                result = await _result(session, task.task_id)
                assert not result.is_error and result.structured_content is not None
                assert result.structured_content["status"] == "completed"
                assert (await _get(session, task.task_id)).status == "completed"

    anyio.run(scenario)


def test_delegate_many_as_a_task_ends_when_every_item_settled(running: Running) -> None:
    _spawn(running, "one", HOLDING)
    _spawn(running, "two", HOLDING)

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                params = types.CallToolRequestParams(
                    name="shepherd_delegate_many",
                    arguments={
                        "items": [{"target": "one", "task": "a"}, {"target": "two", "task": "b"}]
                    },
                    task=types.TaskMetadata(),
                ).model_dump(by_alias=True, mode="json", exclude_none=True)
                raw = await session._dispatcher.send_raw_request("tools/call", params)
                task = types.CreateTaskResult.model_validate(raw, by_name=False).task
                await call(session, "shepherd_message", {"target": "one", "message": "stop"})
                # one item settled (blocked), the other still open: still working
                while await _state(session, "one") != "blocked":
                    await anyio.sleep(0.05)  # polling a condition, under fail_after
                assert (await _get(session, task.task_id)).status == "working"
                await call(session, "shepherd_message", {"target": "two", "message": "stop"})
                result = await _result(session, task.task_id)
                assert result.is_error and result.structured_content is not None
                settled = result.structured_content["results"]
                assert [r["status"] for r in settled] == ["blocked", "blocked"]
                assert [r["text"] for r in settled] == ["blocked: stop"] * 2
                assert (await _get(session, task.task_id)).status == "failed"

    anyio.run(scenario)


async def _state(session: ClientSession, agent: str) -> str:
    status = await call(session, "shepherd_status", {"agent": agent})
    return str(status["agents"][0]["task"]["state"])


def test_finished_records_expire_after_their_ttl_and_lists_are_paged() -> None:
    """The records' bounds on a clock of our own: a finished task is forgotten ttl after it
    finished (a running one never), ``tasks/list`` pages, and the record count is capped."""
    now = [1000.0]
    tasks = McpTasks(
        lambda op, fields: None, lambda data: types.CallToolResult(content=[]), clock=lambda: now[0]
    )
    done = types.CallToolResult(content=[])

    def add(n: int, ttl_ms: int, finished: bool) -> list[str]:
        ids = []
        for i in range(n):
            record = _Record(
                task_id=f"shepherd-mcptask-{len(tasks._records):032x}",
                tool="shepherd_delegate",
                shepherd_ids=("shepherd-task-1",),
                ttl_ms=ttl_ms,
                created_at=now[0] + i / 1000,
            )
            tasks._records[record.task_id] = record
            if finished:
                tasks._finish(record, "completed", done, None)
            ids.append(record.task_id)
        return ids

    async def scenario() -> None:
        running = add(3, 1000, finished=False)
        finished = add(PAGE, 1000, finished=True)
        ctx: Any = None
        first = await tasks._list(ctx, types.PaginatedRequestParams())
        assert len(first.tasks) == PAGE and first.next_cursor is not None
        second = await tasks._list(ctx, types.PaginatedRequestParams(cursor=first.next_cursor))
        assert len(second.tasks) == 3 and second.next_cursor is None
        listed = {t.task_id for t in [*first.tasks, *second.tasks]}
        assert listed == {*running, *finished}

        now[0] += 1.001  # past the ttl of the finished ones; the running ones stay
        left = await tasks._list(ctx, types.PaginatedRequestParams())
        assert {t.task_id for t in left.tasks} == set(running)
        with pytest.raises(MCPError) as error:
            await tasks._get(ctx, types.GetTaskRequestParams(task_id=finished[0]))
        assert error.value.code == types.INVALID_PARAMS

        # at the cap the oldest finished record goes first
        oldest = add(1, 60_000, finished=True)[0]
        now[0] += 1.0  # within every ttl: only the cap makes room
        add(MAX_RECORDS - len(tasks._records), 60_000, finished=True)
        assert len(tasks._records) == MAX_RECORDS
        tasks._expire()
        assert oldest not in tasks._records and len(tasks._records) == MAX_RECORDS - 1

    anyio.run(scenario)


@pytest.mark.parametrize(
    ("states", "asks", "expected"),
    [
        (["created"], False, "working"),
        (["running"], False, "working"),
        (["waiting"], False, "working"),
        (["waiting"], True, "input_required"),
        (["completed"], False, "completed"),
        (["blocked"], False, "failed"),
        (["failed"], False, "failed"),
        (["timed_out"], False, "failed"),
        (["cancelled"], False, "cancelled"),
        (["completed", "running"], True, "input_required"),
        (["completed", "completed"], False, "completed"),
        (["cancelled", "cancelled"], False, "cancelled"),
        (["completed", "cancelled"], False, "failed"),
        (["completed", "timed_out"], False, "failed"),
    ],
)
def test_the_documented_state_mapping(states: list[str], asks: bool, expected: str) -> None:
    assert mcp_status(states, asks) == expected
