"""Acceptance checks from the command line, against a real ``shepherd serve`` and real scripted
agents: ``delegate --verify CMD`` runs CMD in the agent's directory when the agent says
completed. A check that passes, one that fails then passes, one that fails every attempt, one
that hangs past its timeout, a cancel mid-check, a ``kill -9`` of the parent mid-check (the
check runs again, once), and hostile values: each from the user's side."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.procs import tagged
from actors.session.checks import CHECK_TAG
from tests.processes.conftest import cli
from tests.reliability.live import write_script

from .test_task_lifecycle import _gone, _notices

pytestmark = pytest.mark.processes

#: claims completed as soon as it has the task, and again after each notice (a failed check)
CLAIMER = {
    "steps": [
        {"await": "task"},
        {"run": "touch first-claim"},
        {"done": {"status": "completed", "summary": "built it"}},
        {"await": "any"},
        {"run": "touch fixed"},
        {"done": {"status": "completed", "summary": "fixed it"}},
        {"await": "any"},
        {"done": {"status": "completed", "summary": "third try"}},
        {"await": "any"},
    ]
}


def _worker(tmp_path: Path, session: Path, *extra: str) -> Path:
    """A scripted worker in a directory of its own (where its checks run)."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    script = write_script(tmp_path, "claimer", CLAIMER)
    cli("spawn", "worker", "--script", script, "--cwd", str(workdir), *extra, session=session)
    return workdir


def _wait(session: Path, task_id: str) -> dict[str, Any]:
    _, waited = cli("wait", task_id, "--timeout", "120", session=session)
    assert not waited["timed_out"], waited
    (result,) = waited["completed"]
    return dict(result)


def _verifying(session: Path, pid_file: Path) -> int:
    """The check's pid, once the task is ``verifying`` and the check wrote it (each round a
    real CLI round trip, bounded)."""
    for _ in range(600):
        row = cli("status", "worker", session=session)[1]["agents"][0]
        if row["task"]["state"] == "verifying" and pid_file.exists() and pid_file.read_text():
            return int(pid_file.read_text())
    raise AssertionError(f"the check never started: {row}")


