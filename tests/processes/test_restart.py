"""Issue 5: the parent supervisor is killed (SIGKILL) mid-scenario and restarted on the same
session directory. Live bridges reconnect, settled results survive, open tasks resume, and
nothing is delivered twice."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import bridge_pids, cli
from tests.reliability.live import wait_gone, write_script

#: each test restarts `serve` and waits on several real processes: a busy machine may need more
#: than the default 120 s for all of them (every wait is an event with its own ceiling)
pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

SLOW_PLANNER = {  # answers only after the test's go-ahead, which comes after the restart
    "steps": [
        {"await": "task"},
        {"await": "message"},
        {"await": "message"},
        {"reply": {"text": "src/core"}},
        {"await": "any"},
    ]
}
QUICK = {  # finishes on the test's go-ahead, sent after its watch exists: never before it
    "steps": [
        {"await": "task"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "quick"}},
    ]
}


def _completions(session: Path) -> list[dict]:  # type: ignore[type-arg]
    path = session / "notifications.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [x for x in lines if x.get("kind") == "task_completion"]


def test_sigkill_the_parent_mid_scenario_and_resume(
    serve: Any, scripts: dict[str, str], transport: tuple[str, ...], tmp_path: Path
) -> None:
    """Once per transport: the file mailbox, and a NATS cluster with the records on it."""
    session = tmp_path / "session"
    first = serve(session, *transport)
    cli("spawn", "quick", "--script", write_script(tmp_path, "quick", QUICK), session=session)
    cli("spawn", "scout", "--script", scripts["scout"], session=session)
    cli(
        "spawn",
        "planner",
        "--script",
        write_script(tmp_path, "slow", SLOW_PLANNER),
        session=session,
    )
    _, quick = cli("delegate", "quick", "be quick", session=session)
    cli("watch", quick["task_id"], session=session)
    cli("message", "quick", "finish now", session=session)
    assert first.wait_for(lambda lines: any(x.get("kind") == "task_completion" for x in lines))
    cli("delegate", "planner", "plan", session=session)
    _, task = cli("delegate", "scout", "map the code", session=session)
    _, watch = cli("watch", task["task_id"], session=session)

    # wait until the scout is waiting on the planner, then kill the parent outright
    assert first.wait_story(task["task_id"], "waiting"), "scout never started waiting"
    bridges_before = sorted(bridge_pids(session))
    first.stop(signal.SIGKILL)
    assert len(bridges_before) >= 3

    second = serve(session, *transport)  # `shepherd serve --session-dir DIR` on the same directory
    cli("message", "planner", "go ahead and answer", session=session)
    assert second.wait_for(
        lambda lines: any(
            x.get("kind") == "task_completion"
            and [r["task_id"] for r in x["results"]] == [task["task_id"]]
            for x in lines
        ),
        timeout=60,
    ), "the resumed session never delivered the scout's completion"
    # exactly one completion per watched task across both parents, none re-delivered
    delivered = [r["task_id"] for n in _completions(session) for r in n["results"]]
    assert delivered.count(task["task_id"]) == 1
    assert delivered.count(quick["task_id"]) == 1
    (note,) = [n for n in _completions(session) if n["watcher_id"] == watch["watcher_id"]]
    assert note["results"][0]["text"] == "explored src/core"

    _, status = cli("status", session=session)
    rows = {a["name"]: a for a in status["agents"]}
    assert rows["quick"]["task"]["result"]["text"] == "quick"  # earlier results intact
    assert rows["scout"]["task"]["state"] == "completed"
    _, again = cli("watch", task["task_id"], quick["task_id"], session=session)
    assert again["pending"] == [] and len(again["completed"]) == 2
    # the same bridges went on: reconnected, not restarted
    assert set(bridges_before) <= set(bridge_pids(session)) | set(bridges_before)
    assert sorted(p for p in bridge_pids(session) if p in bridges_before) != []
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)
    assert bridge_pids(session) == []


def test_a_live_session_cannot_be_claimed_by_a_second_parent(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    session = tmp_path / "session"
    serve(session)
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", "serve", "--session-dir", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "session_busy" in done.stderr and "live session" in done.stderr


ONE_SHOT = {"steps": [{"await": "task"}, {"done": {"status": "completed", "summary": "one"}}]}
ON_CUE = {  # finishes when the test says so
    "steps": [
        {"await": "task"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "two"}},
        {"await": "any"},
    ]
}


def test_a_result_the_watch_answer_carried_is_never_delivered_again_after_sigkill(  # type: ignore[no-untyped-def]
    serve, tmp_path: Path
) -> None:
    """`watch T1 T2` answers T1 inline; after a kill -9 and a restart, only T2 is notified."""
    session = tmp_path / "session"
    first = serve(session)
    cli("spawn", "one", "--script", write_script(tmp_path, "one", ONE_SHOT), session=session)
    cli("spawn", "two", "--script", write_script(tmp_path, "two", ON_CUE), session=session)
    _, t1 = cli("delegate", "one", "first", session=session)
    _, waited = cli("wait", t1["task_id"], "--timeout", "60", session=session)
    assert not waited["timed_out"]
    _, t2 = cli("delegate", "two", "second", session=session)
    _, watch = cli("watch", t1["task_id"], t2["task_id"], session=session)
    assert [r["task_id"] for r in watch["completed"]] == [t1["task_id"]]
    assert watch["pending"] == [t2["task_id"]]
    first.stop(signal.SIGKILL)

    second = serve(session)
    cli("message", "two", "finish now", session=session)
    assert second.wait_for(
        lambda lines: any(
            x.get("kind") == "task_completion"
            and t2["task_id"] in [r["task_id"] for r in x["results"]]
            for x in lines
        ),
        timeout=60,
    ), "T2 was never delivered"
    # A re-delivery of T1 would come at the restart, before T2's (or with it): it is here
    # by now if it was ever going to be.
    mine = [n for n in _completions(session) if n["watcher_id"] == watch["watcher_id"]]
    assert [[r["task_id"] for r in n["results"]] for n in mine] == [[t2["task_id"]]]
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)


def test_agents_whose_bridges_died_with_the_parent_are_reported_gone_once(  # type: ignore[no-untyped-def]
    serve, scripts, tmp_path: Path
) -> None:
    """No made-up exit status, no tracebacks: one warning per agent, and its open task fails
    with the reason, told through the normal completion path."""
    session = tmp_path / "session"
    first = serve(session)
    for name in ("alpha", "beta"):
        cli("spawn", name, "--script", scripts["idle"], session=session)
    _, task = cli("delegate", "alpha", "hold on", session=session)
    for name in ("alpha", "beta"):  # each bridge said ready (its pid journaled): one that
        # never did would be started by the next parent instead (test_crash_points.py)
        assert first.wait_story(name, "process idle")
    _, watch = cli("watch", task["task_id"], session=session)
    first.stop(signal.SIGKILL)
    for pid in bridge_pids(session):
        os.kill(pid, signal.SIGKILL)
    assert wait_gone(lambda: bridge_pids(session))

    second = serve(session)
    assert second.wait_for(
        lambda lines: any(
            x.get("kind") == "task_completion" and x["watcher_id"] == watch["watcher_id"]
            for x in lines
        ),
        timeout=60,
    ), "the task of the vanished agent was never reported"
    (note,) = [n for n in _completions(session) if n["watcher_id"] == watch["watcher_id"]]
    (result,) = note["results"]
    assert result["status"] == "failed"
    assert result["error"].endswith(": its bridge was not running when the parent restarted")
    assert "status" not in result["error"]  # no made-up exit status
    _, status = cli("status", session=session)
    rows = {a["name"]: a for a in status["agents"]}
    assert all(rows[n]["process_state"] == "exited" for n in ("alpha", "beta"))
    assert all(rows[n].get("exit_code") is None for n in ("alpha", "beta")), rows
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)
    assert second.proc.stderr is not None
    log = second.proc.stderr.read().decode()
    assert "Traceback" not in log and "with status" not in log, log
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, log
    for name in ("alpha", "beta"):
        assert any(f"agent {name} " in w and "bridge was not running" in w for w in warnings)


def test_a_readopted_command_agent_mid_turn_shows_working(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The bridge re-announces itself with the turn still running; the parent shows it."""
    session = tmp_path / "session"
    fifo = tmp_path / "turn.fifo"
    os.mkfifo(fifo)
    first = serve(session)
    cli("spawn", "cmd", "--adapter", "command", "--cmd", f": {{message}}; read x < {fifo}",
        session=session)  # fmt: skip
    cli("delegate", "cmd", "work until told", session=session)
    assert first.wait_story("cmd: process working")
    first.stop(signal.SIGKILL)

    second = serve(session)
    assert second.wait_for(
        lambda lines: any("cmd: process" in x.get("story", "") for x in lines if "story" in x),
        timeout=60,
    ), "the bridge never reconnected"
    _, status = cli("status", "cmd", session=session)
    assert status["agents"][0]["process_state"] == "working"
    with open(fifo, "w") as f:  # the turn may end now
        f.write("go\n")
    assert second.wait_story("cmd: process idle")
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)
