"""`shepherd serve --transport nats://...` end to end: a real `nats-server`, a real `serve`, real
bridges and command agents calling `shepherd-child`, driven from the CLI (the helpers of
tests/processes). Nothing sleeps: tests wait on output lines and on CLI round trips."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.transports.nats.server import NatsServer
from tests.processes.conftest import DIE_WITH_PYTEST, Serve, cli
from tests.reliability.live import session_pids, wait_gone

pytestmark = pytest.mark.processes

#: A command agent: prints what it was told, then acts on keywords in it with `shepherd-child`.
AGENT = textwrap.dedent(
    """
    import os, subprocess, sys
    message = sys.argv[-1]
    print("MSG:" + message.replace("\\n", " | "), flush=True)

    def child(*args):
        done = subprocess.run(["shepherd-child", *args, "--json"], capture_output=True, text=True)
        print("RC", args[0], done.returncode, done.stdout.strip(), flush=True)

    if "BLOCK-UNTIL " in message:
        path = message.split("BLOCK-UNTIL ", 1)[1].split()[0]
        os.mkfifo(path)
        print("BLOCKED", flush=True)
        with open(path) as fifo:  # blocks without CPU until the test opens it for writing
            fifo.read()
    if "TELL-BETA" in message:
        child("message", "beta", "hello beta from alpha")
        child("message", "shepherd", "progress from alpha")
    if "MARK-DONE" in message:
        child("done", "--status", "completed", "--summary", "done by " + os.environ["NAME"])
    """
)


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    """Every test here keeps its state out of the user's home (tests/conftest.py)."""
    return isolated_state


@pytest.fixture
def serve_nats(tmp_path: Path, nats_server: NatsServer) -> Iterator[Serve]:
    server = Serve(tmp_path / "session", dict(os.environ), "--transport", nats_server.url)
    try:
        assert server.wait_for(lambda lines: any("session" in x for x in lines)), _err(server)
        yield server
    finally:
        server.stop()


def _err(server: Serve) -> str:
    server.proc.poll()
    return f"serve exited {server.proc.returncode}" if server.proc.returncode is not None else ""


def _spawn(tmp_path: Path, session: Path, name: str) -> dict[str, Any]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    cmd = f"NAME={name} {shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    _, spawned = cli("spawn", name, "--adapter", "command", "--cmd", cmd, session=session)
    return spawned  # type: ignore[no-any-return]


def _read_until(session: Path, name: str, text: str, rounds: int = 300) -> list[str]:
    """``name``'s output once a line contains ``text`` (each round is a CLI round trip)."""
    lines: list[str] = []
    for _ in range(rounds):
        lines = cli("read", name, "--lines", "200", session=session)[1]["lines"]
        if any(text in line for line in lines):
            return lines
    raise AssertionError(f"{name} never printed {text!r}: {lines}")


def _notifications(session: Path) -> list[dict[str, Any]]:
    path = session / "notifications.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _consumers(url: str, stream: str) -> set[str]:
    async def names() -> set[str]:
        import nats

        nc = await nats.connect(url)
        try:
            return {c.name for c in await nc.jetstream().consumers_info(stream)}
        finally:
            await nc.close()

    return asyncio.run(names())


def _streams(url: str) -> list[str]:
    async def names() -> list[str]:
        import nats

        nc = await nats.connect(url)
        try:
            return [
                s.config.name
                for s in await nc.jetstream().streams_info()
                if s.config.name is not None  # a stream always has one
            ]
        finally:
            await nc.close()

    return asyncio.run(names())


