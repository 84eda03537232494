"""Budgets from the command line, against a real `shepherd serve` and a real command agent that
reports its usage with `shepherd-child usage`: the soft limit is told once, the hard limit ends
the task failed (budget_exceeded) and stops its turn, the session's budget caps the next
delegation; and every new flag refuses hostile values before anything is sent."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import cli

from .test_task_lifecycle import _gone, _notices

pytestmark = pytest.mark.processes

#: a command agent: three usage reports of 20 tokens, then it keeps working (blocked) until
#: its turn is stopped
REPORTER = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys
    child = os.path.join(os.path.dirname(sys.executable), "shepherd-child")
    print(f"PID={os.getpid()}", flush=True)
    for _ in range(3):
        done = subprocess.run([child, "usage", "--tokens", "20", "--cost", "0.01", "--json"],
                              capture_output=True, text=True)
        print("USAGE", done.returncode, done.stdout.strip(), flush=True)
    signal.pause()  # the work that the budget stops: blocked until its process group is ended
    """
)

HOSTILE = ("nan", "inf", "-inf", "0", "-1", "1e300", "abc", "")


def _spawn_reporter(tmp_path: Path, session: Path, name: str) -> None:
    agent = tmp_path / "reporter.py"
    agent.write_text(REPORTER)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    cli("spawn", name, "--adapter", "command", "--cmd", cmd, session=session)


def test_a_command_agent_over_its_token_limit_is_ended_and_the_session_caps_the_next(
    serve: Any, tmp_path: Path
) -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "shepherd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("budget_tokens = 1000\n")
    server = serve()
    session = tmp_path / "session"
    _spawn_reporter(tmp_path, session, "worker")
    _, task = cli("delegate", "worker", "report and work", "--max-tokens", "50", session=session)
    assert task["budget"] == {"max_tokens": 50} and "clamped" not in task

    assert server.wait_for(lambda lines: _notices(server, "budget_exceeded"), timeout=60)
    (soft,) = _notices(server, "budget_soft_limit")
    assert soft["task_id"] == task["task_id"] and "40 of its 50 tokens" in soft["text"]
    # the reports before the limit were receipted (exit 0); the third one's turn is stopped.
    # The agent's output reaches the parent on its own path, independent of the notice: read
    # until the second receipt's line is in (each a real CLI round trip, bounded)
    for _ in range(300):
        lines = cli("read", "worker", session=session)[1]["lines"]
        if len([x for x in lines if x.startswith("USAGE 0 ")]) >= 2:
            break
    assert len([x for x in lines if x.startswith("USAGE 0 ")]) >= 2, lines
    pid = int(next(x for x in lines if x.startswith("PID=")).removeprefix("PID="))
    assert _gone(pid), "the turn was not stopped"

    _, watched = cli("watch", task["task_id"], session=session)  # settled: answered at once
    (result,) = watched["completed"]
    assert (result["status"], result["reason"]) == ("failed", "budget_exceeded")
    assert result["usage"] == {"turns": 1, "tokens": 60, "cost": pytest.approx(0.03)}
    _, status = cli("status", session=session)
    row = status["agents"][0]
    assert row["usage"]["tokens"] == 60 and row["task"]["usage"]["tokens"] == 60
    assert status["summary"]["usage"]["tokens"] == 60
    assert status["summary"]["budget_tokens"] == 1000

    # the session has 940 tokens left: a task asking for more gets that, and is told so
    cli("spawn", "other", "--script", str(_idle(tmp_path)), session=session)
    _, capped = cli("delegate", "other", "more", "--max-tokens", "5000", session=session)
    assert capped["budget"] == {"max_tokens": 940} and capped["clamped"] == ["max_tokens"]
    _, text = _text("status", session=session)
    assert "60/50 tokens" in text and re.search(r"session used: \d turns?, 60/1000 tokens", text)

    # usage and limits are journaled: a parent killed and started again shows the same
    server.stop(signal.SIGKILL)
    serve()
    _, again = cli("status", session=session)
    rows = {a["name"]: a for a in again["agents"]}
    assert rows["worker"]["usage"] == row["usage"]
    assert rows["worker"]["task"]["usage"] == row["task"]["usage"]
    assert rows["other"]["task"]["budget"] == {"max_tokens": 940}
    assert again["summary"]["usage"]["tokens"] == 60


