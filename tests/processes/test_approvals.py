"""Approvals with real processes: a command agent runs ``shepherd-child approve-request`` from
its shell, its task waits, the parent answers with ``shepherd approve|deny`` and the blocked
call returns (exit 0 approved, 1 denied, the note or the reason on stdout); hostile values
from both command lines are refused with typed errors."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import Serve, cli

#: the agent: asks for approval with the task's text, then finishes saying what it was told
ASKING_AGENT = textwrap.dedent(
    """
    import json, subprocess, sys
    message = sys.argv[-1]
    argv = ["shepherd-child", "approve-request", "--json"]
    if "TIMEOUT " in message:
        argv += ["--timeout", message.split("TIMEOUT ", 1)[1].split()[0]]
    argv += ["--", "git push origin main: " + message]
    asked = subprocess.run(argv, capture_output=True, text=True)
    print("APPROVAL-RC", asked.returncode, asked.stdout.strip(), flush=True)
    decision = json.loads(asked.stdout)
    status = "completed" if asked.returncode == 0 else "blocked"
    summary = ("pushed: " if asked.returncode == 0 else "denied: ") + str(decision["answer"])
    subprocess.run(
        ["shepherd-child", "done", "--status", status, "--summary", summary], check=True
    )
    """
)


def _agent(tmp_path: Path, session: Path) -> None:
    agent = tmp_path / "asking_agent.py"
    agent.write_text(ASKING_AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    cli("spawn", "builder", "--adapter", "command", "--cmd", cmd, session=session)


def _requested(server: Serve, count: int = 1) -> list[dict[str, Any]]:
    def found(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [x for x in lines if x.get("code") == "approval_requested"]

    assert server.wait_for(lambda lines: len(found(lines)) >= count), "no approval_requested"
    return found(server.lines)


def _settled(session: Path, task_id: str) -> dict[str, Any]:
    _, waited = cli("wait", task_id, "--timeout", "60", session=session)
    (result,) = waited["completed"]
    return result  # type: ignore[no-any-return]


def test_a_command_agent_waits_for_approval_and_goes_on_once_approved(
    serve: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    server = serve(session)
    _agent(tmp_path, session)
    _, delegated = cli("delegate", "builder", "release 1.2", session=session)
    task_id = delegated["task_id"]
    (note,) = _requested(server)
    request_id = note["refs"][0]
    assert note["task_id"] == task_id and "git push origin main: " in note["text"]
    assert "release 1.2" in note["text"]
    _, status = cli("status", "builder", session=session)
    (agent,) = status["agents"]
    assert agent["task"]["state"] == "waiting"
    (pending,) = agent["task"]["pending_requests"]
    assert pending["request_id"] == request_id and pending["kind"] == "approval"
    _, approved = cli("approve", request_id, "--note", "tag first", session=session)
    assert approved["approved"] is True and approved["task_id"] == task_id
    result = _settled(session, task_id)
    assert result["status"] == "completed" and result["text"] == "pushed: tag first"
    # answered at most once
    code, error = cli("deny", request_id, "--reason", "too late", session=session, check=False)
    assert code == 2 and error["error"]["code"] == "invalid_transition"


def test_a_denial_exits_1_with_the_reason(serve: Any, tmp_path: Path) -> None:
    session = tmp_path / "session"
    server = serve(session)
    _agent(tmp_path, session)
    _, delegated = cli("delegate", "builder", "release 1.3", session=session)
    request_id = _requested(server)[0]["refs"][0]
    cli("deny", request_id, "--reason", "freeze until Monday", session=session)
    result = _settled(session, delegated["task_id"])
    assert result["status"] == "blocked" and result["text"] == "denied: freeze until Monday"
    assert any(
        "APPROVAL-RC 1" in line and "freeze until Monday" in line
        for line in cli("read", "builder", session=session)[1]["lines"]
    )


def test_a_timeout_denies_it_with_reason_timeout_and_the_parent_is_told(
    serve: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    server = serve(session)
    _agent(tmp_path, session)
    _, delegated = cli("delegate", "builder", "TIMEOUT 0.5 release", session=session)
    result = _settled(session, delegated["task_id"])
    assert result["status"] == "blocked" and result["text"] == "denied: timeout"
    assert server.wait_for(lambda lines: any(x.get("code") == "approval_timed_out" for x in lines))


def _child(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.child.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["approve-request", "--json", "--", ""],
        ["approve-request", "--json", "--timeout", "nan", "--", "push"],
        ["approve-request", "--json", "--timeout", "inf", "--", "push"],
        ["approve-request", "--json", "--timeout", "-1", "--", "push"],
        ["approve-request", "--json", "--timeout", "1e300", "--", "push"],
        ["approve-request", "--json"],
    ],
)
def test_hostile_child_arguments_exit_2_with_a_typed_error(args: list[str]) -> None:
    done = _child(*args)
    assert done.returncode == 2, done
    assert json.loads(done.stdout)["error"]["code"] == "invalid_argument"


def test_hostile_parent_answers_are_refused(serve: Any, tmp_path: Path) -> None:
    session = tmp_path / "session"
    server = serve(session)
    _agent(tmp_path, session)
    cli("delegate", "builder", "release 1.4", session=session)
    request_id = _requested(server)[0]["refs"][0]
    for args, code in [
        (["approve", "shepherd-message-00000000deadbeef"], "invalid_handle"),
        (["approve", "not-an-id"], "invalid_handle"),
        (["approve", ""], "invalid_argument"),
        (["deny", request_id, "--reason", ""], "invalid_argument"),
        (["deny", request_id], "invalid_argument"),
        (["deny", request_id, "--reason", "x" * 100_000], "limit_exceeded"),
        (["approve", request_id, "--note", "x" * 100_000], "limit_exceeded"),
    ]:
        rc, error = cli(*args, session=session, check=False)
        assert rc == 2 and error["error"]["code"] == code, (args[:2], error)
    _, status = cli("status", "builder", session=session)
    assert status["agents"][0]["task"]["state"] == "waiting"  # nothing was answered
    cli("approve", request_id, session=session)


def test_a_pending_approval_survives_a_sigkill_of_the_parent(serve: Any, tmp_path: Path) -> None:
    session = tmp_path / "session"
    first = serve(session)
    _agent(tmp_path, session)
    _, delegated = cli("delegate", "builder", "release 1.5", session=session)
    request_id = _requested(first)[0]["refs"][0]
    first.stop(signal.SIGKILL)
    second = serve(session)  # the bridge and the blocked call wait for the new parent
    _, status = cli("status", "builder", session=session)
    (pending,) = status["agents"][0]["task"]["pending_requests"]
    assert pending["request_id"] == request_id and pending["kind"] == "approval"
    cli("approve", request_id, "--note", "after the restart", session=session)
    result = _settled(session, delegated["task_id"])
    assert result["status"] == "completed" and result["text"] == "pushed: after the restart"
    assert second.proc.poll() is None
