"""``shepherd-child message|done`` remove their one-shot reply inbox when they end, whatever
the receipt said, and hold its lock while they wait (so the parent's sweep never takes the
inbox of a command still waiting for its receipt)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading

import pytest

from actors.transports.mailbox.reply_inboxes import ONE_SHOT_PREFIX
from protocol.core.errors import ErrorInfo
from protocol.core.ids import IdKind
from protocol.wire.envelopes import MessageEnvelope

from .conftest import FakeParent, new_id, task_result

pytestmark = pytest.mark.processes


def _reply_inboxes(parent: FakeParent) -> list[str]:
    return [p.name for p in (parent.root / "inbox").iterdir() if p.name.startswith(ONE_SHOT_PREFIX)]


def test_no_child_command_leaves_its_reply_inbox(parent: FakeParent) -> None:
    parent.task_id = new_id(IdKind.TASK)
    refuse = ErrorInfo(code="invalid_argument", message="no")
    answers = [
        lambda env: (True, None, None, None),
        lambda env: (False, refuse, None, None),
        lambda env: (True, None, None, task_result(parent)),
    ]
    for i in range(9):
        parent.answer = answers[i % 3]
        if i % 3 == 2:
            run = parent.run_child("done", "--status", "completed", "--json")
        else:
            run = parent.run_child("message", "planner", f"note {i}", "--json")
        assert run.returncode == (2 if i % 3 == 1 else 0), run.stdout + run.stderr
        assert _reply_inboxes(parent) == [], f"command {i} left its reply inbox"


def test_a_waiting_child_command_holds_its_inbox_lock(parent: FakeParent) -> None:
    held = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def answer(env: MessageEnvelope) -> tuple[bool, None, None, None]:
        # the command is waiting for this receipt: its inbox must be locked meanwhile
        path = parent.root / "inbox" / env.message_id
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            seen.append(True)
        else:
            seen.append(False)
        finally:
            os.close(fd)
        held.set()
        release.wait(30)
        return True, None, None, None

    parent.answer = answer  # type: ignore[assignment]
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors.child.cli", "message", "planner", "hi", "--json"],
        cwd=parent.tmp_path,
        env=parent.environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.wait(30)
        release.set()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
        assert seen == [True]
        assert _reply_inboxes(parent) == []
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
