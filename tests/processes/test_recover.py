"""Issue 18 item 2: `shepherd serve --session-dir DIR --recover` after the whole process tree
(the parent and every agent process) was killed. The agents whose processes are gone start
again, their open tasks are handed to them again (marked resumed, with their history) and
finish; results are all there and nothing is delivered twice. An agent that cannot start
again fails its task with the reason."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import Serve, bridge_pids, cli
from tests.reliability.live import Changes, wait_gone, write_script

#: `serve` started twice over a cluster of three, each start with its own ceiling
pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

SERVE = [sys.executable, "-m", "actors.surfaces.cli", "serve"]

PLANNER = {  # answers every question, in any incarnation
    "steps": [
        {"repeat": {"times": 10, "steps": [{"await": "message"}, {"reply": {"text": "src/core"}}]}}
    ]
}
SCOUT = {  # asks, then waits for the test's go-ahead (which comes only after the recovery)
    "steps": [
        {"await": "task"},
        {"say": "GOT: {last}"},
        {"message": {"to": "planner", "text": "which module first?", "expects_reply": True}},
        {"await": "reply"},
        {"say": "ANSWERED"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "explored after {last}"}},
        {"await": "any"},
    ]
}
HOLD = {"steps": [{"await": "task"}, {"say": "HOLDING"}, {"await": "message"}]}
QUICK = {"steps": [{"await": "task"}, {"done": {"status": "completed", "summary": "quick"}}]}

#: A command agent: its first command blocks (no CPU) until it is killed; its resume command
#: (the one `--recover` runs) records what it was told and finishes the task.
FAKE_AGENT = textwrap.dedent(
    """
    import os, subprocess, sys
    mode, message, record = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(record, "a") as f:
        f.write(mode + " " + message.replace("\\n", "\\\\n") + "\\n")
    print(mode.upper(), flush=True)
    if mode == "first":
        with open(record + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(record + ".tmp", record + ".pid")  # whole, at once
        fifo = record + ".fifo"
        os.mkfifo(fifo)
        open(fifo).read()  # never opened for writing: blocks until killed
    else:
        subprocess.run(["shepherd-child", "done", "--status", "completed",
                        "--summary", "resumed by the command"], check=True)
    """
)


def fake_agent(tmp_path: Path) -> str:
    """Write :data:`FAKE_AGENT` into ``tmp_path``; the command line that runs it."""
    fake = tmp_path / "fake_agent.py"
    fake.write_text(FAKE_AGENT)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(fake))}"


def _notes(session: Path) -> list[dict[str, Any]]:
    path = session / "notifications.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _results(session: Path) -> list[dict[str, Any]]:
    return [r for n in _notes(session) if n.get("kind") == "task_completion" for r in n["results"]]


def _journal(session: Path, kind: str) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in (session / "journal.jsonl").read_text().splitlines()]
    return [x["record"] for x in lines if x["type"] == kind]


def _kill_everything(server: Serve, session: Path) -> None:
    """SIGKILL the parent, then every process of the session (bridges and what they ran),
    found by the session id in their environment, as a reboot would."""
    server.stop(signal.SIGKILL)
    for pid in bridge_pids(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert wait_gone(lambda: bridge_pids(session))


def _completed(ids: list[str]) -> Any:
    def check(lines: list[dict[str, Any]]) -> bool:
        got = {
            r["task_id"] for x in lines if x.get("kind") == "task_completion" for r in x["results"]
        }
        return set(ids) <= got

    return check


def test_kill_the_whole_tree_and_recover_every_open_task(  # type: ignore[no-untyped-def]
    serve, envelope_transport, tmp_path: Path
) -> None:
    """Once per transport (the journal in files on both: the test reads it)."""
    session = tmp_path / "session"
    first = serve(session, *envelope_transport)
    doomed_dir = tmp_path / "doomed"
    doomed_dir.mkdir()
    record = tmp_path / "worker-runs.txt"
    run = fake_agent(tmp_path)
    for name, script in (("planner", PLANNER), ("scout", SCOUT), ("quick", QUICK)):
        cli("spawn", name, "--script", write_script(tmp_path, name, script), session=session)
    cli("spawn", "doomed", "--script", write_script(doomed_dir, "hold", HOLD), session=session)
    cli(
        "spawn",
        "worker",
        "--adapter",
        "command",
        "--cmd",
        f"{run} first {{message}} {shlex.quote(str(record))}",
        "--resume-cmd",
        f"{run} resume {{message}} {shlex.quote(str(record))}",
        session=session,
    )
    tasks = {"quick": cli("delegate", "quick", "be quick", session=session)[1]["task_id"]}
    _, waited = cli("wait", tasks["quick"], "--timeout", "60", session=session)
    assert not waited["timed_out"]
    for name, text in (
        ("scout", "map the code base"),
        ("worker", "refactor the parser"),
        ("doomed", "hold the line"),
    ):
        tasks[name] = cli("delegate", name, text, session=session)[1]["task_id"]
    _, watch = cli("watch", *tasks.values(), session=session)
    assert [r["task_id"] for r in watch["completed"]] == [tasks["quick"]]  # carried inline
    assert first.wait_story("request", "replied"), "the scout's question was never answered"
    assert first.wait_story("worker", "process working")
    # the turn's process wrote its first line (a turn that is working may not have yet)
    pid_file = Path(str(record) + ".pid")
    changes = Changes(tmp_path)
    try:
        assert changes.wait_until(pid_file.exists, timeout=60), "the first turn never started"
    finally:
        changes.close()
    assert first.wait_story("doomed", "process idle")
    _kill_everything(first, session)
    (doomed_dir / "hold.json").unlink()  # this agent cannot start again

    second = serve(session, "--recover", *envelope_transport)
    # a second parent on the live session is refused, --recover or not
    refused = subprocess.run(
        [*SERVE, "--recover", "--session-dir", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "live session" in refused.stderr
    assert second.wait_for(_completed([tasks["worker"], tasks["doomed"]]), timeout=90), second.lines
    # the scout was handed its task again, resumed, with its history; it asks again, and
    # finishes on the go-ahead
    assert second.wait_story("request", "replied", timeout=90)
    cli("message", "scout", "go", session=session)
    assert second.wait_for(_completed([tasks["scout"]]), timeout=90), second.lines

    results = _results(session)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_task.setdefault(result["task_id"], []).append(result)
    # each open task's result notified once; quick's, which the watch answer carried, never
    opened = [tasks[n] for n in ("scout", "worker", "doomed")]
    assert {t: len(r) for t, r in by_task.items()} == dict.fromkeys(opened, 1)
    assert by_task[tasks["scout"]][0]["status"] == "completed"
    assert by_task[tasks["scout"]][0]["text"] == "explored after go"
    assert by_task[tasks["worker"]][0]["text"] == "resumed by the command"
    doomed = by_task[tasks["doomed"]][0]
    assert doomed["status"] == "failed" and "hold.json" in doomed["error"], doomed

    # every result is there for `wait`, and nothing is pending
    _, waited = cli("wait", *tasks.values(), "--timeout", "30", session=session)
    assert not waited["timed_out"] and len(waited["completed"]) == 4
    # the command agent: its first command once, then its resume command once (not cmd again)
    runs = record.read_text().splitlines()
    assert [r.split(" ", 1)[0] for r in runs] == ["first", "resume"], runs
    assert runs[1].startswith("resume [Shepherd delegated task, resumed]"), runs[1]
    assert "[resumed] This task was interrupted" in runs[1] and "refactor the parser" in runs[1]
    # the scout's resumed text carries its question and the planner's answer
    lines = cli("read", "scout", "--lines", "200", session=session)[1]["lines"]
    got = [x for x in lines if "GOT:" in x]
    assert got and "[resumed]" in got[-1], lines
    assert "asked planner" in " ".join(lines), lines
    assert "which module first? -> replied: src/core" in " ".join(lines), lines
    # journaled: one new incarnation per agent whose process was gone (quick had no task
    # but was part of the team), one hand-over per open task
    resumes = _journal(session, "task_resume")
    assert sorted(r["task_id"] for r in resumes) == sorted(
        [tasks["scout"], tasks["worker"], tasks["doomed"]]
    )
    assert {r["incarnation"] for r in _journal(session, "agent_recover")} == {1}
    assert len(_journal(session, "agent_recover")) == 5
    assert [n for n in _notes(session) if n.get("watcher_id") == watch["watcher_id"]]
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)
    assert bridge_pids(session) == []


def test_without_recover_the_tasks_of_gone_agents_fail_as_before(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    session = tmp_path / "session"
    first = serve(session)
    cli("spawn", "alpha", "--script", write_script(tmp_path, "hold", HOLD), session=session)
    _, task = cli("delegate", "alpha", "hold on", session=session)
    cli("watch", task["task_id"], session=session)
    assert first.wait_story("alpha", "process idle")
    _kill_everything(first, session)
    second = serve(session)
    assert second.wait_for(_completed([task["task_id"]]), timeout=60)
    (result,) = _results(session)
    assert result["status"] == "failed"
    assert result["error"].endswith("its bridge was not running when the parent restarted")
    assert _journal(session, "agent_recover") == [] and _journal(session, "task_resume") == []
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)


def _gone(pid: int, timeout: float = 60.0) -> bool:
    """Wait for ``pid`` to exit (its pidfd turns readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def test_what_a_dead_bridge_left_running_is_killed_before_its_agent_starts_again(  # type: ignore[no-untyped-def]
    serve, tmp_path: Path
) -> None:
    """The parent and the bridges die, but a command agent's turn (in a process group of its
    own) lives on: the recovery kills it before the agent starts again, so the task never
    runs twice at once."""
    session = tmp_path / "session"
    first = serve(session)
    record = tmp_path / "runs.txt"
    run = fake_agent(tmp_path)
    cli(
        "spawn",
        "worker",
        "--adapter",
        "command",
        "--cmd",
        f"{run} first {{message}} {shlex.quote(str(record))}",
        "--resume-cmd",
        f"{run} resume {{message}} {shlex.quote(str(record))}",
        session=session,
    )
    pid_file = Path(str(record) + ".pid")
    changes = Changes(tmp_path)
    try:
        _, task = cli("delegate", "worker", "refactor", session=session)
        cli("watch", task["task_id"], session=session)
        assert changes.wait_until(pid_file.exists, timeout=60), "the turn never started"
    finally:
        changes.close()
    turn = int(pid_file.read_text())
    first.stop(signal.SIGKILL)
    bridges = [p for p in bridge_pids(session) if os.getsid(p) == p]
    assert bridges and turn not in bridges
    for pid in bridges:
        os.kill(pid, signal.SIGKILL)
    assert all(_gone(p) for p in bridges)
    assert not _gone(turn, timeout=0.0)  # the turn outlived its bridge

    second = serve(session, "--recover")
    assert second.wait_for(_completed([task["task_id"]]), timeout=90), second.lines
    assert _gone(turn, timeout=0.0), "the old turn still runs beside the new incarnation"
    assert [r.split(" ", 1)[0] for r in record.read_text().splitlines()] == ["first", "resume"]
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)


def test_what_a_dead_agent_left_unread_is_kept_aside_not_delivered_again(  # type: ignore[no-untyped-def]
    serve, transport, tmp_path: Path
) -> None:
    """Messages accepted for an agent whose process then died unread them (stopped, then
    killed with the whole tree) are kept in `unread-before-recovery-1/`, each whole, and the
    new incarnation never gets them: its task comes back with its history. Once per transport
    (on NATS, what its consumer still held)."""
    session = tmp_path / "session"
    first = serve(session, *transport)
    cli("spawn", "hold", "--script", write_script(tmp_path, "hold", HOLD), session=session)
    _, task = cli("delegate", "hold", "hold on", session=session)
    assert first.wait_story("hold", "process idle")
    (bridge,) = [p for p in bridge_pids(session) if os.getsid(p) == p]
    os.kill(bridge, signal.SIGSTOP)  # it reads nothing more
    sent = ["first unread", "second unread"]
    for text in sent:
        cli("message", "hold", text, session=session)
    _kill_everything(first, session)

    second = serve(session, "--recover", *transport)
    assert second.wait_story("hold", "process idle", timeout=90)
    agent_id = cli("status", session=session)[1]["agents"][0]["agent_id"]
    aside = session / "agents" / agent_id / "unread-before-recovery-1"
    kept = [json.loads(p.read_text()) for p in sorted(aside.iterdir())]
    assert [k["content"] for k in kept if k.get("kind") == "message"] == sent, kept
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in aside.iterdir())
    # the new incarnation has its task again (resumed), and none of the messages
    lines = cli("read", "hold", "--lines", "200", session=session)[1]["lines"]
    assert not any("unread" in x for x in lines), lines
    cli("cancel", task["task_id"], session=session)
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)


