"""actors.session.checks.CheckRunner with real processes: each rule of its module, one test
each (what a check leaves behind, a directory that is gone, one run per task, the session's
stop, an orphan of a killed parent, bounded evidence)."""

from __future__ import annotations

import queue
import subprocess
import sys
from pathlib import Path

import pytest

from actors.runtime.procs import pid_alive, tagged
from actors.session.checks import CHECK_TAG, CheckRunner
from protocol.records.checks import EVIDENCE_LINE_CHARS, EVIDENCE_LINES, Check, CheckDone
from protocol.session.effects import RunCheck

from .test_task_lifecycle import _gone

pytestmark = pytest.mark.processes

WAIT_S = 60.0


def _effect(command: str, cwd: Path | None, task_id: str = "t1", **check: float) -> RunCheck:
    return RunCheck(
        task_id=task_id,
        agent_id="a1",
        agent_name="worker",
        check=Check(command=command, **check),  # type: ignore[arg-type]
        attempt=1,
        cwd=str(cwd) if cwd is not None else None,
    )


def _run(runner: CheckRunner, effect: RunCheck) -> queue.Queue[CheckDone]:
    answers: queue.Queue[CheckDone] = queue.Queue()
    runner.run(effect, answers.put)
    return answers


def _pid_in(path: Path) -> int:
    """The pid a check wrote, once it wrote it (bounded; the check writes it first)."""
    for _ in range(10_000):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        subprocess.run(["true"], check=True)  # a round trip, not a sleep
    raise AssertionError(f"{path} never written")


def test_what_a_finished_check_left_running_is_stopped(tmp_path: Path) -> None:
    runner = CheckRunner("s1")
    answers = _run(runner, _effect("sleep 600 >/dev/null 2>&1 & echo $! > bg.pid", tmp_path))
    done = answers.get(timeout=WAIT_S)
    assert done.evidence.passed
    assert _gone(int((tmp_path / "bg.pid").read_text()))


def test_a_directory_that_is_gone_is_a_failed_run_with_the_reason(tmp_path: Path) -> None:
    runner = CheckRunner("s1")
    done = _run(runner, _effect("true", tmp_path / "gone")).get(timeout=WAIT_S)
    assert not done.evidence.passed and done.evidence.exit_status is None
    assert "could not start" in (done.evidence.error or "")
    assert str(tmp_path / "gone") in (done.evidence.error or "")


def test_a_new_run_of_a_tasks_check_ends_the_one_still_running(tmp_path: Path) -> None:
    runner = CheckRunner("s1")
    first = _run(runner, _effect("echo $$ > first.pid; exec sleep 600", tmp_path))
    pid = _pid_in(tmp_path / "first.pid")
    second = _run(runner, _effect("echo second", tmp_path))
    assert second.get(timeout=WAIT_S).evidence.output_tail == ("second",)
    assert _gone(pid)
    assert first.empty()  # the ended run is not told: nobody waits for it


def test_stop_and_close_kill_running_checks_and_tell_nothing(tmp_path: Path) -> None:
    runner = CheckRunner("s1")
    one = _run(runner, _effect("echo $$ > one.pid; exec sleep 600", tmp_path, "t1"))
    two = _run(runner, _effect("echo $$ > two.pid; exec sleep 600", tmp_path, "t2"))
    pids = _pid_in(tmp_path / "one.pid"), _pid_in(tmp_path / "two.pid")
    runner.stop("t1")
    assert _gone(pids[0]) and pid_alive(pids[1])
    runner.close()
    assert _gone(pids[1])
    assert one.empty() and two.empty()
    # after close, a run starts nothing (a restarted parent runs it again)
    late = _run(runner, _effect("touch late", tmp_path, "t3"))
    assert late.empty() and not runner._running


def test_an_orphan_of_a_killed_parent_is_killed_before_the_check_runs_again(
    tmp_path: Path,
) -> None:
    # a check left running by a parent that was killed: tagged with its session and task
    env_tag = f"{CHECK_TAG}=s1/t1"
    orphan = subprocess.Popen(
        ["env", env_tag, "sleep", "600"], start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        for _ in range(10_000):  # env has exec'd sleep with the tag (bounded)
            if tagged(CHECK_TAG, "s1/t1"):
                break
        assert tagged(CHECK_TAG, "s1/t1")
        done = _run(CheckRunner("s1"), _effect("true", tmp_path)).get(timeout=WAIT_S)
        assert done.evidence.passed
        assert orphan.wait(timeout=WAIT_S) == -9
    finally:
        orphan.kill()
        orphan.wait()


def test_the_evidence_keeps_a_bounded_tail_and_the_environment_names_the_task(
    tmp_path: Path,
) -> None:
    script = tmp_path / "loud.py"
    script.write_text(
        "import os\n"
        "print(os.environ['SHEPHERD_TASK_ID'], os.environ['SHEPHERD_AGENT'],"
        " os.environ['SHEPHERD_AGENT_ID'], os.environ['SHEPHERD_CHECK_ATTEMPT'])\n"
        "for i in range(200000): print('line', i, 'x' * (i % 900))\n"
        "raise SystemExit(5)\n"
    )
    done = _run(CheckRunner("s1"), _effect(f"{sys.executable} loud.py", tmp_path)).get(
        timeout=WAIT_S
    )
    evidence = done.evidence
    assert evidence.exit_status == 5 and not evidence.passed
    assert len(evidence.output_tail) == EVIDENCE_LINES
    assert all(len(line) <= EVIDENCE_LINE_CHARS + 1 for line in evidence.output_tail)
    assert evidence.output_tail[-1].startswith("line 199999 ")

    env = _run(
        CheckRunner("s1"), _effect(f"{sys.executable} loud.py 2>/dev/null | head -1", tmp_path)
    )
    assert env.get(timeout=WAIT_S).evidence.output_tail == ("t1 worker a1 1",)
