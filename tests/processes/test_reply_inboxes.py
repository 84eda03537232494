"""One-shot reply inboxes (``inbox/shepherd-message-*``): every call removes its own when it
ends, and the parent sweeps what a killed caller left — at a restart and on its clock — while
the inbox of a caller still waiting is kept however old it is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.clock import VirtualClock
from actors.runtime.ids import IdSource
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from actors.surfaces.client import Client
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.reply_inboxes import (
    MIN_AGE_S,
    SWEEP_EVERY_S,
    ReplyInbox,
    ReplyInboxSweeper,
)
from protocol.core.ids import PARENT_ID, IdKind
from protocol.wire.envelopes import ResultEnvelope
from tests.processes.conftest import cli
from tests.reliability.live import wait_for_files, wait_terminated, write_script

pytestmark = pytest.mark.processes

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


def _mailbox(session: Path) -> Path:
    return Path(json.loads((session / "session.json").read_text())["mailbox"])


def reply_inboxes(mailbox_root: Path) -> list[str]:
    return sorted(
        p.name for p in (mailbox_root / "inbox").iterdir() if p.name.startswith("shepherd-message-")
    )


def test_no_cli_call_leaves_its_reply_inbox(serve: Any, tmp_path: Path) -> None:
    """About half of the calls left theirs before: the receiver had not yet moved the answer
    out of new/ when the call removed its inbox, so the removal was refused, silently. (Real
    processes, a few: the in-process test below makes the hundreds of calls.)"""
    serve()
    session = tmp_path / "session"
    root = _mailbox(session)
    for i in range(12):
        _, status = cli("status", session=session)
        assert status["agents"] == []
        assert reply_inboxes(root) == [], f"call {i} left its reply inbox"
    # other answers, a refusal among them
    cli("spawn", "worker", "--script", write_script(tmp_path, "idle", IDLE), session=session)
    _, task = cli("delegate", "worker", "x", session=session)
    for args in (
        ("watch", task["task_id"]),
        ("read", "worker"),
        ("delegate", "nobody", "x"),
        ("cancel", task["task_id"]),
    ):
        cli(*args, session=session, check=False)
        assert reply_inboxes(root) == [], f"{args} left its reply inbox"


def test_no_client_call_leaves_its_reply_inbox_in_process(
    supervisor: tuple[Supervisor, CollectingSink],
) -> None:
    sup, _ = supervisor
    client = Client(sup.info)
    for i in range(200):
        client.call("status", {})
        assert reply_inboxes(sup.mailbox_root) == [], f"call {i} left its reply inbox"


def test_a_killed_callers_inbox_is_swept_at_restart_and_a_waiting_ones_kept(
    serve: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    first = serve(session)
    root = _mailbox(session)
    cli("spawn", "worker", "--script", write_script(tmp_path, "idle", IDLE), session=session)
    _, task = cli("delegate", "worker", "never done", session=session)
    waits = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors.surfaces.cli",
                "wait",
                task["task_id"],
                "--session",
                str(session),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        # a call's envelope reaches the parent only after its inbox exists and is locked
        parent_cur = root / "inbox" / "parent" / "cur"

        def both_calls_arrived() -> list[str] | None:
            names = reply_inboxes(root)
            arrived = " ".join(os.listdir(parent_cur))
            return names if len(names) == 2 and all(n in arrived for n in names) else None

        names = wait_for_files(parent_cur, both_calls_arrived, timeout=30)
        assert names is not None, reply_inboxes(root)
        killed, waiting = waits
        os.kill(killed.pid, signal.SIGKILL)
        assert wait_terminated(killed.pid)
        killed.wait(timeout=10)
        # both look old: only the lock tells the killed caller's from the waiting one's
        old = time.time() - 10 * MIN_AGE_S
        for name in names:
            os.utime(root / "inbox" / name, (old, old))
        first.stop(signal.SIGKILL)

        serve(session)  # the restarted parent sweeps before it serves
        (left,) = reply_inboxes(root)
        assert waiting.poll() is None  # still waiting, and still owns its inbox
        assert (root / "inbox" / left / "new").is_dir()
    finally:
        for proc in waits:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def test_the_parent_sweeps_on_its_clock(tmp_path: Path) -> None:
    """Virtual time: a leftover goes once it is MIN_AGE_S old, at the next sweep; a live
    caller's inbox is never taken, however old."""
    ids = IdSource()
    session_id = ids.new(IdKind.SESSION)
    parent = Mailbox.create(tmp_path / "mailbox", session_id)
    client = Mailbox.open(tmp_path / "mailbox", session_id)
    clock = VirtualClock(start=time.time())
    sweeper = ReplyInboxSweeper(parent, clock, lambda work: work())
    sweeper.start()
    try:
        live = ReplyInbox(client, ids.new(IdKind.MESSAGE))  # its caller runs: locked
        # a caller killed after its answer came: unlocked, the answer unread in new/
        dead_id = ids.new(IdKind.MESSAGE)
        client.ensure_inbox(dead_id)
        parent.publish(
            dead_id,
            ResultEnvelope(
                message_id=ids.new(IdKind.MESSAGE),
                session_id=session_id,
                sender_id=PARENT_ID,
                target_id=dead_id,
                created_at=clock.now(),
                call_id=dead_id,
                ok=True,
                data={},
            ),
        )
        root = tmp_path / "mailbox"
        both = sorted([live.owner, dead_id])
        start = clock.now()
        while clock.fire_next(start + SWEEP_EVERY_S):  # the first sweep: too young to go
            pass
        assert reply_inboxes(root) == both and sweeper.removed == 0
        while clock.fire_next(start + MIN_AGE_S + SWEEP_EVERY_S):
            pass
        assert reply_inboxes(root) == [live.owner] and sweeper.removed == 1
        while clock.fire_next(start + 100 * SWEEP_EVERY_S):  # an hour later: still its caller's
            pass
        assert reply_inboxes(root) == [live.owner]
        live.remove()
        assert reply_inboxes(root) == []
    finally:
        sweeper.stop()
        assert clock.next_deadline() is None
        client.close()
        parent.close()