def test_the_canonical_scenario_runs_over_nats_and_shutdown_deletes_the_streams(
    serve_nats: Serve, nats_server: NatsServer, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    info = json.loads((session / "session.json").read_text())
    assert info["mailbox"] == nats_server.url  # what the CLI and the agents are told
    sid = info["session_id"]
    assert sid in _streams(nats_server.url)

    alpha = _spawn(tmp_path, session, "alpha")
    beta = _spawn(tmp_path, session, "beta")
    _, status = cli("status", session=session)
    assert status["mailbox_wake"] == "nats"
    _, t_alpha = cli("delegate", "alpha", "TELL-BETA MARK-DONE", session=session)
    _, t_beta = cli("delegate", "beta", "MARK-DONE", session=session)
    ids = [t_alpha["task_id"], t_beta["task_id"]]
    _, watch = cli("watch", *ids, session=session)
    # a task already settled when the watch arrived is in its answer, and never notified
    inline = {r["task_id"] for r in watch["completed"]}
    _, waited = cli("wait", *ids, "--timeout", "90", session=session)
    results = {r["agent_name"]: r for r in waited["completed"]}
    assert waited["pending"] == [] and not waited["timed_out"], waited
    assert results["alpha"]["status"] == results["beta"]["status"] == "completed"
    assert (results["alpha"]["text"], results["beta"]["text"]) == ("done by alpha", "done by beta")

    # alpha's `shepherd-child message` reached beta (a turn of its own) and the parent
    beta_lines = _read_until(session, "beta", "hello beta from alpha")
    assert any(line.startswith("MSG:") and "hello beta from alpha" in line for line in beta_lines)
    alpha_lines = _read_until(session, "alpha", "RC done")
    assert [line.split()[2] for line in alpha_lines if line.startswith("RC ")] == ["0", "0", "0"]
    assert serve_nats.wait_for(
        lambda lines: any(x.get("content") == "progress from alpha" for x in lines)
    )

    _, status = cli("status", session=session)
    rows = {a["name"]: a for a in status["agents"]}
    assert rows["alpha"]["task"]["state"] == rows["beta"]["task"]["state"] == "completed"
    for agent in (alpha, beta):
        cli("close", agent["agent_id"], session=session)
    assert wait_gone(lambda: session_pids(sid), timeout=60)

    notes = _notifications(session)
    completed = Counter(
        r["task_id"] for n in notes if n["kind"] == "task_completion" for r in n["results"]
    )
    # every result once: notified, or carried by the watch's answer (then never notified)
    assert completed == Counter({t: 1 for t in ids if t not in inline})
    messages = Counter(n["message_id"] for n in notes if n["kind"] == "agent_message")
    assert messages and set(messages.values()) == {1}

    # every call's and every `shepherd-child` command's one-shot reply inbox is gone
    assert _consumers(nats_server.url, sid) == {"parent", alpha["agent_id"], beta["agent_id"]}
    rc, _ = cli("shutdown", session=session)
    assert rc == 0 and serve_nats.proc.wait(timeout=60) == 0
    assert not [name for name in _streams(nats_server.url) if name.startswith(sid)]


def test_a_nats_server_killed_mid_run_and_restarted_loses_nothing_accepted(
    serve_nats: Serve, nats_server: NatsServer, tmp_path: Path
) -> None:
    """The agent's `done` is accepted by the server while the parent is stopped, then the
    server is SIGKILLed and restarted on its store: the parent handles the `done` once."""
    session = tmp_path / "session"
    sid = json.loads((session / "session.json").read_text())["session_id"]
    _spawn(tmp_path, session, "alpha")
    fifo = tmp_path / "release"
    _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
    cli("watch", task["task_id"], session=session)
    _read_until(session, "alpha", "BLOCKED")

    os.kill(serve_nats.proc.pid, signal.SIGSTOP)  # the parent reads nothing meanwhile
    try:
        with open(fifo, "w"):
            pass  # the agent goes on: `shepherd-child done` publishes into the parent inbox
        assert _wait_stored(nats_server.url, sid), "the done never reached the stream"
        nats_server.kill()
        restarted = NatsServer(
            store_dir=nats_server.store_dir,
            name=nats_server.name,
            port=nats_server.port,
            http_port=nats_server.http_port,
        ).start()
        try:
            restarted.wait_ready()
        except BaseException:
            restarted.kill()
            raise
        nats_server.process = restarted.process  # the fixture kills it at the end
    finally:
        os.kill(serve_nats.proc.pid, signal.SIGCONT)

    _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
    (result,) = waited["completed"]
    assert (result["status"], result["text"]) == ("completed", "done by alpha")
    assert serve_nats.wait_for(
        lambda lines: any(x.get("kind") == "task_completion" for x in lines), timeout=60
    )
    notes = _notifications(session)
    completed = [
        r["task_id"] for n in notes if n["kind"] == "task_completion" for r in n["results"]
    ]
    assert completed == [task["task_id"]]


def _wait_stored(url: str, session_id: str, ceiling_s: float = 60.0) -> bool:
    """Until the parent's inbox subject holds a message (each round is a server round trip)."""
    subject = f"shepherd.{session_id}.in.parent"

    async def held() -> bool:
        import nats

        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + ceiling_s
            while time.monotonic() < deadline:
                info = await js.stream_info(session_id, subjects_filter=subject)
                if (info.state.subjects or {}).get(subject):
                    return True
            return False
        finally:
            await nc.close()

    return asyncio.run(held())


@pytest.mark.parametrize(
    ("transport", "code", "words"),
    [
        ("http://127.0.0.1:4222", "invalid_argument", "scheme 'http'"),
        ("", "invalid_argument", "empty"),
        ("nats://127.0.0.1", "invalid_argument", "no port"),
        ("nats://127.0.0.1:NaN", "invalid_argument", "1..65535"),
        ("nats://127.0.0.1:-1", "invalid_argument", "1..65535"),
        ("nats://u:p@127.0.0.1:4222", "invalid_argument", "credentials"),
        ("nats://" + ",".join(f"h{i}:1" for i in range(17)), "limit_exceeded", "at most 16"),
        ("nats://" + "a" * 5000 + ":1", "limit_exceeded", "at most 2048"),
    ],
)
def test_a_bad_transport_is_refused_before_anything_is_made(
    tmp_path: Path, transport: str, code: str, words: str
) -> None:
    session = tmp_path / "session"
    done = _serve_once(session, transport, timeout=60)
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 2 and error["code"] == code and words in error["message"]
    assert "--transport" in error["message"]
    assert not session.exists()


def test_an_unreachable_server_is_session_unavailable_naming_it_within_a_bound(
    tmp_path: Path,
) -> None:
    from actors.transports.nats.server import free_port

    url = f"nats://127.0.0.1:{free_port()}"  # nobody listens there
    started = time.monotonic()
    done = _serve_once(tmp_path / "session", url, timeout=90)
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 2 and error["code"] == "session_unavailable"
    assert url in error["message"]
    assert time.monotonic() - started < 60  # a bounded wait, never a hang
    assert not (tmp_path / "session" / "session.json").exists()


def _serve_once(session: Path, transport: str, timeout: float) -> subprocess.CompletedProcess[str]:
    argv = [*DIE_WITH_PYTEST, sys.executable, "-m", "actors.surfaces.cli", "serve"]
    argv += ["--session-dir", str(session), "--transport", transport, "--json"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def test_a_parent_killed_and_served_again_resumes_over_the_recorded_servers(
    serve_nats: Serve, nats_server: NatsServer, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    _spawn(tmp_path, session, "alpha")
    fifo = tmp_path / "release"
    _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
    cli("watch", task["task_id"], session=session)
    _read_until(session, "alpha", "BLOCKED")
    serve_nats.stop(signal.SIGKILL)

    # the session stays where it was recorded: another transport is refused
    moved = _serve_once(session, "nats://127.0.0.1:1", timeout=60)
    error = json.loads(moved.stdout)["error"]
    assert (moved.returncode, error["code"]) == (2, "invalid_argument")
    assert nats_server.url in error["message"]

    second = Serve(session, dict(os.environ))  # no --transport: session.json says where
    try:
        assert second.wait_for(lambda lines: any("session" in x for x in lines)), _err(second)
        with open(fifo, "w"):
            pass  # the agent's `done` goes to the resumed parent through the same servers
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        (result,) = waited["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha")
        assert second.wait_for(
            lambda lines: any(x.get("kind") == "task_completion" for x in lines), timeout=60
        )
        notes = _notifications(session)
        completed = [
            r["task_id"] for n in notes if n["kind"] == "task_completion" for r in n["results"]
        ]
        assert completed == [task["task_id"]]
    finally:
        second.stop()
