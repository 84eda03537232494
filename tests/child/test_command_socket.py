"""The bridge's command socket (``actors.runtime.command_socket``) and ``shepherd-child``'s
entry point (``actors.child.entry``): a call sent to the socket runs there with the caller's
environment and prints what the command line would; a call nobody takes runs in the caller; a
request the bridge cannot use runs nowhere; the forwarded path loads none of the command
line."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from actors.child.cli import run_captured
from actors.runtime.command_socket import CommandServer, Request
from actors.runtime.command_wire import (
    CHILD_COMMANDS,
    ENV_COMMAND_SOCKET,
    MAX_REQUEST_BYTES,
    READY,
    forward,
    socket_address,
)
from protocol.wire.envelopes import MessageEnvelope
from tests.entrypoints import run_entry

from .conftest import FakeParent

pytestmark = pytest.mark.processes


@pytest.fixture
def recording() -> Iterator[tuple[CommandServer, list[list[str]]]]:
    """A server whose runner only notes the arguments of what it runs."""
    ran: list[list[str]] = []

    def record(request: Request) -> tuple[int, str, str]:
        ran.append(request.argv)
        return 0, "", ""

    commands = CommandServer(record, CHILD_COMMANDS)
    try:
        yield commands, ran
    finally:
        commands.close()


@pytest.fixture
def server() -> Iterator[CommandServer]:
    commands = CommandServer(run_captured, CHILD_COMMANDS)
    try:
        yield commands
    finally:
        commands.close()


def _entry(
    parent: FakeParent, tmp_path: Path, env: Mapping[str, str], *args: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    return run_entry("actors.child.entry", tmp_path / "modules.json", args, parent.tmp_path, env)


def _raw(address: str, payload: bytes) -> dict[str, object]:
    """Send ``payload`` as a request and read the bridge's answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_address(address) or "")
        assert conn.recv(64) == READY
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        data = b"".join(iter(lambda: conn.recv(65536), b""))
    answer: dict[str, object] = json.loads(data)
    return answer


def test_a_call_through_the_socket_reaches_the_parent_and_loads_nothing_heavy(
    parent: FakeParent, tmp_path: Path, server: CommandServer
) -> None:
    env = parent.environ(**{ENV_COMMAND_SOCKET: server.address})
    done, modules = _entry(parent, tmp_path, env, "message", "--json", "--", "planner", "hi")
    assert done.returncode == 0, done.stdout + done.stderr
    receipt = json.loads(done.stdout)
    assert receipt["accepted"] is True
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope))
    assert isinstance(sent, MessageEnvelope)
    assert (sent.message_id, sent.content, sent.sender_id) == (
        receipt["message_id"],
        "hi",
        parent.agent_id,  # the caller's identity, from the environment it sent
    )
    # the caller ran neither the command line, nor the mailbox, nor msgspec
    heavy = ("msgspec", "actors.child.cli", "actors.transports.mailbox", "argparse")
    assert [m for m in modules if m.startswith(heavy)] == []


def test_errors_through_the_socket_look_as_they_do_without_it(
    parent: FakeParent, tmp_path: Path, server: CommandServer
) -> None:
    args = ("message", "--json", "--", "not a name!", "hi")
    with_socket, _ = _entry(
        parent, tmp_path, parent.environ(**{ENV_COMMAND_SOCKET: server.address}), *args
    )
    without, _ = _entry(parent, tmp_path, parent.environ(), *args)
    assert (with_socket.returncode, with_socket.stdout, with_socket.stderr) == (
        without.returncode,
        without.stdout,
        without.stderr,
    )
    assert with_socket.returncode == 2
    assert json.loads(with_socket.stdout)["error"]["code"] == "invalid_argument"
    # a caller without the session's variables is told so, as without the socket
    bare = parent.environ(SHEPHERD_CAPABILITY=None, **{ENV_COMMAND_SOCKET: server.address})
    refused, _ = _entry(parent, tmp_path, bare, *args[:2], "--", "planner", "hi")
    assert refused.returncode == 2
    assert json.loads(refused.stdout)["error"]["code"] == "session_unavailable"


def test_a_socket_nobody_takes_runs_the_call_here(parent: FakeParent, tmp_path: Path) -> None:
    gone = CommandServer(run_captured, CHILD_COMMANDS)
    address = gone.address
    gone.close()
    env = parent.environ(**{ENV_COMMAND_SOCKET: address})
    done, modules = _entry(parent, tmp_path, env, "message", "--json", "--", "planner", "hi")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["accepted"] is True
    assert "actors.child.cli" in modules  # run in the caller


