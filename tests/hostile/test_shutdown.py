"""Found while testing hostile inputs: ``shutdown`` right after ``spawn`` left a bridge behind.

The agent's actor starts its bridge on its own thread; a shutdown that came before that start
closed the launcher first, and the bridge started afterwards was never killed (still running
when the test ended) or never reaped (a zombie). The launcher now refuses any start after it
closed, and stops everything it started before.
"""

from __future__ import annotations

import json
import os
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from actors.runtime.ids import IdSource
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from actors.transports.mailbox import reply_inboxes
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.reply_inboxes import ReplyInbox
from protocol.core.ids import IdKind
from protocol.wire.envelopes import ResultEnvelope
from tests.processes.conftest import Serve, cli
from tests.reliability.live import Story, session_pids, wait_gone

pytestmark = pytest.mark.processes


def _script(tmp_path: Path) -> str:
    script = tmp_path / "idle.json"
    script.write_text(json.dumps({"steps": [{"await": "task"}, {"await": "any"}]}))
    return str(script)


def test_an_agent_whose_start_comes_after_the_launcher_closed_starts_nothing(
    tmp_path: Path,
) -> None:
    """The race made deterministic: the launcher closes (as shutdown does first) before the
    agent's actor gets to start its bridge."""
    story = Story()
    sup = Supervisor(
        tmp_path / "session",
        sinks=[CollectingSink()],
        tap=story,
        mailbox_root=tmp_path / "mailbox",
    )
    try:
        sup.launcher.close()
        sup.call("spawn", {"name": "late", "script": _script(tmp_path)})
        story.wait("late: process exited")  # the refused start is reported
        assert session_pids(sup.session_id) == [], "a bridge started after the launcher closed"
        assert sup.launcher.children == {}
    finally:
        sup.shutdown()


def test_shutdown_right_after_spawn_leaves_no_bridge(tmp_path: Path) -> None:
    for attempt in range(3):
        sup = Supervisor(
            tmp_path / f"session{attempt}",
            sinks=[CollectingSink()],
            mailbox_root=tmp_path / f"mailbox{attempt}",
        )
        for n in range(3):
            sup.call("spawn", {"name": f"a{n}", "script": _script(tmp_path)})
        sup.shutdown()
        assert wait_gone(partial(session_pids, sup.session_id), timeout=20), (
            f"attempt {attempt}: bridges outlived the shutdown: {session_pids(sup.session_id)}"
        )
        for child in sup.launcher.children.values():
            assert not isinstance(child.proc, int) and child.proc.returncode is not None, (
                "a bridge was never reaped"
            )


def test_shutdown_over_the_cli_gets_its_answer_before_the_mailbox_goes(tmp_path: Path) -> None:
    """The answer was sent after the shutdown began; with no agents to close, the mailbox
    (the caller's reply inbox with it) could be gone first: 30 s, then session_unavailable."""
    for attempt in range(3):
        server = Serve(tmp_path / f"session{attempt}", dict(os.environ))
        try:
            assert server.wait_for(lambda lines: any("session" in x for x in lines))
            started = time.monotonic()
            code, out = cli("shutdown", session=tmp_path / f"session{attempt}", check=False)
            assert (code, out) == (0, {"shutting_down": True}), out
            assert time.monotonic() - started < 20, "the answer waited for a time-out"
            assert server.proc.wait(timeout=60) == 0
        finally:
            server.stop()


def test_shutdown_waits_for_a_live_callers_unread_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race made deterministic: an answer sits unread in the inbox of a caller that still
    runs (it holds its inbox's lock); the shutdown keeps the mailbox until it is read."""
    from actors.session import parent_transport

    sup = Supervisor(tmp_path / "session", sinks=[CollectingSink()], mailbox_root=tmp_path / "mb")
    caller = Mailbox.open(sup.mailbox_root, sup.session_id)
    owner = IdSource().new(IdKind.MESSAGE)
    inbox = ReplyInbox(caller, owner)  # a live caller: it holds the lock
    sup.mailbox.publish(
        owner,
        ResultEnvelope(
            message_id=IdSource().new(IdKind.MESSAGE),
            session_id=sup.session_id,
            sender_id="shepherd",
            target_id=owner,
            created_at=0.0,
            call_id=owner,
            ok=True,
            data={"shutting_down": True},
        ),
    )
    looked = threading.Event()
    real = reply_inboxes.unread_answers

    def unread(root: Path) -> int:
        looked.set()
        return real(root)

    monkeypatch.setattr(parent_transport, "unread_answers", unread)
    stopping = threading.Thread(target=sup.shutdown)
    stopping.start()
    try:
        assert looked.wait(30), "the shutdown never looked for unread answers"
        assert real(sup.mailbox_root / "inbox") == 1
        assert sup.mailbox_root.is_dir(), "the mailbox went with an answer unread"
        got = threading.Event()
        subscription = caller.subscribe(owner, lambda env: got.set())
        assert got.wait(30)
        subscription.cancel()
        caller.close()
        inbox.remove()
        stopping.join(30)
        assert not stopping.is_alive() and not sup.mailbox_root.exists()
    finally:
        caller.close()
        stopping.join(30)
