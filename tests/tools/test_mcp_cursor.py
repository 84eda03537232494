"""``shepherd_notifications`` over MCP: a durable cursor per client (a restarted server goes on
where the last one stopped), bounded answers, and a wait that needs no inotify instance.

The session is a real ``Supervisor`` in this process; its notifications are written through
its own notifications file (what every sink of the session writes to)."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from actors.records.mcp_cursor import MAX_BYTES, MAX_LINE_BYTES, MAX_NOTES, CursorStore
from actors.surfaces import mcp_server
from protocol.core.errors import InvalidArgument
from protocol.records.notifications import Notice

from .conftest import Running
from .mcp_stdio import McpProcess

pytestmark = pytest.mark.processes


def _note(running: Running, text: str) -> None:
    running.supervisor.notifications(Notice(created_at=0.0, code="test", text=text))


def _texts(answer: dict[str, Any]) -> list[str]:
    return [n["text"] for n in answer["notifications"]]


def _server(running: Running, *extra: str) -> McpProcess:
    return McpProcess(running.root, "--session", str(running.supervisor.session_dir), *extra)


def test_a_restarted_mcp_server_continues_where_the_killed_one_stopped(running: Running) -> None:
    for i in range(3):
        _note(running, f"early {i}")
    first = _server(running)
    try:
        assert _texts(first.call("shepherd_notifications", {})) == ["early 0", "early 1", "early 2"]
        for i in range(2):
            _note(running, f"late {i}")
    finally:
        first.kill()  # SIGKILL: nothing of the server's runs after this

    second = _server(running)
    try:
        answer = second.call("shepherd_notifications", {})
        assert _texts(answer) == ["late 0", "late 1"], "a restarted server replayed"
        assert answer["more"] is False and answer["client"] == "default"
        assert _texts(second.call("shepherd_notifications", {})) == []
    finally:
        second.close()
    # the cursor is the session's, private
    folder = running.supervisor.session_dir / "mcp-cursors"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "default.json").stat().st_mode) == 0o600


def test_two_named_clients_each_get_every_notification_once(running: Running) -> None:
    session_dir = str(running.supervisor.session_dir)

    async def texts(app: mcp_server.ShepherdMcp) -> list[str]:
        result = await app.call("shepherd_notifications", {})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return _texts(result.structured_content)

    async def scenario() -> None:
        alpha, beta = (mcp_server.ShepherdMcp(session_dir, name) for name in ("alpha", "beta"))
        _note(running, "one")
        assert await texts(alpha) == ["one"]
        _note(running, "two")
        assert await texts(beta) == ["one", "two"]
        assert await texts(alpha) == ["two"]
        # a new server for "alpha" (another process's, as far as the cursor knows) goes on
        _note(running, "three")
        assert await texts(mcp_server.ShepherdMcp(session_dir, "alpha")) == ["three"]
        assert await texts(alpha) == []
        assert await texts(beta) == ["three"]

    anyio.run(scenario)


def test_servers_sharing_a_client_name_never_return_a_line_twice(running: Running) -> None:
    """Two servers of one name at once: the cursor's lock splits the lines between them."""
    session_dir = str(running.supervisor.session_dir)
    total = 200
    got: list[list[str]] = [[], []]

    async def drain(app: mcp_server.ShepherdMcp, into: list[str]) -> None:
        while len(got[0]) + len(got[1]) < total:
            result = await app.call("shepherd_notifications", {"wait_seconds": 0.05})
            assert result.structured_content is not None
            into.extend(_texts(result.structured_content))

    async def scenario() -> None:
        apps = [mcp_server.ShepherdMcp(session_dir) for _ in range(2)]
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for app, into in zip(apps, got, strict=True):
                    tg.start_soon(drain, app, into)
                for i in range(total):
                    await anyio.to_thread.run_sync(_note, running, f"n{i}")

    anyio.run(scenario)
    assert sorted(got[0] + got[1]) == sorted(f"n{i}" for i in range(total))


