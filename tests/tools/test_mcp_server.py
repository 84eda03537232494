"""The MCP server, driven by the MCP SDK's own client over stdio: ``python -m
actors.surfaces.mcp_server``
runs as a subprocess against a real session (a ``Supervisor`` in this process) whose agents are
real ``shepherd-child`` processes. No mocks; waits are on conditions, never on sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from protocol.ops import tools
from protocol.records.notifications import AnyNotification, Notice, TaskCompletion

from .conftest import Running

pytestmark = pytest.mark.processes

DEADLINE_S = 60.0

#: two tasks, each done only after a message from the parent, so each is certainly still
#: pending when it is watched; each task's work is a tool call (a claim with none is told to
#: the parent first, as ``unverified_claim``: not what these tests are about)
SCRIPT = {
    "steps": [
        {"await": "task"},
        {"say": "working on: {last}"},
        {"run": "echo working"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "done after: {last}"}},
        {"await": "task"},
        {"run": "echo working"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "also done after: {last}"}},
        {"await": "any"},
    ]
}

#: a schema-valid call of every MCP tool
VALID_CALLS: dict[str, dict[str, Any]] = {
    "shepherd_spawn": {"name": "scout", "script": "scout.json"},
    "shepherd_delegate": {"target": "scout", "task": "look"},
    "shepherd_delegate_many": {"items": [{"target": "scout", "task": "look"}]},
    "shepherd_spawn_many": {"names": ["scout"], "script": "scout.json"},
    "shepherd_message": {"target": "scout", "message": "hi"},
    "shepherd_watch": {"ids": ["t-1"]},
    "shepherd_status": {},
    "shepherd_close": {"agent": "scout"},
    "shepherd_read": {"agent": "scout"},
    "shepherd_cancel": {"task_id": "t-1"},
    "watchdog_list_targets": {},
    "watchdog_read_events": {"agent": "scout"},
    "watchdog_detect_stuck": {"agent": "scout"},
    "watchdog_alert_main": {"agent": "scout"},
    "watchdog_steer_subagent": {"agent": "scout"},
    "watchdog_config": {},
    "shepherd_notifications": {},
    "shepherd_worktrees": {},
    "shepherd_merge": {"agent": "scout"},
    "shepherd_approve": {"request_id": "shepherd-message-0123456789abcdef"},
    "shepherd_deny": {"request_id": "shepherd-message-0123456789abcdef", "reason": "no"},
}


@asynccontextmanager
async def mcp_session(cwd: Path, session_dir: Path | str) -> AsyncIterator[ClientSession]:
    """``python -m actors.surfaces.mcp_server --session DIR`` under the SDK's stdio client."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "actors.surfaces.mcp_server", "--session", str(session_dir)],
        env={
            "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"],
            "SHEPHERD_LOG_LEVEL": "WARNING",
        },
        cwd=cwd,
    )
    with open(cwd / "mcp-server.stderr", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A successful call's structured result (it must equal the JSON text too)."""
    result = await session.call_tool(name, arguments)
    assert isinstance(result, types.CallToolResult)
    text = _text(result)
    assert not result.is_error, f"{name} failed: {text}"
    assert result.structured_content == json.loads(text)
    data: dict[str, Any] = result.structured_content
    return data


async def call_error(
    session: ClientSession, name: str, arguments: dict[str, Any]
) -> dict[str, str]:
    result = await session.call_tool(name, arguments)
    assert isinstance(result, types.CallToolResult)
    assert result.is_error, f"{name} should have failed: {_text(result)}"
    body = json.loads(_text(result))
    assert result.structured_content == body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    error: dict[str, str] = body["error"]
    return error


def _text(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def wait_for_sink(
    running: Running, predicate: Callable[[list[AnyNotification]], bool]
) -> None:
    ok = await anyio.to_thread.run_sync(lambda: running.sink.wait_for(predicate, DEADLINE_S))
    assert ok, f"no such notification within {DEADLINE_S}s: {running.sink.items}"


def _completions(notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [n for n in notes if n["kind"] == "task_completion"]


def _server_log(root: Path) -> str:
    path = root / "mcp-server.stderr"
    return path.read_text()[-4000:] if path.exists() else ""


# ----------------------------------------------------------------------------- tests


def test_tools_are_listed_with_the_exact_schemas_and_errors_are_tool_errors(
    running: Running,
) -> None:
    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                listed = await session.list_tools()
                by_name = {tool.name: tool for tool in listed.tools}
                assert list(by_name) == [spec.name for spec in tools.mcp_tools()]
                for spec in tools.mcp_tools():
                    tool = by_name[spec.name]
                    assert tool.input_schema == tools.to_json(spec)["parameters"]
                    assert tool.description == spec.description
                    assert tool.title == spec.label

                status = await call(session, "shepherd_status", {})
                assert status["session_id"] == running.supervisor.session_id
                assert status["agents"] == []

                # a refusal by the session keeps its code
                err = await call_error(
                    session, "shepherd_delegate", {"target": "nobody", "task": "x"}
                )
                assert err["code"] == "invalid_handle"
                # a call that breaks the schema is refused before it reaches the session
                err = await call_error(session, "shepherd_watch", {"ids": []})
                assert err["code"] == "invalid_argument"
                assert "shepherd_watch" in err["message"] and "ids" in err["message"]
                err = await call_error(session, "shepherd_done", {"status": "completed"})
                assert err["code"] == "invalid_argument"  # a child tool is not served here

                # nothing happened yet, and a bounded wait says so
                notes = await call(session, "shepherd_notifications", {"wait_seconds": 0.2})
                assert notes["notifications"] == []

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise


def test_a_nan_or_infinite_deadline_over_mcp_is_refused_never_read_as_no_deadline(
    running: Running,
) -> None:
    """The MCP client sends NaN and infinities as JSON ``null``; no tool schema allows
    ``null``, so the call is refused naming the field, and no task starts."""
    (running.root / "idle.json").write_text(json.dumps({"steps": [{"await": "any"}]}))

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                await call(session, "shepherd_spawn", {"name": "idle", "script": "idle.json"})
                for bad in (float("nan"), float("inf"), float("-inf"), None):
                    err = await call_error(
                        session,
                        "shepherd_delegate",
                        {"target": "idle", "task": "x", "timeout_minutes": bad},
                    )
                    assert err["code"] == "invalid_argument", err
                    assert "timeout_minutes" in err["message"], err
                status = await call(session, "shepherd_status", {})
                assert [a["task"] for a in status["agents"]] == [None]

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise


def test_without_a_session_every_tool_says_session_unavailable(
    tmp_path: Path, state_home: Path
) -> None:
    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(tmp_path, tmp_path / "no-session") as session:
                assert len((await session.list_tools()).tools) == len(tools.mcp_tools())
                for spec in tools.mcp_tools():
                    err = await call_error(session, spec.name, VALID_CALLS[spec.name])
                    assert err["code"] == "session_unavailable", spec.name

    anyio.run(scenario)


def test_a_parent_over_mcp_delegates_watches_and_gets_each_completion_once(
    running: Running,
) -> None:
    script = running.root / "worker.json"
    script.write_text(json.dumps(SCRIPT))

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                # a relative script path means the MCP server's directory, not the session's
                spawned = await call(
                    session, "shepherd_spawn", {"name": "worker", "script": "worker.json"}
                )
                assert spawned["name"] == "worker" and spawned["adapter"] == "scripted"
                agent_id = spawned["agent_id"]

                delegated = await call(
                    session, "shepherd_delegate", {"target": "worker", "task": "first"}
                )
                assert delegated["agent_id"] == agent_id and delegated["accepted"] is True
                first = delegated["task_id"]

                watched = await call(session, "shepherd_watch", {"ids": [first]})
                assert watched["ids"] == [first]
                assert watched["pending"] == [first] and watched["completed"] == []

                status = await call(session, "shepherd_status", {"agent": "worker"})
                (row,) = status["agents"]
                assert row["agent_id"] == agent_id and row["name"] == "worker"
                assert row["task"]["task_id"] == first
                assert row["task"]["state"] in ("created", "running")
                early = (await call(session, "shepherd_notifications", {}))["notifications"]
                assert _completions(early) == []  # (its turn may have ended: that is told)

                sent = await call(
                    session, "shepherd_message", {"target": "worker", "message": "go ahead"}
                )
                assert sent["accepted"] is True

                # the completion reaches the session's sinks; then MCP returns it, once
                await wait_for_sink(
                    running,
                    lambda items: any(
                        isinstance(n, TaskCompletion) and any(r.task_id == first for r in n.results)
                        for n in items
                    ),
                )
                notes = (await call(session, "shepherd_notifications", {}))["notifications"]
                (completion,) = _completions(notes)
                (result,) = completion["results"]
                assert result["task_id"] == first
                assert result["status"] == "completed"
                assert result["text"] == "done after: go ahead"
                again = await call(session, "shepherd_notifications", {})
                assert again["notifications"] == [], "a notification was returned twice"

                # the second task completes while the parent is waiting in shepherd_notifications:
                # the message that finishes it is a concurrent call, so a server that ran calls
                # one at a time would return the wait empty
                second = (
                    await call(session, "shepherd_delegate", {"target": agent_id, "task": "more"})
                )["task_id"]
                watched = await call(session, "shepherd_watch", {"ids": [second]})
                assert watched["pending"] == [second]
                # the worker's turn ends at `await message` with the task open: the parent is
                # told (once); that notice is collected first, so the wait below has only the
                # completion to wait for
                await wait_for_sink(
                    running,
                    lambda items: any(
                        isinstance(n, Notice)
                        and n.code == "turn_ended_without_done"
                        and n.task_id == second
                        for n in items
                    ),
                )
                told = (await call(session, "shepherd_notifications", {}))["notifications"]
                assert [n["task_id"] for n in told if n.get("code") == "turn_ended_without_done"][
                    -1
                ] == second
                assert _completions(told) == []
                waited: dict[str, Any] = {}

                async def wait_for_notes() -> None:
                    args = {"wait_seconds": 30}
                    waited.update(await call(session, "shepherd_notifications", args))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait_for_notes)
                    await call(session, "shepherd_message", {"target": "worker", "message": "end"})
                (completion,) = _completions(waited["notifications"])
                assert [r["task_id"] for r in completion["results"]] == [second]
                assert completion["results"][0]["text"] == "also done after: end"
                again = await call(session, "shepherd_notifications", {})
                assert again["notifications"] == []

                read = await call(session, "shepherd_read", {"agent": "worker", "lines": 20})
                assert read["agent_id"] == agent_id

                # a third task, cancelled; then the session ends before the parent looks:
                # what it wrote is still returned, once, and then the session is gone
                third = (
                    await call(session, "shepherd_delegate", {"target": "worker", "task": "x"})
                )["task_id"]
                await call(session, "shepherd_watch", {"ids": [third]})
                cancelled = await call(session, "shepherd_cancel", {"task_id": third})
                assert cancelled["status"] == "cancelled"
                await wait_for_sink(
                    running,
                    lambda items: any(
                        isinstance(n, TaskCompletion) and any(r.task_id == third for r in n.results)
                        for n in items
                    ),
                )
                await anyio.to_thread.run_sync(running.supervisor.shutdown)
                last = await call(session, "shepherd_notifications", {})
                assert last["ended"] is True
                assert [
                    r["task_id"] for r in _completions(last["notifications"])[0]["results"]
                ] == [third]
                err = await call_error(session, "shepherd_notifications", {})
                assert err["code"] == "session_unavailable"
                err = await call_error(session, "shepherd_status", {})
                assert err["code"] == "session_unavailable"

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise


def test_a_parent_over_mcp_gives_an_agent_a_worktree(running: Running) -> None:
    """spawn's worktree fields and the worktrees tool, over MCP: a relative repo is the MCP
    server's directory; a hostile one is a typed error naming the field."""
    repo = running.root / "repo"
    repo.mkdir()
    for argv in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "0"]):
        subprocess.run(
            ["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *argv],
            cwd=repo,
            check=True,
            capture_output=True,
        )
    script = running.root / "worker.json"
    script.write_text(json.dumps(SCRIPT))

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                args = {"name": "worker", "script": "worker.json", "worktree": True}
                await call(session, "shepherd_spawn", {**args, "repo": "repo"})
                listed = await call(session, "shepherd_worktrees", {})
                (row,) = listed["worktrees"]
                assert (row["agent"], row["state"], row["changed_files"]) == ("worker", "clean", 0)
                assert row["path"] == str(running.supervisor.session_dir / "worktrees" / "worker")
                for bad, field in (
                    ({"repo": "missing"}, "repo"),
                    ({"repo": "repo", "branch": "no..dots"}, "branch"),
                    ({"repo": "repo", "branch": "b" * 201}, "branch"),
                ):
                    err = await call_error(
                        session, "shepherd_spawn", {**args, "name": "other", **bad}
                    )
                    assert err["code"] == "invalid_argument" and field in err["message"], err

    anyio.run(scenario)


def test_a_parent_over_mcp_spawns_and_delegates_many_at_once_bad_items_refused_alone(
    running: Running,
) -> None:
    (running.root / "done.json").write_text(
        json.dumps({"steps": [{"await": "task"}, {"done": {"status": "completed"}}]})
    )

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                spawned = await call(
                    session,
                    "shepherd_spawn_many",
                    {"names": ["w0", "Bad Name", "w1", "w0"], "script": "done.json"},
                )
                agents = spawned["agent_ids"]
                assert agents[0] and agents[2] and agents[1] is None and agents[3] is None
                assert [(e["index"], e["code"]) for e in spawned["errors"]] == [
                    (1, "invalid_argument"),
                    (3, "invalid_argument"),
                ]
                bad: dict[str, Any]
                for bad in ({"names": []}, {"names": ["x"] * 1000}, {"names": ["x"], "cwd": None}):
                    err = await call_error(session, "shepherd_spawn_many", bad)
                    assert err["code"] == "invalid_argument", err
                err = await call_error(
                    session, "shepherd_spawn_many", {"names": ["w9"], "script": "missing.json"}
                )
                assert "missing.json" in err["message"], err  # the options are checked once
                items: list[dict[str, Any]] = [
                    {"target": "w0", "task": "a"},
                    {"target": "nobody", "task": "b"},
                    {"target": "w0", "task": "again"},
                    {"target": "w1", "task": "c", "timeout_minutes": 5},
                ]
                many = await call(
                    session, "shepherd_delegate_many", {"items": items, "watch": True}
                )
                ids = many["task_ids"]
                assert ids[0] and ids[3] and ids[1] is None and ids[2] is None
                assert [(e["index"], e["code"]) for e in many["errors"]] == [
                    (1, "invalid_handle"),
                    (2, "agent_busy"),
                ]
                assert many["watcher_id"]
                # hostile calls are refused whole, before the session: nothing more is started
                for bad in (
                    {"items": []},
                    {"items": [items[0]] * 1000},
                    {"items": [{**items[0], "timeout_minutes": None}]},
                ):
                    err = await call_error(session, "shepherd_delegate_many", bad)
                    assert err["code"] == "invalid_argument" and "items" in err["message"]
                # each accepted task's completion reaches the parent once
                await wait_for_sink(
                    running,
                    lambda items: (
                        {
                            r.task_id
                            for n in items
                            if isinstance(n, TaskCompletion)
                            for r in n.results
                        }
                        >= {ids[0], ids[3]}
                    ),
                )
                got = [
                    r["task_id"]
                    for n in _completions(
                        (await call(session, "shepherd_notifications", {}))["notifications"]
                    )
                    for r in n["results"]
                ]
                assert sorted(got) == sorted([ids[0], ids[3]])

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise
