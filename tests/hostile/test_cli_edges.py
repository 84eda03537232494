"""Item 12 and 13 of the hostile-user issue, at the CLI: the small ones.

Usage errors honour ``--json``; every command takes ``--json`` (``demo`` and ``mcp`` too);
``read --lines`` and ``top --interval`` are bounded; ``wait`` that times out exits 124; ``tools``
prints a readable list unless ``--json``; ``delegate`` says the name that was typed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.surfaces.cli import WAIT_TIMED_OUT
from tests.processes.conftest import cli
from tests.reliability.live import wait_for_files

from .conftest import Live

pytestmark = pytest.mark.processes

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.surfaces.entry", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        input=stdin,
    )


def _spawn_idle(live: Live) -> None:
    path = live.root / "idle.json"
    path.write_text(json.dumps(IDLE))
    live.sup.call("spawn", {"name": "idle", "script": str(path)})


@pytest.mark.parametrize(
    "argv",
    [
        ["delegate", "--json"],  # missing arguments
        ["read", "scout", "--lines", "many", "--json"],  # not a number
        ["bogus", "--json"],  # no such command
        ["spawn", "scout", "--adapter", "telepathy", "--json"],  # not a choice
    ],
)
def test_usage_errors_are_json_under_json(argv: list[str]) -> None:
    done = run(*argv)
    assert done.returncode == 2
    body = json.loads(done.stdout)
    assert body["error"]["code"] == "invalid_argument" and "--help" in body["error"]["message"]
    assert "Traceback" not in done.stderr


def test_usage_errors_are_one_line_on_stderr_without_json() -> None:
    done = run("delegate")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("shepherd: invalid_argument: ") and done.stderr.count("\n") == 1


def test_demo_takes_json() -> None:
    done = run("demo", "--simulated", "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert lines and all(set(x) == {"line"} for x in lines)
    assert any("completions delivered: 1" in x["line"] for x in lines)


def test_mcp_takes_json(tmp_path: Path) -> None:
    done = run("mcp", "--json", "--session", str(tmp_path / "none"), stdin="")
    assert "unrecognized arguments" not in done.stderr + done.stdout
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("lines", ["-3", "0", "100000000000000000000000000000"])
def test_read_lines_out_of_bounds_is_invalid_argument(live: Live, lines: str) -> None:
    _spawn_idle(live)
    code, out = cli("read", "idle", f"--lines={lines}", session=live.session, check=False)
    assert code == 2 and out["error"]["code"] == "invalid_argument", out
    assert "lines" in out["error"]["message"]


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf", "1e300"])
def test_top_interval_out_of_bounds_is_invalid_argument(live: Live, interval: str) -> None:
    done = run("top", "--once", f"--interval={interval}", "--json", "--session", str(live.session))
    assert done.returncode == 2, done.stdout + done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "invalid_argument"
    assert "Traceback" not in done.stderr


def test_wait_that_times_out_exits_124_and_says_what_is_pending(live: Live) -> None:
    _spawn_idle(live)
    task = live.sup.call("delegate", {"target": "idle", "task": "never done"})
    code, out = cli("wait", task.task_id, "--timeout", "0.2", session=live.session, check=False)
    assert code == WAIT_TIMED_OUT == 124
    assert out["timed_out"] is True and out["pending"] == [task.task_id]
    done = run("wait", task.task_id, "--timeout", "0.2", "--session", str(live.session))
    assert done.returncode == 124 and f"{task.task_id} still pending" in done.stdout


def test_wait_that_completes_exits_0(live: Live) -> None:
    _spawn_idle(live)
    task = live.sup.call("delegate", {"target": "idle", "task": "cancel me"})
    live.sup.call("cancel", {"task_id": task.task_id})
    code, out = cli("wait", task.task_id, "--timeout", "10", session=live.session, check=False)
    assert code == 0 and out["timed_out"] is False


def test_tools_prints_a_readable_list_unless_json() -> None:
    human = run("tools")
    assert human.returncode == 0
    assert "shepherd_delegate" in human.stdout and not human.stdout.lstrip().startswith("[")
    machine = run("tools", "--json")
    assert json.loads(machine.stdout)[0]["name"] == "shepherd_spawn"


def test_delegate_says_the_name_that_was_typed(live: Live) -> None:
    _spawn_idle(live)
    done = run("delegate", "idle", "work", "--session", str(live.session))
    assert done.returncode == 0
    assert done.stdout.strip().endswith("delegated to idle"), done.stdout


def test_waiting_calls_never_starve_the_other_calls(live: Live) -> None:
    """Each ``wait`` once held one of the four call workers until its tasks settled: four
    waits and every other command (and the reply-inbox sweep) timed out."""
    _spawn_idle(live)
    task = live.sup.call("delegate", {"target": "idle", "task": "long"})
    handled = live.sup.mailbox_root / "inbox" / "parent" / "cur"  # a call handed over
    before = len(os.listdir(handled))
    argv = [sys.executable, "-m", "actors.surfaces.cli", "wait", task.task_id, "--json"]
    waits = [
        subprocess.Popen(
            [*argv, "--session", str(live.session)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    try:
        # all six are handed over (each holds a call worker in the old design) before status
        assert wait_for_files(handled, lambda: len(os.listdir(handled)) >= before + 6, 30)
        code, out = cli("status", session=live.session, check=False)
        assert code == 0, out
        code, out = cli("cancel", task.task_id, session=live.session, check=False)
        assert code == 0 and out["status"] == "cancelled", out
        for proc in waits:
            stdout, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, stdout
            assert json.loads(stdout)["completed"][0]["status"] == "cancelled"
    finally:
        for proc in waits:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
