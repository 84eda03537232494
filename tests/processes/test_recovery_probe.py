"""actors.session.recovery: what `serve --recover` reads from the machine (running bridges,
what agents told the parent) and what it clears before an agent starts again."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from actors.child.env import ENV_AGENT_ID, ENV_SESSION_ID
from actors.records.notifications import NotificationFile
from actors.session.recovery import (
    TOLD_PER_TASK,
    clear_leftovers,
    live_bridges,
    told_per_task,
)
from actors.transports.mailbox.files import move_unread
from protocol.records.notifications import AgentMessage, Notice

pytestmark = pytest.mark.processes

SESSION = "shepherd-session-0000abcd"
BLOCK = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # waits on its stdin, no CPU


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdin is not None:
            proc.stdin.close()


def _start(
    procs: list[subprocess.Popen[bytes]], session: str, agent: str, *, leader: bool = True
) -> subprocess.Popen[bytes]:
    env = {**os.environ, ENV_SESSION_ID: session, ENV_AGENT_ID: agent}
    proc = subprocess.Popen(BLOCK, env=env, stdin=subprocess.PIPE, start_new_session=leader)
    procs.append(proc)
    return proc


def test_a_bridge_is_running_only_if_it_leads_its_session_with_both_ids(started) -> None:  # type: ignore[no-untyped-def]
    _start(started, SESSION, "shepherd-agent-0000000a")
    _start(started, "shepherd-session-0000ffff", "shepherd-agent-0000000b")  # another session
    _start(started, SESSION, "shepherd-agent-0000000c", leader=False)  # a tool, not a bridge
    gone = _start(started, SESSION, "shepherd-agent-0000000d")
    gone.kill()
    gone.wait(timeout=10)
    wanted = [f"shepherd-agent-0000000{c}" for c in "abcde"]
    assert live_bridges(SESSION, wanted) == {"shepherd-agent-0000000a"}
    assert live_bridges(SESSION, []) == frozenset()


def test_what_an_agent_told_the_parent_is_read_per_task_newest_kept(tmp_path: Path) -> None:
    path = tmp_path / "notifications.jsonl"
    lines = [
        msgspec.json.encode(
            AgentMessage(
                created_at=float(i),
                message_id=f"shepherd-message-{i:08x}",
                sender_id="shepherd-agent-0000000a",
                content=f"note {i}",
                task_id="shepherd-task-00000001" if i % 2 else "shepherd-task-00000002",
            )
        )
        for i in range(2 * TOLD_PER_TASK + 10)
    ]
    lines.insert(3, b'{"kind": "agent_message", "broken')  # a damaged line is skipped
    lines.append(msgspec.json.encode(Notice(created_at=1.0, code="x", text="agent_message")))
    path.write_bytes(b"\n".join(lines) + b"\n")
    told = told_per_task(
        NotificationFile(path).read_deliveries().notes,
        ["shepherd-task-00000001", "shepherd-task-00000009"],
    )
    assert list(told) == ["shepherd-task-00000001"]
    kept = told["shepherd-task-00000001"]
    assert len(kept) == TOLD_PER_TASK and kept[-1] == f"note {2 * TOLD_PER_TASK + 9}"
    missing = NotificationFile(tmp_path / "missing.jsonl")
    assert told_per_task(missing.read_deliveries().notes, ["shepherd-task-00000001"]) == {}


def test_leftovers_are_killed_and_unread_envelopes_kept_aside(  # type: ignore[no-untyped-def]
    started, tmp_path: Path
) -> None:
    agent = "shepherd-agent-0000000a"
    left = _start(started, SESSION, agent, leader=False)  # a turn its dead bridge left
    other = _start(started, "shepherd-session-0000ffff", agent, leader=False)
    inbox = tmp_path / "inbox"
    (inbox / "new").mkdir(parents=True)
    for i in range(3):
        (inbox / "new" / f"{i}.json").write_text(json.dumps({"n": i}))
    keep = tmp_path / "agent"
    clear_leftovers(SESSION, agent, functools.partial(move_unread, inbox), keep, 2)
    assert left.wait(timeout=30) == -9
    assert other.poll() is None  # another session's process is none of its business
    assert os.listdir(inbox / "new") == []
    assert sorted(os.listdir(keep / "unread-before-recovery-2")) == ["0.json", "1.json", "2.json"]
    clear_leftovers(SESSION, agent, functools.partial(move_unread, tmp_path / "no-inbox"), keep, 3)
    assert not (keep / "unread-before-recovery-3").exists()  # nothing there: nothing made