def test_a_check_that_passes_completes_with_its_evidence(serve: Any, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    workdir = _worker(tmp_path, session)
    check = 'test -f first-claim && echo "ok in $(pwd) for $SHEPHERD_AGENT $SHEPHERD_TASK_ID"'
    _, task = cli("delegate", "worker", "build it", "--verify", check, session=session)
    result = _wait(session, task["task_id"])
    assert (result["status"], result["text"]) == ("completed", "built it")
    evidence = result["evidence"]
    assert evidence["command"] == check and evidence["exit_status"] == 0
    assert evidence["attempt"] == 1 and evidence["duration_s"] >= 0
    assert evidence["output_tail"] == [f"ok in {workdir} for worker {task['task_id']}"]
    _, status = cli("status", "worker", session=session)
    assert status["agents"][0]["task"]["check"]["command"] == check


def test_a_check_that_fails_then_passes_sends_the_task_back_once(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    _worker(tmp_path, session)
    check = "test -f fixed || { echo 'fixed is missing'; exit 4; }"
    _, task = cli("delegate", "worker", "fix it", "--verify", check, session=session)
    result = _wait(session, task["task_id"])
    assert (result["status"], result["text"]) == ("completed", "fixed it")
    assert result["evidence"]["attempt"] == 2 and result["evidence"]["exit_status"] == 0
    assert server.wait_for(lambda _: _notices(server, "verification_failed"), timeout=30)
    (told,) = _notices(server, "verification_failed")
    assert told["task_id"] == task["task_id"]
    assert "exit status 4" in told["text"] and "fixed is missing" in told["text"]
    assert "attempt 1 of 2; 1 left" in told["text"]


def test_a_check_that_fails_every_attempt_fails_the_task(serve: Any, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    _worker(tmp_path, session, "--verify", "echo still broken; exit 3", "--verify-attempts", "3")
    _, task = cli("delegate", "worker", "try", session=session)  # the agent's default check
    result = _wait(session, task["task_id"])
    assert (result["status"], result["reason"]) == ("failed", "verification_failed")
    assert result["return_code"] == 1
    assert "exit status 3" in result["error"] and "attempt 3 of 3" in result["error"]
    assert result["evidence"]["output_tail"] == ["still broken"]
    assert result["text"] == "third try"


def test_a_check_past_its_timeout_is_killed_and_fails(serve: Any, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    workdir = _worker(tmp_path, session)
    check = "echo $$ > check.pid; echo started; sleep 600"
    _, task = cli(
        "delegate", "worker", "t", "--verify", check, "--verify-timeout", "2",
        "--verify-attempts", "1", session=session,
    )  # fmt: skip
    result = _wait(session, task["task_id"])
    assert (result["status"], result["reason"]) == ("failed", "verification_failed")
    evidence = result["evidence"]
    assert evidence["timed_out"] and evidence["exit_status"] is None
    assert evidence["output_tail"] == ["started"] and "timeout" in evidence["error"]
    assert _gone(int((workdir / "check.pid").read_text()))


def test_a_cancel_mid_check_kills_the_check(serve: Any, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    workdir = _worker(tmp_path, session)
    check = "sleep 600 & echo $! > check.pid; wait"
    _, task = cli("delegate", "worker", "t", "--verify", check, session=session)
    pid = _verifying(session, workdir / "check.pid")
    shown = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.entry", "status", "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "verifying (check attempt 1 of 2)" in shown, shown
    _, cancelled = cli(
        "cancel", task["task_id"], "--reason", "enough", session=session, check=False
    )
    assert cancelled["status"] == "cancelled" and cancelled.get("evidence") is None
    assert _gone(pid), "the check's process group was not killed"


def test_a_parent_killed_mid_check_runs_the_check_again_once(serve: Any, tmp_path: Path) -> None:
    server = serve()
    session = tmp_path / "session"
    workdir = _worker(tmp_path, session)
    check = (
        "echo run >> runs.txt; test -f second && exit 0; touch second; echo $$ > check.pid; "
        "sleep 600"
    )
    _, task = cli("delegate", "worker", "t", "--verify", check, session=session)
    pid = _verifying(session, workdir / "check.pid")
    server.stop(signal.SIGKILL)
    serve()  # the same session, restored from its journal
    result = _wait(session, task["task_id"])
    assert (result["status"], result["text"]) == ("completed", "built it")
    assert result["evidence"]["attempt"] == 1  # the same attempt, run again
    assert _gone(pid), "the killed parent's check was left running"
    assert (workdir / "runs.txt").read_text() == "run\nrun\n"
    assert not tagged(CHECK_TAG, f"{_session_id(session)}/{task['task_id']}")


def _session_id(session: Path) -> str:
    return str(json.loads((session / "session.json").read_text())["session_id"])


def test_hostile_check_values_are_refused_with_typed_errors(serve: Any, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    _worker(tmp_path, session)
    for flags, field in (
        (["--verify", ""], "verify"),
        (["--verify", "   "], "verify"),
        (["--verify", "x" * 70_000], "verify"),
        (["--verify", "true", "--verify-attempts", "0"], "verify_attempts"),
        (["--verify", "true", "--verify-attempts", "11"], "verify_attempts"),
        (["--verify", "true", "--verify-attempts", "abc"], "verify-attempts"),
        (["--verify", "true", "--verify-timeout", "nan"], "verify_timeout_s"),
        (["--verify", "true", "--verify-timeout", "-1"], "verify_timeout_s"),
        (["--verify", "true", "--verify-timeout", "1e9"], "verify_timeout_s"),
    ):
        code, answer = cli("delegate", "worker", "t", *flags, session=session, check=False)
        assert code == 2, (flags, answer)
        assert answer["error"]["code"] == "invalid_argument", answer
        assert field in answer["error"]["message"], answer
        assert "Traceback" not in json.dumps(answer)
    # nothing was accepted: the worker is free
    _, status = cli("status", "worker", session=session)
    assert status["agents"][0].get("task") is None
    # a program that does not exist is a failed check, with the shell's reason
    _, task = cli(
        "delegate", "worker", "t", "--verify", "no-such-program-x1", "--verify-attempts", "1",
        session=session,
    )  # fmt: skip
    result = _wait(session, task["task_id"])
    assert result["reason"] == "verification_failed"
    assert result["evidence"]["exit_status"] == 127
    assert "not found" in " ".join(result["evidence"]["output_tail"])


def test_a_claim_without_work_is_told_once_and_require_evidence_refuses_it(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    idle_claim = {
        "steps": [
            {"await": "task"},
            {"done": {"status": "completed", "summary": "success"}},
            {"await": "any"},
            {"run": "echo now some work"},
            {"done": {"status": "completed", "summary": "did it"}},
            {"await": "any"},
        ]
    }
    script = write_script(tmp_path, "idle_claim", idle_claim)
    cli("spawn", "quick", "--script", script, session=session)
    _, task = cli("delegate", "quick", "t", session=session)
    assert _wait(session, task["task_id"])["status"] == "completed"  # taken all the same
    assert server.wait_for(lambda _: _notices(server, "unverified_claim"), timeout=30)
    (told,) = _notices(server, "unverified_claim")
    assert told["task_id"] == task["task_id"] and "no tool call" in told["text"]

    # with --require-evidence the same claim is refused: the agent works, then it is taken
    cli("spawn", "strict", "--script", script, "--require-evidence", session=session)
    _, task = cli("delegate", "strict", "t", session=session)
    for _ in range(600):  # its receipt refused the done (each a real CLI round trip, bounded)
        lines = cli("read", "strict", session=session)[1]["lines"]
        if any("no_evidence" in line for line in lines):
            break
    assert any("no_evidence" in line for line in lines), lines
    assert cli("status", "strict", session=session)[1]["agents"][0]["task"]["state"] == "running"
    cli("message", "strict", "show your work", session=session)  # the script's next step
    result = _wait(session, task["task_id"])
    assert (result["status"], result["text"]) == ("completed", "did it")
    assert len(_notices(server, "unverified_claim")) == 1  # still only the first agent's
    code, refused = cli(
        "spawn", "cmdagent", "--adapter", "command", "--cmd", "true {message}",
        "--require-evidence", session=session, check=False,
    )  # fmt: skip
    assert code == 2 and "require_evidence" in refused["error"]["message"]
