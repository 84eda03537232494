"""The CLI contract of issue 3, against a real `shepherd serve` and real child bridges."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import bridge_pids, cli
from tests.reliability.live import pids_with_env, wait_for_files

pytestmark = pytest.mark.processes


def _completion(lines: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    return [x for x in lines if x.get("kind") == "task_completion"]


def test_canonical_scenario_driven_from_the_cli(serve, scripts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve()
    session = tmp_path / "session"
    header = next(x["session"] for x in server.lines if "session" in x)
    assert header["session_dir"] == str(session) and header["session_id"].startswith(
        "shepherd-session-"
    )

    _, scout = cli("spawn", "scout", "--script", scripts["scout"], session=session)
    assert set(scout) == {"agent_id", "name", "adapter", "process_state"}
    assert (scout["name"], scout["adapter"], scout["process_state"]) == (
        "scout",
        "scripted",
        "starting",
    )
    _, planner = cli("spawn", "planner", "--script", scripts["planner"], session=session)

    _, planning = cli("delegate", "planner", "plan the work", session=session)
    _, task = cli("delegate", scout["agent_id"], "map the code", "--timeout", "5", session=session)
    assert set(task) == {"task_id", "agent_id", "agent_name", "accepted"} and task["accepted"]
    assert task["agent_name"] == "scout"
    _, watch = cli("watch", task["task_id"], session=session)
    assert set(watch) == {"watcher_id", "ids", "pending", "completed"}
    assert watch["pending"] == [task["task_id"]] and watch["completed"] == []
    cli("message", "planner", "go ahead and answer", session=session)

    assert server.wait_for(lambda lines: len(_completion(lines)) == 1, timeout=30)
    (note,) = _completion(server.lines)
    (result,) = note["results"]
    assert set(result) >= {
        "task_id",
        "agent_id",
        "status",
        "ok",
        "return_code",
        "text",
        "error",
        "completed_at",
    }
    assert (result["status"], result["return_code"], result["text"]) == (
        "completed",
        0,
        "explored src/core",
    )

    _, status = cli("status", session=session)
    rows = {a["name"]: a for a in status["agents"]}
    assert (
        rows["scout"]["task"]["state"] == "completed" and rows["scout"]["process_state"] == "idle"
    )
    assert rows["planner"]["task"]["state"] == "running"  # never said done, however idle
    assert rows["planner"]["task"]["task_id"] == planning["task_id"]

    _, again = cli("watch", task["task_id"], session=session)  # already settled: answered at once
    assert again["pending"] == [] and [r["status"] for r in again["completed"]] == ["completed"]

    rc, _text = cli("notifications", session=session)
    assert rc == 0
    _, read = cli("read", "scout", "--lines", "10", session=session)
    assert "scout: looking around" in read["lines"]
    assert planner["agent_id"] in {a["agent_id"] for a in status["agents"]}


def test_waiting_is_visible_in_status_and_a_cli_reply_resumes_it(
    serve: Any, scripts: dict[str, str], tmp_path: Path
) -> None:
    serve()
    session = tmp_path / "session"
    cli("spawn", "scout", "--script", scripts["scout"], session=session)
    cli("spawn", "planner", "--script", scripts["idle"], session=session)  # never answers
    _, task = cli("delegate", "scout", "map the code", session=session)

    def waiting() -> dict | None:  # type: ignore[type-arg]
        _, status = cli("status", "scout", session=session)
        row = status["agents"][0]
        return row if row["task"]["state"] == "waiting" and row["process_state"] == "idle" else None

    row = None
    for _ in range(100):  # bounded: each round is a real CLI round trip, not a sleep
        row = waiting()
        if row:
            break
    assert row is not None, "scout never reached idle / waiting"
    (request,) = row["task"]["pending_requests"]
    assert request["question"] == "which module first?"
    human = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", "status", "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "scout" in human and "idle / waiting for planner" in human

    # the parent answers on the planner's behalf? No: only the target may reply.
    rc, err = cli(
        "message",
        "scout",
        "here",
        "--reply-to",
        request["request_id"],
        session=session,
        check=False,
    )
    assert rc == 2 and err["error"]["code"] == "forbidden_sender"
    _, sent = cli("message", "scout", "just so you know", session=session)
    assert sent["accepted"] and "request_id" not in sent
    _, asked = cli("message", "planner", "are you there?", "--expects-reply", session=session)
    assert asked["request_id"] == asked["message_id"]
    _, cancelled = cli("cancel", task["task_id"], "--reason", "enough", session=session)
    assert (cancelled["status"], cancelled["return_code"]) == ("cancelled", 130)


def test_errors_exit_2_with_a_typed_json_error(serve, scripts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    serve()
    session = tmp_path / "session"
    rc, err = cli("delegate", "nobody", "x", session=session, check=False)
    assert (
        rc == 2 and err["error"]["code"] == "invalid_handle" and "nobody" in err["error"]["message"]
    )
    rc, err = cli("spawn", "Bad Name", "--script", scripts["idle"], session=session, check=False)
    assert rc == 2 and err["error"]["code"] == "invalid_argument"
    rc, err = cli(
        "spawn", "x", "--script", "/nonexistent/script.json", session=session, check=False
    )
    assert rc == 2 and "does not exist" in err["error"]["message"]
    cli("spawn", "scout", "--script", scripts["idle"], session=session)
    _, first = cli("delegate", "scout", "one", session=session)
    rc, err = cli("delegate", "scout", "two", session=session, check=False)
    assert (
        rc == 2
        and err["error"]["code"] == "agent_busy"
        and first["task_id"] in err["error"]["message"]
    )
    rc, err = cli("watch", first["agent_id"], session=session, check=False)
    assert rc == 2 and err["error"]["code"] == "invalid_handle"
    assert "is an agent id" in err["error"]["message"]  # not "a agent id"
    rc, err = cli("watch", first["task_id"], first["task_id"], session=session, check=False)
    assert rc == 2 and err["error"]["code"] == "duplicate_ids"
    rc, err = cli("status", session=tmp_path / "no-such-session", check=False)
    assert rc == 2 and err["error"]["code"] == "session_unavailable"


def test_killing_an_agent_mid_task_fails_it_with_return_code_1(
    serve: Any, scripts: dict[str, str], tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    cli("spawn", "scout", "--script", scripts["idle"], session=session)
    _, task = cli("delegate", "scout", "work", session=session)
    cli("watch", task["task_id"], session=session)
    pids = []
    for _ in range(100):
        pids = bridge_pids(session)
        if pids:
            break
    assert pids, "no bridge process found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert server.wait_for(lambda lines: len(_completion(lines)) == 1, timeout=30)
    (result,) = _completion(server.lines)[0]["results"]
    assert (result["status"], result["return_code"]) == ("failed", 1)
    assert "exited with status" in result["error"] and result["status"] != "completed"


def test_close_and_shutdown_leave_no_process_behind(serve, scripts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve()
    session = tmp_path / "session"
    looping = tmp_path / "loop.json"
    looping.write_text(
        json.dumps({"steps": [{"await": "task"}, {"run": "sleep 300"}, {"await": "any"}]})
    )
    cli("spawn", "a", "--script", str(looping), session=session)
    cli("spawn", "b", "--script", scripts["idle"], session=session)
    _, task = cli("delegate", "a", "run something long", session=session)
    _, closed = cli("close", "a", session=session)
    assert closed["cancelled_task_id"] == task["task_id"]
    _, status = cli("status", "a", session=session)
    assert status["agents"][0]["task"]["state"] == "cancelled"
    cli("shutdown", session=session)
    server.proc.wait(timeout=30)
    assert bridge_pids(session) == []
    assert (session / "journal.jsonl").exists()  # records kept for inspection


def _agent_pids(agent_id: str) -> list[int]:
    return pids_with_env(f"SHEPHERD_AGENT_ID={agent_id}")


def test_close_kills_the_agents_whole_tree_and_top_shows_a_frame(
    serve: Any, scripts: dict[str, str], tmp_path: Path
) -> None:
    serve()
    session = tmp_path / "session"
    tree = tmp_path / "tree.json"
    # the agent's tool starts a grandchild that would outlive a careless close
    # (the marker is written once both sleeps are forked: the test waits on it, not on luck)
    marker = tmp_path / "forked"
    run = f"sleep 300 & sleep 300 & touch {marker}; wait"
    tree.write_text(json.dumps({"steps": [{"await": "task"}, {"run": run}, {"await": "any"}]}))
    _, agent = cli("spawn", "worker", "--script", str(tree), session=session)
    cli("spawn", "bystander", "--script", scripts["idle"], session=session)
    cli("delegate", "worker", "run the tree", session=session)
    assert wait_for_files(tmp_path, marker.exists, 60), "the agent's tool never ran"
    assert len(_agent_pids(agent["agent_id"])) >= 4  # bridge, shell, two sleeps
    frame = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", "top", "--once", "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "worker" in frame and "bystander" in frame and "running" in frame
    cli("close", "worker", session=session)
    for _ in range(300):
        _, status = cli("status", "worker", session=session)
        if status["agents"][0]["process_state"] == "exited":
            break
    assert status["agents"][0]["process_state"] == "exited"
    assert _agent_pids(agent["agent_id"]) == []  # confirmed gone before the slot is free
    _, again = cli("spawn", "worker", "--script", scripts["idle"], session=session)
    assert again["agent_id"] != agent["agent_id"]
    _, rows = cli("status", "bystander", session=session)
    assert rows["agents"][0]["process_state"] == "idle"  # nobody else was touched


def test_following_notifications_ends_with_the_session(serve, scripts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = serve()
    session = tmp_path / "session"
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors.surfaces.cli",
            "notifications",
            "--follow",
            "--session",
            str(session),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        cli("spawn", "quick", "--script", scripts["idle"], session=session)
        _, task = cli("delegate", "quick", "x", session=session)
        cli("watch", task["task_id"], session=session)
        cli("cancel", task["task_id"], session=session)
        assert follower.stdout is not None
        # the notices first (the idle script's turn ended without done), then the completion,
        # each line as it arrives
        line = follower.stdout.readline()
        while '"turn_ended_without_done"' in line:
            line = follower.stdout.readline()
        assert '"task_completion"' in line and task["task_id"] in line
        cli("shutdown", session=session)
        server.proc.wait(timeout=30)
        assert follower.wait(timeout=30) == 0  # the session ended: following ends too
    finally:
        follower.kill()
        follower.wait(timeout=10)
        if follower.stdout is not None:
            follower.stdout.close()


def test_spawn_many_and_delegate_many_from_the_cli_refuse_bad_items_alone(  # type: ignore[no-untyped-def]
    serve, tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    done = tmp_path / "done.json"
    done.write_text(json.dumps({"steps": [{"await": "task"}, {"done": {"status": "completed"}}]}))
    # spawn-many: one call, the same options; a bad or taken name is refused alone
    for args in (["--script", str(done)], ["w0", "--script", ""], ["w"] * 1000):
        rc, err = cli("spawn-many", *args, session=session, check=False)
        assert rc == 2 and err["error"]["code"] == "invalid_argument", (args[:3], err)
    names = ["w0", "w1", "Bad", "w2", "w1"]
    rc, spawned = cli("spawn-many", *names, "--script", str(done), session=session, check=False)
    assert rc == 1, spawned
    assert [a is not None for a in spawned["agent_ids"]] == [True, True, False, True, False]
    assert [e["index"] for e in spawned["errors"]] == [2, 4]

    # hostile calls are refused whole, by the command line, before anything is sent
    hostile = [
        ["--task", "w0"],  # a task needs an agent AND a text
        ["--task", "w0", ""],  # an empty text
        ["--task", "w0", "x", "--timeout", "nan"],
        ["--task", "w0", "x", "--timeout", "-1"],
        [arg for _ in range(1000) for arg in ("--task", "w0", "x")],  # 10x the bound
        [],  # no task at all
    ]
    for args in hostile:
        rc, err = cli("delegate-many", *args, session=session, check=False)
        assert rc == 2 and err["error"]["code"] == "invalid_argument", (args[:4], err)
    _, status = cli("status", session=session)
    assert [a["task"] for a in status["agents"]] == [None, None, None]

    # one bad item among good ones (an unknown agent, the same agent twice): refused alone
    args = ["--task", "w0", "first", "--task", "ghost", "x", "--task", "w0", "again"]
    args += ["--task", "w1", "second", "--task", "w2", "third", "--timeout", "5", "--watch"]
    rc, many = cli("delegate-many", *args, session=session, check=False)
    assert rc == 1, many  # some item was refused
    ids = many["task_ids"]
    assert ids[1] is None and ids[2] is None and all(ids[i] for i in (0, 3, 4))
    assert [(e["index"], e["code"]) for e in many["errors"]] == [
        (1, "invalid_handle"),
        (2, "agent_busy"),
    ]
    accepted = {ids[0], ids[3], ids[4]}
    # the batch's watcher hands each completion to the parent exactly once
    assert server.wait_for(
        lambda lines: {r["task_id"] for n in _completion(lines) for r in n["results"]} >= accepted,
        timeout=60,
    )
    got = [r["task_id"] for n in _completion(server.lines) for r in n["results"]]
    assert sorted(got) == sorted(accepted)
    # every accepted task is in the journal (one write for the batch, then their settlements)
    journal = (session / "journal.jsonl").read_text()
    assert all(task_id in journal for task_id in accepted)
