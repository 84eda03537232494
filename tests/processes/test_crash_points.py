"""Issue 8 part 3: the parent supervisor killed (SIGKILL) at each point of a settlement and at
steps of the canonical scenario, then restarted: every accepted envelope handled exactly once,
every settled result present, no duplicate notification, no orphan process. The torn-write
points leave half a line at the end of the journal or the notifications file; the restarted
parent cuts it off before appending, so a third start still reads everything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from actors.runtime.crashpoints import POINTS
from tests.processes.conftest import START_S, Serve, bridge_pids, cli
from tests.reliability.live import PLANNER, SCOUT, session_pids, write_script

#: several `serve` starts over a cluster of three, each with its own ceiling
pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]


def _notifications(session: Path) -> list[dict]:  # type: ignore[type-arg]
    path = session / "notifications.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def _completed(session: Path) -> list[str]:
    """Every task id delivered in a completion notification, in order (duplicates kept)."""
    return [
        r["task_id"]
        for n in _notifications(session)
        if n.get("kind") == "task_completion"
        for r in n["results"]
    ]


def _wait_notified(server: Serve, session: Path, watcher_id: str) -> bool:
    """Wait until the watcher's completion is in the notifications file (``serve`` prints
    each notification too, which wakes the wait)."""
    return server.wait_for(
        lambda lines: any(
            n["watcher_id"] == watcher_id
            for n in _notifications(session)
            if n.get("kind") == "task_completion"
        ),
        timeout=30,
    )


#: the planner without a task of its own: a planner with an open task ends turns without done,
#: and the notice saying so would be the session's first notification, reaching the notify
#: crash points before the settlement whose notification those points are about
ANSWERER = {"steps": PLANNER["steps"][1:]}
QUICK = {"steps": [{"await": "task"}, {"done": {"status": "completed", "summary": "quick"}}]}


#: the canonical scout, whose work is a tool call: a claim without one is told at once
#: (``unverified_claim``), a notification before the completion's, which the crash points that
#: kill at a notification would take for it
WORKING_SCOUT = {"steps": [*SCOUT["steps"][:-2], {"run": "echo mapped"}, *SCOUT["steps"][-2:]]}


def _spawn_pair(tmp_path: Path, session: Path, planner: dict = PLANNER) -> None:  # type: ignore[type-arg]
    """The canonical scout and planner, started through the CLI."""
    for name, script in (("scout", WORKING_SCOUT), ("planner", planner)):
        cli("spawn", name, "--script", write_script(tmp_path, name, script), session=session)


def _start(session: Path, crash_at: str | None, *transport: str) -> Serve:
    env = dict(os.environ)
    env.pop("SHEPHERD_CRASH_AT", None)
    if crash_at:
        env["SHEPHERD_CRASH_AT"] = crash_at
    server = Serve(session, env, *transport)
    if not server.wait_for(lambda lines: any("session" in x for x in lines), START_S):
        said = _stopped_saying(server)  # never left running behind a failed test
        raise AssertionError(f"serve did not start: {server.lines[-5:]} {said}")
    return server


def _stopped_saying(server: Serve) -> str:
    """Stop ``server`` (SIGKILL); the end of what it wrote on stderr (what is there: a process
    it started may still hold the pipe)."""
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)
    said = b""
    if server.proc.stderr is not None:
        os.set_blocking(server.proc.stderr.fileno(), False)
        said = server.proc.stderr.read() or b""
    server.stop()
    return said.decode(errors="replace")[-3000:]


#: the file a torn-write crash point leaves a half line in
TORN = {"settle.torn_journal": "journal.jsonl", "notify.torn_write": "notifications.jsonl"}


#: the points a settlement reaches; ``mailbox.before_ack`` is reached by the parent's very first
#: batch (a CLI call), so it is exercised on a mailbox of its own (tests/mailbox/test_batches.py),
#: ``spawn.before_launch`` by the first spawn (its own test below), and ``merge.*`` by a merge
#: (tests/processes/test_merge.py)
SETTLEMENT_POINTS = tuple(p for p in POINTS if not p.startswith(("mailbox.", "spawn.", "merge.")))


@pytest.mark.parametrize("point", SETTLEMENT_POINTS)
def test_kill_at_each_crash_point_then_resume(
    point: str, envelope_transport: tuple[str, ...], tmp_path: Path
) -> None:
    """Once per transport (the journal in files on both: the test reads it)."""
    session = tmp_path / "session"
    servers: list[Serve] = []
    transport = envelope_transport
    try:
        first = _start(session, point, *transport)
        servers.append(first)
        _spawn_pair(tmp_path, session, ANSWERER)
        _, task = cli("delegate", "scout", "map", session=session)
        _, watch = cli("watch", task["task_id"], session=session)
        cli("message", "planner", "go ahead", session=session)
        # the armed point is reached at the first inbound envelope or the first settlement
        first.proc.wait(timeout=60)
        assert first.proc.returncode == -signal.SIGKILL, f"{point} was never reached"
        first.stop()

        second = _start(session, None, *transport)
        servers.append(second)
        _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
        assert not waited["timed_out"], f"after a crash at {point} the task never completed"
        assert _wait_notified(second, session, watch["watcher_id"])
        completions = _completed(session)
        assert completions == [task["task_id"]], f"{point}: {completions}"
        _, result = cli("watch", task["task_id"], session=session)
        assert [r["text"] for r in result["completed"]] == ["explored src/core"]
        # the planner's request was answered exactly once (journal: one 'replied' record)
        records = [json.loads(x) for x in (session / "journal.jsonl").read_text().splitlines()]
        replied = [
            r for r in records if r["type"] == "request" and r["record"]["state"] == "replied"
        ]
        assert len(replied) == 1, f"{point}: {replied}"
        # a torn write was cut off (and kept aside) when the journal files were opened
        torn = TORN.get(point)
        _, status = cli("status", session=session)
        assert status.get("journal_problems", 0) == (1 if torn else 0), f"{point}: {status}"
        if torn:
            assert (session / f"{torn}.torn-1").stat().st_size > 0, point
        cli("shutdown", session=session)
        second.proc.wait(timeout=30)
        assert bridge_pids(session) == [], f"{point}: orphans"

        # and once more: what the second parent appended after the repair reads back whole
        third = _start(session, None, *transport)
        servers.append(third)
        assert third.wait_story("session restored", "0 open tasks", "0 watchers"), point
        _, result = cli("watch", task["task_id"], session=session)
        assert [r["text"] for r in result["completed"]] == ["explored src/core"], point
        _, status = cli("status", session=session)
        assert status.get("journal_problems", 0) == 0, f"{point}: {status}"
        third.stop()  # SIGTERM: an orderly shutdown (no agent is left to close)
        assert third.proc.returncode == 0, point
        assert _completed(session) == [task["task_id"]], point
    finally:
        for server in servers:
            server.stop()


def test_every_crash_point_is_named_in_the_code() -> None:
    root = Path(__file__).resolve().parents[2] / "actors"
    text = "".join(p.read_text() for p in root.rglob("*.py") if p.name != "crashpoints.py")
    for point in POINTS:
        assert f'crashpoint("{point}")' in text or f'torn_point="{point}"' in text, point
    assert sys.executable and subprocess  # the module is used for processes above


STEPS = ("after_spawn", "after_delegate", "while_waiting", "after_completion")


@pytest.mark.parametrize("step", STEPS)
def test_kill_at_each_step_of_the_canonical_scenario(
    step: str, transport: tuple[str, ...], tmp_path: Path
) -> None:
    """Once per transport: the file mailbox, and a NATS cluster with the records on it."""
    session = tmp_path / "session"
    servers: list[Serve] = []

    def kill_and_restart() -> Serve:
        servers[-1].stop(signal.SIGKILL)
        servers.append(_start(session, None, *transport))
        return servers[-1]

    try:
        servers.append(_start(session, None, *transport))
        _spawn_pair(tmp_path, session)
        if step == "after_spawn":
            kill_and_restart()
        cli("delegate", "planner", "plan", session=session)
        _, task = cli("delegate", "scout", "map", session=session)
        _, watch = cli("watch", task["task_id"], session=session)
        if step == "after_delegate":
            kill_and_restart()
        assert step == "after_delegate" or servers[-1].wait_story(task["task_id"], "waiting")
        if step == "while_waiting":
            kill_and_restart()
        cli("message", "planner", "go ahead", session=session)
        if step == "after_completion":
            cli("wait", task["task_id"], "--timeout", "60", session=session)
            kill_and_restart()
        _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
        assert not waited["timed_out"], step
        assert _wait_notified(servers[-1], session, watch["watcher_id"])
        delivered = _completed(session)
        assert delivered == [task["task_id"]], f"{step}: {delivered}"
        cli("shutdown", session=session)
        servers[-1].proc.wait(timeout=30)
        assert bridge_pids(session) == [], f"{step}: orphans"
    finally:
        for server in servers:
            server.stop()


def test_a_spawn_accepted_before_the_kill_is_started_by_the_next_parent(
    transport: tuple[str, ...], tmp_path: Path
) -> None:
    """Killed between accepting a spawn (journaled) and starting its bridge: the restarted
    parent finds no bridge of the agent and none was ever ready, so it starts it (one process,
    never "gone"), and the agent works. Once per transport."""
    session = tmp_path / "session"
    servers = [_start(session, "spawn.before_launch", *transport)]
    try:
        script = write_script(tmp_path, "quick", QUICK)
        cli("spawn", "quick", "--script", script, session=session, check=False)
        servers[0].proc.wait(timeout=60)
        assert servers[0].proc.returncode == -signal.SIGKILL, "the crash point was never reached"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        assert session_pids(sid) == [], "a bridge was started before the kill"

        servers.append(_start(session, None, *transport))
        assert servers[-1].wait_story("quick", "process idle"), "the agent was never started"
        _, task = cli("delegate", "quick", "go", session=session)
        _, waited = cli("wait", task["task_id"], "--timeout", "60", session=session)
        assert [r["text"] for r in waited["completed"]] == ["quick"], waited
        assert len(session_pids(sid)) == 1  # one bridge, the one the second parent started
        notices = [n for n in _notifications(session) if n.get("code") == "agent_exited"]
        assert notices == [], notices
        cli("shutdown", session=session)
        servers[-1].proc.wait(timeout=30)
        assert bridge_pids(session) == []
    finally:
        for server in servers:
            server.stop()