def _idle(tmp_path: Path) -> Path:
    path = tmp_path / "idle.json"
    path.write_text('{"steps": [{"await": "any"}]}')
    return path


def _text(*args: str, session: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "actors.surfaces.entry", *args, "--session", str(session)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout


@pytest.mark.parametrize("flag", ["--max-turns", "--max-tokens", "--max-cost", "--max-minutes"])
def test_every_delegate_limit_refuses_hostile_values_before_sending(
    serve: Any, tmp_path: Path, flag: str
) -> None:
    serve()
    session = tmp_path / "session"
    cli("spawn", "idle", "--script", str(_idle(tmp_path)), session=session)
    for bad in HOSTILE:
        rc, out = cli("delegate", "idle", "x", f"{flag}={bad}", session=session, check=False)
        assert rc == 2 and out["error"]["code"] == "invalid_argument", (flag, bad, out)
    _, status = cli("status", session=session)
    assert status["agents"][0].get("task") is None


def test_child_usage_and_serve_budgets_refuse_hostile_values() -> None:
    child = Path(sys.executable).with_name("shepherd-child")
    for args in (
        *(["--tokens", bad] for bad in (*HOSTILE, "1e13", "1000000000001") if bad != "0"),
        *(["--tokens", "1", "--cost", bad] for bad in HOSTILE if bad not in ("0",)),
        [],
    ):
        done = subprocess.run(
            [str(child), "usage", *args, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and '"invalid_argument"' in done.stdout, (args, done)
    for flag in ("--budget-tokens", "--budget-cost"):
        for bad in HOSTILE:
            done = subprocess.run(
                [sys.executable, "-m", "actors.surfaces.cli", "serve", f"{flag}={bad}"],
                capture_output=True,
                check=False,
                text=True,
                timeout=60,
            )
            assert done.returncode == 2 and "invalid_argument" in done.stderr, (flag, bad, done)


#: a command agent that reports 80 tokens, then says it is done
SPENDER = textwrap.dedent(
    """
    import os, subprocess, sys
    child = os.path.join(os.path.dirname(sys.executable), "shepherd-child")
    subprocess.run([child, "usage", "--tokens", "80", "--json"], check=True)
    subprocess.run([child, "done", "--status", "completed", "--summary", "spent"])
    """
)


def _journal_limits(session: Path) -> list[dict[str, Any]]:
    lines = (session / "journal.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    return [r["record"] for r in records if r["type"] == "session_limits"]


def _stopped(server: Any, session: Path) -> str:
    """``shutdown``, and serve's stderr once it exited."""
    cli("shutdown", session=session)
    assert server.proc.wait(timeout=60) == 0
    assert server.proc.stderr is not None
    return str(server.proc.stderr.read().decode())


def test_a_restart_keeps_the_session_budget_and_says_when_it_changes(
    serve: Any, tmp_path: Path
) -> None:
    """``serve --budget-tokens 50``, 80 spent, a plain restart: the budget is the session's
    (recorded with it), so new work is refused; a restart giving 500 runs with 500, says so on
    stderr (old -> new) and journals the change."""
    session = tmp_path / "session"
    first = serve(session, "--budget-tokens", "50")
    agent = tmp_path / "spender.py"
    agent.write_text(SPENDER)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    cli("spawn", "spender", "--adapter", "command", "--cmd", cmd, session=session)
    _, task = cli("delegate", "spender", "spend", session=session)
    assert task["budget"] == {"max_tokens": 50}
    _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
    assert waited["completed"][0]["usage"]["tokens"] == 80
    assert "changed" not in _stopped(first, session)

    # a plain restart: the budget is restored, and it is spent
    second = serve(session)
    cli("spawn", "idle", "--script", str(_idle(tmp_path)), session=session)
    rc, refused = cli("delegate", "idle", "more", session=session, check=False)
    assert rc == 2 and refused["error"]["code"] == "limit_exceeded", refused
    assert "budget is spent: 80 of 50 tokens" in refused["error"]["message"]
    _, status = cli("status", session=session)
    assert status["summary"]["budget_tokens"] == 50
    assert "changed" not in _stopped(second, session)

    # a restart with another budget runs with it, and says so
    third = serve(session, "--budget-tokens", "500")
    cli("spawn", "idle2", "--script", str(_idle(tmp_path)), session=session)
    _, accepted = cli("delegate", "idle2", "more", session=session)
    assert accepted["budget"] == {"max_tokens": 420}
    err = _stopped(third, session)
    changed = [x for x in err.splitlines() if "budget_tokens" in x]
    assert len(changed) == 1 and "50 -> 500" in changed[0], err
    limits = _journal_limits(session)
    assert [
        (x["limits"]["budget_tokens"], (x.get("previous") or {}).get("budget_tokens"))
        for x in limits
    ] == [
        (50, None),
        (500, 50),
    ]

    # and the next plain restart keeps the new one
    fourth = serve(session)
    _, status = cli("status", session=session)
    assert status["summary"]["budget_tokens"] == 500
    assert "changed" not in _stopped(fourth, session)


def test_delegate_many_takes_the_budgets_of_delegate(serve: Any, tmp_path: Path) -> None:
    """``delegate-many`` takes delegate's budgets: the call's for every item, and an item's
    own (as JSON to its tool) over the call's; each task gets them as a delegate would."""
    serve()
    session = tmp_path / "session"
    cli("spawn-many", "a", "b", "c", "--script", str(_idle(tmp_path)), session=session)
    args = ["--task", "a", "x", "--task", "b", "y", "--max-tokens", "5", "--max-minutes", "30"]
    _, many = cli("delegate-many", *args, session=session)
    assert many["errors"] == [] and all(many["task_ids"]), many
    payload = {"items": [{"target": "c", "task": "z", "max_turns": 2}], "max_tokens": 9}
    argv = [sys.executable, "-m", "actors.surfaces.entry", "tool", "shepherd_delegate_many"]
    argv += ["--args", "-", "--json", "--session", str(session)]
    done = subprocess.run(
        argv, input=json.dumps(payload), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _, status = cli("status", session=session)
    budgets = {row["name"]: row["task"]["budget"] for row in status["agents"]}
    assert budgets == {
        "a": {"max_tokens": 5, "max_minutes": 30},
        "b": {"max_tokens": 5, "max_minutes": 30},
        "c": {"max_turns": 2, "max_tokens": 9},
    }


#: a command agent that reports three dimes, then says it is done
DIMES = textwrap.dedent(
    """
    import os, subprocess, sys
    child = os.path.join(os.path.dirname(sys.executable), "shepherd-child")
    for _ in range(3):
        subprocess.run([child, "usage", "--tokens", "1", "--cost", "0.1"], check=True)
    subprocess.run([child, "done", "--status", "completed", "--summary", "spent"], check=True)
    """
)


def test_money_is_summed_exactly_and_shown_rounded(serve: Any, tmp_path: Path) -> None:
    """Three reports of $0.10 are $0.30 in every answer: `wait`, `status --json`, `status`
    (with float sums they were 0.30000000000000004)."""
    serve()
    session = tmp_path / "session"
    agent = tmp_path / "dimes.py"
    agent.write_text(DIMES)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    cli("spawn", "spender", "--adapter", "command", "--cmd", cmd, session=session)
    _, task = cli("delegate", "spender", "spend three dimes", session=session)
    _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
    (result,) = waited["completed"]
    assert result["status"] == "completed" and result["usage"]["cost"] == 0.3
    _, status = cli("status", session=session)
    assert status["agents"][0]["usage"]["cost"] == 0.3
    assert status["summary"]["usage"]["cost"] == 0.3
    _, text = _text("status", session=session)
    assert "$0.3000" in text and "0.30000000000000004" not in text