ASKER = {  # asks the parent, waits for the answer, then is done (in any incarnation)
    "steps": [
        {"await": "task"},
        {"message": {"to": "shepherd", "text": "which branch?", "expects_reply": True}},
        {"await": "reply"},
        {"done": {"status": "completed", "summary": "on {last}"}},
        {"await": "any"},
    ]
}


def _questions(lines: list[dict[str, Any]]) -> list[str]:
    return [
        x["message_id"] for x in lines if x.get("kind") == "agent_message" and x["expects_reply"]
    ]


def test_a_question_open_when_the_tree_was_killed_never_blocks_the_resumed_task(
    serve: Any, tmp_path: Path
) -> None:
    """The dead incarnation's question is closed (orphaned) by the recovery: the new one asks
    again, gets its answer, and its plain `done --status completed` is accepted (it was
    refused with `unresolved_requests` naming the old question, and the task never ended)."""
    session = tmp_path / "session"
    first = serve(session)
    cli("spawn", "asker", "--script", write_script(tmp_path, "asker", ASKER), session=session)
    task = cli("delegate", "asker", "pick a branch", session=session)[1]["task_id"]
    assert first.wait_for(lambda lines: len(_questions(lines)) == 1), first.lines
    (old,) = _questions(first.lines)
    _kill_everything(first, session)

    second = serve(session, "--recover")

    def asked_again(lines: list[dict[str, Any]]) -> list[str]:
        return [q for q in _questions(lines) if q != old]

    assert second.wait_for(asked_again, timeout=90), second.lines
    (new,) = asked_again(second.lines)
    cli("message", "asker", "main", "--reply-to", new, session=session)
    _, waited = cli("wait", task, "--timeout", "45", session=session)
    (result,) = waited["completed"]
    assert (result["status"], result["text"]) == ("completed", "on main"), result
    # the old question is closed as orphaned, on the record
    closed = [r for r in _journal(session, "request") if r["request_id"] == old]
    assert closed[-1]["state"] == "cancelled", closed