@pytest.mark.parametrize("value", ["", "relative/path", "@", "@" + "x" * 101, "/tmp/sock"])
def test_a_malformed_socket_variable_runs_the_call_here(
    parent: FakeParent, tmp_path: Path, value: str
) -> None:
    assert socket_address(value) is None
    env = parent.environ(**{ENV_COMMAND_SOCKET: value})
    done, modules = _entry(parent, tmp_path, env, "message", "--json", "--", "planner", "hi")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "actors.child.cli" in modules


def test_a_busy_bridge_leaves_the_call_to_its_caller(parent: FakeParent, tmp_path: Path) -> None:
    release = threading.Event()
    started = threading.Event()

    def stuck(request: Request) -> tuple[int, str, str]:
        started.set()
        release.wait(60)
        return 0, "", ""

    busy = CommandServer(stuck, CHILD_COMMANDS, max_running=1)
    holding = {"argv": ["done"], "env": {}}
    holder = threading.Thread(
        target=functools.partial(forward, silent=lambda: 3, answer_within=None),
        args=(socket_address(busy.address), holding, lambda: 2),
        daemon=True,
    )
    try:
        holder.start()
        assert started.wait(60)
        env = parent.environ(**{ENV_COMMAND_SOCKET: busy.address})
        done, modules = _entry(parent, tmp_path, env, "message", "--json", "--", "planner", "x")
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["accepted"] is True
        assert "actors.child.cli" in modules  # the bridge said busy: run in the caller
    finally:
        release.set()
        holder.join(60)
        busy.close()


def test_a_bridge_that_ends_mid_call_is_session_unavailable_never_a_second_try(
    parent: FakeParent, tmp_path: Path
) -> None:
    def dies(request: Request) -> tuple[int, str, str]:
        raise RuntimeError("the bridge went away")

    dying = CommandServer(dies, CHILD_COMMANDS)
    try:
        env = parent.environ(**{ENV_COMMAND_SOCKET: dying.address})
        for as_json in (True, False):
            args = ["message", *(["--json"] if as_json else []), "--", "planner", "x"]
            done, modules = _entry(parent, tmp_path, env, *args)
            assert done.returncode == 2
            if as_json:
                assert json.loads(done.stdout)["error"]["code"] == "session_unavailable"
            else:
                assert "(session_unavailable)" in done.stderr
            assert "actors.child.cli" not in modules  # not run again here
        assert [e for e in parent.snapshot() if isinstance(e, MessageEnvelope)] == []
    finally:
        dying.close()


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not an object"),
        (json.dumps({"argv": "message", "env": {}}).encode(), "argv must be"),
        (json.dumps({"argv": ["message", 1], "env": {}}).encode(), "argv must be"),
        (json.dumps({"argv": ["message"], "env": {"A": 1}}).encode(), "env must"),
        (json.dumps({"argv": ["run"], "env": {}}).encode(), "runs only"),
        (json.dumps({"argv": [], "env": {}}).encode(), "runs only"),
        (json.dumps({"argv": ["message"]}).encode(), "env must"),
        (json.dumps({"argv": ["done"], "env": {}, "cwd": "rel"}).encode(), "cwd must"),
        (json.dumps({"argv": ["done"], "env": {}, "cwd": 3}).encode(), "cwd must"),
        (json.dumps({"argv": ["done"], "env": {}, "announce": "yes"}).encode(), "announce"),
    ],
)
def test_a_request_the_bridge_cannot_use_runs_nothing(
    recording: tuple[CommandServer, list[list[str]]], payload: bytes, why: str
) -> None:
    commands, ran = recording
    answer = _raw(commands.address, payload)
    assert answer["code"] == 2
    assert why in str(answer["stderr"]) and "invalid_argument" in str(answer["stderr"])
    # the bridge still takes a good call after them
    good = json.dumps({"argv": ["done"], "env": {}}).encode()
    assert _raw(commands.address, good) == {"code": 0, "stdout": "", "stderr": ""}
    assert ran == [["done"]]


def test_an_oversized_request_is_refused_unread_and_runs_nothing(
    recording: tuple[CommandServer, list[list[str]]],
) -> None:
    commands, ran = recording
    huge = json.dumps({"argv": ["message", "x" * MAX_REQUEST_BYTES], "env": {}}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_address(commands.address) or "")
        assert conn.recv(64) == READY
        try:
            conn.sendall(huge)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the bridge stopped reading past the bound and answered
        data = b"".join(iter(lambda: conn.recv(65536), b""))
    answer = json.loads(data)
    assert answer["code"] == 2 and "over" in answer["stderr"]
    assert ran == []
    # the entry point does not even send one: it runs the call itself (refused there)
    request = {"argv": ["message", "x" * MAX_REQUEST_BYTES], "env": {}}
    address = socket_address(commands.address) or ""
    assert forward(address, request, lambda: 2, silent=lambda: 3, answer_within=None) is None