def test_an_answer_is_bounded_and_says_more_are_waiting(running: Running) -> None:
    session_dir = str(running.supervisor.session_dir)
    total = 2 * MAX_NOTES + 50
    for i in range(total):
        _note(running, f"n{i}")
    big = "x" * (MAX_BYTES // 3)
    for _ in range(4):
        _note(running, big)
    _note(running, "y" * (MAX_BYTES + 10))  # longer than one batch: returned alone
    _note(running, "z" * (MAX_LINE_BYTES + 10))  # too long for any answer: a stub
    _note(running, "after")

    async def answers() -> list[dict[str, Any]]:
        app = mcp_server.ShepherdMcp(session_dir)
        out: list[dict[str, Any]] = []
        while True:
            result = await app.call("shepherd_notifications", {})
            assert result.structured_content is not None
            out.append(result.structured_content)
            if not result.structured_content["more"]:
                return out

    got = anyio.run(answers)
    counts = [len(a["notifications"]) for a in got]
    assert counts[:2] == [MAX_NOTES, MAX_NOTES] and max(counts) == MAX_NOTES
    assert all(a["more"] for a in got[:-1])
    for answer in got:
        lines = [json.dumps(n) for n in answer["notifications"]]
        assert len(lines) == 1 or sum(len(x) for x in lines) <= MAX_BYTES
    texts = [n.get("text") for a in got for n in a["notifications"]]
    assert texts[:total] == [f"n{i}" for i in range(total)]
    assert texts[total : total + 4] == [big] * 4
    assert texts[total + 4] == "y" * (MAX_BYTES + 10)
    oversized = [n for a in got for n in a["notifications"] if n.get("oversized")]
    assert len(oversized) == 1 and oversized[0]["bytes"] > MAX_LINE_BYTES
    assert texts[-1] == "after"


def test_the_wait_needs_no_inotify_instance(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's inotify instances are used up: every watch fails with EMFILE, as inotify_init
    does then. A waiting call still returns the notification written during its wait."""
    import watchfiles
    import watchfiles._rust_notify

    def exhausted(*args: object, **kwargs: object) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    for module, name in (
        (watchfiles, "awatch"),
        (watchfiles, "watch"),
        (watchfiles._rust_notify, "RustNotify"),
    ):
        monkeypatch.setattr(module, name, exhausted)
    first_read = threading.Event()
    original = CursorStore.take

    def take(self: Any, info: Any) -> Any:
        batch = original(self, info)
        first_read.set()  # the server read nothing; from here it waits
        return batch

    monkeypatch.setattr(CursorStore, "take", take)

    def write_during_the_wait() -> None:
        assert first_read.wait(30)
        _note(running, "while waiting")

    async def scenario() -> types.CallToolResult:
        app = mcp_server.ShepherdMcp(str(running.supervisor.session_dir))
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, write_during_the_wait)
            with anyio.fail_after(20):  # well before the wait's own end
                return await app.call("shepherd_notifications", {"wait_seconds": 60})
        raise AssertionError("unreachable")

    result = anyio.run(scenario)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert _texts(result.structured_content) == ["while waiting"]


def test_a_bad_client_name_is_refused_naming_the_option(tmp_path: Path) -> None:
    for bad in ("", "../escape", "a/b", "x" * 65, "-dash", "a b"):
        with pytest.raises(InvalidArgument, match="--client"):
            mcp_server.ShepherdMcp(None, bad)
    # and at the command line: a typed error, before anything is served
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", "mcp", "--client=../escape"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "invalid_argument" in done.stderr and "--client" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_cursor_that_does_not_fit_the_file_starts_again(running: Running) -> None:
    """A replay beats a loss: a cursor that cannot be read, that points into a line, or that
    belongs to a replaced file starts again from the beginning (once, with a warning)."""
    session_dir = running.supervisor.session_dir
    cursor = session_dir / "mcp-cursors" / "default.json"
    _note(running, "one")
    _note(running, "two")

    async def texts() -> list[str]:
        result = await mcp_server.ShepherdMcp(str(session_dir)).call("shepherd_notifications", {})
        assert result.structured_content is not None, result.content
        return _texts(result.structured_content)

    assert anyio.run(texts) == ["one", "two"]
    cursor.write_text("{not json")
    assert anyio.run(texts) == ["one", "two"]
    assert anyio.run(texts) == []
    stored = json.loads(cursor.read_text())
    cursor.write_text(json.dumps({**stored, "offset": stored["offset"] - 3}))
    assert anyio.run(texts) == ["one", "two"]
    replaced = session_dir / "notifications.new"
    replaced.write_text(json.dumps({"kind": "notice", "text": "fresh"}) + "\n")
    os.replace(replaced, session_dir / "notifications.jsonl")
    assert anyio.run(texts) == ["fresh"]
    assert anyio.run(texts) == []
