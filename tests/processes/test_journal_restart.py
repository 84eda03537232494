"""A parent restarted on a damaged or interrupted session, in-process: real bridges, real files.

:func:`abandon` leaves a supervisor as a ``kill -9`` would (actors stopped, files closed,
nothing more written, the bridges running on); the next :class:`Supervisor` on the same
directory resumes it. Nothing sleeps: waits are on notifications and lifecycle lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.calls.views import render_status
from protocol.core.errors import SessionUnavailable
from protocol.records.notifications import Notice, StaleWait, TaskCompletion
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord, TaskState
from tests.reliability.live import Story, session_pids, wait_gone, write_script

pytestmark = pytest.mark.processes

HOLD = {"steps": [{"await": "task"}, {"await": "any"}]}
ASK = {
    "steps": [
        {"await": "task"},
        {"message": {"to": "holder", "text": "anything yet?", "expects_reply": True}},
        {"await": "reply"},
        {"done": {"status": "completed", "summary": "{last}"}},
    ]
}


def abandon(sup: Supervisor) -> list[subprocess.Popen[bytes]]:
    """What a kill -9 of the parent leaves, in-process: its actors stop where they are, its
    files are closed, nothing more is written, and its agents' bridges run on. Returns the
    bridges it started (still this process's children, to be reaped at the end)."""
    sup._closed = True  # the fixture must not shut it down cleanly later
    sup.session.shutdown()
    sup._calls.close()
    sup.launcher.reaper.close()
    sup.journal.close()
    sup.notifications.close()
    sup._release()  # as the kernel releases a killed parent's lock on its session
    return bridges_of(sup)


def bridges_of(sup: Supervisor) -> list[subprocess.Popen[bytes]]:
    """The bridges ``sup`` started: this process's children, to be reaped at the end."""
    return [c.proc for c in sup.launcher.children.values() if isinstance(c.proc, subprocess.Popen)]


class Sessions:
    """Supervisors started one after the other on one session directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "session"
        self._mailbox = tmp_path / "mailbox"
        self.started: list[Supervisor] = []
        self.session_id: str | None = None
        self._bridges: list[subprocess.Popen[bytes]] = []

    def start(self, **kwargs: object) -> Supervisor:
        sup = Supervisor(self.dir, mailbox_root=self._mailbox, **kwargs)  # type: ignore[arg-type]
        self.started.append(sup)
        self.session_id = sup.session_id
        return sup

    def abandon(self, sup: Supervisor) -> None:
        self._bridges += abandon(sup)

    def keep_bridges(self, sup: Supervisor) -> None:
        self._bridges += bridges_of(sup)

    def close(self) -> None:
        for sup in self.started:
            with contextlib.suppress(Exception):
                sup.shutdown()
        if self.session_id is not None:
            for pid in session_pids(self.session_id):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert wait_gone(lambda: session_pids(self.session_id or ""), timeout=20)
        for proc in self._bridges:
            proc.wait(timeout=20)  # gone already: this only reaps it


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[Sessions]:
    s = Sessions(tmp_path)
    try:
        yield s
    finally:
        s.close()


def test_a_cancel_after_a_torn_journal_tail_survives_the_next_restart(
    sessions: Sessions, tmp_path: Path
) -> None:
    first = sessions.start()
    first.session.spawn("worker", script=write_script(tmp_path, "hold", HOLD))
    task = first.session.delegate("worker", "hold on").task_id
    sessions.abandon(first)
    # the kill came in the middle of a journal write: half a record ends the file
    journal = sessions.dir / "journal.jsonl"
    last = journal.read_bytes().splitlines(keepends=True)[-1]
    with open(journal, "ab") as f:
        f.write(last[: len(last) // 2])

    second = sessions.start()
    damaged = second.session.status().journal_problems
    cancelled = second.session.cancel(task)
    assert cancelled.status == "cancelled" and cancelled.return_code == 130
    second.shutdown()

    third = sessions.start()
    result = third.session.result(task)
    assert result is not None and (result.status, result.return_code) == ("cancelled", 130)
    (row,) = third.session.status().agents
    assert row.task is not None and row.task.state is TaskState.CANCELLED
    assert damaged == 1
    assert (sessions.dir / "journal.jsonl.torn-1").read_bytes() == last[: len(last) // 2]
    assert third.session.status().journal_problems == 0  # cut off once, for good


@pytest.mark.parametrize("name", ["journal.jsonl", "notifications.jsonl"])
def test_a_corrupt_line_in_the_middle_is_reported_and_counted_in_status(
    name: str, sessions: Sessions, tmp_path: Path, enable_logs: list[str]
) -> None:
    sink = CollectingSink()
    first = sessions.start(sinks=[sink])
    first.session.spawn("worker", script=write_script(tmp_path, "hold", HOLD))
    task = first.session.delegate("worker", "hold on").task_id
    first.session.watch(task)
    first.session.cancel(task)
    assert sink.wait_for(lambda items: len(items) >= 1, timeout=30)
    first.shutdown()
    path = sessions.dir / name
    lines = path.read_bytes().splitlines(keepends=True)
    # what must still be read after the damaged line: the agent's exit (journal), the delivery
    # (notifications). Not necessarily the last line: the agent's last envelopes (its usage)
    # and its exit are independent events, and either may be journaled first.
    kinds = [json.loads(line).get("type") or json.loads(line).get("kind") for line in lines]
    wanted = "agent_exit" if name == "journal.jsonl" else "task_completion"
    assert wanted in kinds, kinds
    at = len(kinds) - 1 - kinds[::-1].index(wanted)
    lines.insert(at, b'{"garbage": tru\n')  # a corrupt line just before it
    path.write_bytes(b"".join(lines))
    enable_logs.clear()

    story = Story(timeout=30)
    second = sessions.start(tap=story)
    status = second.session.status()
    assert status.journal_problems == 1
    warnings = [x for x in enable_logs if x.startswith("WARNING") and "cannot be read" in x]
    assert len(warnings) == 1 and f"{path} line {at + 1}: " in warnings[0]
    text = render_status(json.loads(msgspec.json.encode(status)))
    assert "1 damaged line(s)" in text
    # the records after the damaged line were read: the agent exited with 0 (not "gone at
    # restart"), the watcher's delivery is on record (no watcher restored to deliver again)
    (row,) = status.agents
    assert row.exit_code == 0, row
    assert "0 watchers" in story.lines[story.wait("session restored")]
    result = second.session.result(task)
    assert result is not None and result.status == "cancelled"


def test_a_stale_wait_is_reported_once_per_episode_across_a_restart(
    sessions: Sessions, tmp_path: Path
) -> None:
    settings = Settings(stale_wait_threshold_s=0.5)
    story = Story(timeout=30)
    sink = CollectingSink()
    first = sessions.start(settings=settings, sinks=[sink], tap=story)
    s = first.session
    s.spawn("holder", script=write_script(tmp_path, "hold", HOLD))
    s.spawn("asker", script=write_script(tmp_path, "ask", ASK))
    s.spawn("later", script=write_script(tmp_path, "ask2", ASK))
    task = s.delegate("asker", "ask the holder").task_id

    def stale(items: Sequence[object], task_id: str) -> list[StaleWait]:
        return [n for n in items if isinstance(n, StaleWait) and n.task_id == task_id]

    assert sink.wait_for(lambda items: bool(stale(items, task)), timeout=30)
    sessions.abandon(first)

    sink2 = CollectingSink()
    second = sessions.start(settings=settings, sinks=[sink2], tap=Story(timeout=30))
    assert second.session.status("asker").agents[0].task.stale  # type: ignore[union-attr]
    # A new episode, reported after the threshold: by then the first task's restored timer
    # (due at once) has fired and been decided, so its notice would already be here.
    later = second.session.delegate("later", "ask too").task_id
    assert sink2.wait_for(lambda items: bool(stale(items, later)), timeout=30)
    assert stale(sink2.items, task) == [], "the same waiting episode was reported again"
    assert len(stale(sink.items, task)) == 1


FINISH = {
    "steps": [
        {"await": "task"},
        {"done": {"status": "completed", "summary": "finished"}},
        {"await": "any"},
    ]
}


def _disk_full_on_settling(sup: Supervisor) -> None:
    """The journal fails on every write that settles a task (a full disk at that moment)."""
    journal = sup.journal
    append, append_many = journal.append, journal.append_many

    def settles(records: Sequence[object]) -> bool:
        return any(isinstance(r, TaskRecord) and r.terminal for r in records)

    def one(record: msgspec.Struct) -> None:
        if settles([record]):
            raise OSError("the disk is full")
        append(record)

    def many(records: Sequence[msgspec.Struct]) -> None:
        if settles(records):
            raise OSError("the disk is full")
        append_many(records)

    journal.append, journal.append_many = one, many  # type: ignore[method-assign]


def test_a_journal_that_fails_stops_the_session_and_the_next_parent_takes_what_waited(
    sessions: Sessions, tmp_path: Path
) -> None:
    told = CollectingSink()
    first = sessions.start(sinks=[told])
    _disk_full_on_settling(first)
    first.session.spawn("worker", script=write_script(tmp_path, "finish", FINISH))
    task = first.session.delegate("worker", "finish it").task_id
    first.session.watch(task)
    assert told.wait_for(
        lambda items: any(isinstance(n, Notice) and n.code == "session_stopped" for n in items),
        timeout=60,
    ), told.items
    with pytest.raises(SessionUnavailable, match="the disk is full"):
        first.session.status()
    assert not any(isinstance(n, TaskCompletion) for n in told.items)
    first.shutdown()  # as a killed parent: the agent and what waits for the parent stay
    sessions.keep_bridges(first)
    assert session_pids(first.session_id), "the agent was not kept for the next parent"
    waiting = list((tmp_path / "mailbox" / "inbox" / "parent" / "new").iterdir())
    assert waiting, "the done that was not taken is gone"
    assert not list((tmp_path / "mailbox" / "quarantine").glob("*.reason"))

    shown = CollectingSink()
    second = sessions.start(sinks=[shown])
    assert shown.wait_for(
        lambda items: any(isinstance(n, TaskCompletion) for n in items), timeout=60
    ), shown.items
    result = second.session.result(task)
    assert result is not None and (result.status, result.text) == ("completed", "finished")
