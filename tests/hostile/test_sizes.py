"""Defect 3: big texts were accepted, then something derived from them did not fit.

A 33 KB task text was accepted and its delivery failed, the task ``running`` forever; a 41 KB
task was delivered but the agent's ``shepherd-child done`` with a 28 KB summary got no receipt,
because the receipt carried the task text and the summary. Now what ``delegate`` / ``message``
accept is checked against the envelope it travels in (refused with ``limit_exceeded``, nothing
accepted), receipts carry previews, and a delivery that fails after acceptance fails the task
with a reason the parent sees.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from protocol.core.errors import LimitExceeded
from protocol.records.notifications import Notice, TaskCompletion
from tests.processes.conftest import cli

from .conftest import Live

pytestmark = pytest.mark.processes

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


def _spawn(live: Live, name: str, script: Mapping[str, object]) -> str:
    path = live.root / f"{name}.json"
    path.write_text(json.dumps(script))
    return str(live.sup.call("spawn", {"name": name, "script": str(path)}).agent_id)


def test_a_task_text_too_big_for_its_envelope_is_refused_and_nothing_is_accepted(
    live: Live,
) -> None:
    _spawn(live, "idle", IDLE)
    # 33,000 characters, each escaped on the wire: about 66 KB encoded, over the 64 KiB frame
    text_file = live.root / "task.txt"
    text_file.write_text('"\n' * 16_500)
    code, out = cli("delegate", "idle", text_file.read_text(), session=live.session, check=False)
    assert code == 2 and out["error"]["code"] == "limit_exceeded", out
    assert "max_envelope_bytes" in out["error"]["message"]
    with pytest.raises(LimitExceeded, match="max_envelope_bytes"):  # in-process: no call frame
        live.sup.session.delegate("idle", text_file.read_text())
    assert live.sup.session.status("idle").agents[0].task is None
    code, out = cli("message", "idle", text_file.read_text(), session=live.session, check=False)
    assert code == 2 and out["error"]["code"] == "limit_exceeded", out
    live.canary.check()


def test_a_big_task_and_a_big_summary_get_their_receipt(live: Live) -> None:
    """The literal case: a 41 KB task, and ``shepherd-child done`` with a 28 KB summary."""
    receipt = live.root / "receipt.json"
    summary = live.root / "summary.txt"
    summary.write_text("s" * 28_000)
    cmd = (
        f'shepherd-child done --status completed --summary "$(cat {summary})" --json '
        f"> {receipt} 2>&1; : {{message}}"
    )
    live.sup.call("spawn", {"name": "worker", "adapter": "command", "cmd": cmd})
    task = live.sup.call("delegate", {"target": "worker", "task": "w" * 41_000})
    watch = live.sup.call("watch", {"ids": [task.task_id]})
    assert watch.pending == (task.task_id,)
    assert live.sink.wait_for(
        lambda items: any(isinstance(n, TaskCompletion) for n in items), 30
    ), "the task never completed"
    (done,) = [n for n in live.sink.items if isinstance(n, TaskCompletion)]
    assert done.results[0].status == "completed" and done.results[0].text == "s" * 28_000
    live.story.wait("worker: process idle", after=live.story.wait("worker: process working"))
    answer = json.loads(receipt.read_text())
    assert answer["accepted"] is True, answer
    assert answer["result"]["status"] == "completed"
    assert answer["result"].get("description") is None  # a receipt never echoes the task


@pytest.fixture
def small_inbox(tmp_path: Path) -> Iterator[Live]:
    """A session whose inboxes hold 20 envelopes: filling one takes 20 publishes, not the
    default 1,000 (each one synced to disk, so their time is the disk's, not the test's)."""
    from protocol.records.settings import Settings

    running = Live(tmp_path, Settings(max_queue_depth=20))
    try:
        yield running
    finally:
        running.close()


def test_a_delivery_that_fails_after_acceptance_fails_the_task_and_tells_the_parent(
    small_inbox: Live,
) -> None:
    live = small_inbox
    agent_id = _spawn(live, "stuck", IDLE)
    live.story.wait("stuck: process idle")
    (pid,) = _bridge_pids(live, agent_id)
    (row,) = live.sup.session.status("stuck").agents
    assert row.pid == pid, (row.pid, pid)  # the process the parent started: its bridge
    os.kill(pid, signal.SIGSTOP)  # its inbox fills up: nobody drains it
    _wait_stopped(pid)
    try:
        depth = live.sup.settings.max_queue_depth
        for n in range(depth):
            live.sup.call("message", {"target": "stuck", "message": f"m{n}"})
        task = live.sup.call("delegate", {"target": "stuck", "task": "cannot arrive"})
        watched = live.sup.call("watch", {"ids": [task.task_id]})
        # settled before the watch arrived: its answer carries the result, never notified
        early = [r for r in watched.completed if r.task_id == task.task_id]
        assert early or live.sink.wait_for(
            lambda items: any(
                isinstance(n, TaskCompletion) and n.results[0].task_id == task.task_id
                for n in items
            ),
            30,
        ), (
            "the undeliverable task was never settled: "
            f"{live.sink.items[-5:]}, {live.story.lines[-10:]}, {_inbox_files(live, agent_id)}, "
            f"bridge state {_proc_state(pid)!r}"
        )
        results = early or [n.results[0] for n in live.sink.items if isinstance(n, TaskCompletion)]
        (result,) = results
        assert result.status == "failed"
        assert "could not be delivered" in (result.error or "")
        notices = [n for n in live.sink.items if isinstance(n, Notice)]
        assert any(task.task_id in n.refs and n.code == "not_delivered" for n in notices)
    finally:
        os.kill(pid, signal.SIGCONT)
    live.canary.check()


def _proc_state(pid: int) -> str:
    """The process's state letter (``T``: stopped), from ``/proc/PID/stat``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError as exc:
        return f"unreadable: {exc}"
    return stat.rsplit(")", 1)[1].split()[0]


def _wait_stopped(pid: int, timeout_s: float = 30.0) -> None:
    """Block until the kernel shows ``pid`` stopped (a signal is taken when the process is
    next scheduled: on a loaded machine, not at once)."""
    stopped = threading.Event()
    deadline = time.monotonic() + timeout_s
    while _proc_state(pid) not in ("T", "t"):
        assert time.monotonic() < deadline, f"process {pid} never stopped: {_proc_state(pid)}"
        stopped.wait(0.01)  # polling the kernel's view: there is no event to wait on


def _inbox_files(live: Live, agent_id: str) -> dict[str, int]:
    """How many files each of the agent's inbox folders holds (for a failure's message)."""
    boxes = list((live.root / "mailbox").rglob(f"*{agent_id}*"))
    return {
        f"{box.name}/{sub}": len(list((box / sub).iterdir()))
        for box in boxes
        for sub in ("tmp", "new", "cur")
        if (box / sub).is_dir()
    }


def _bridge_pids(live: Live, agent_id: str) -> list[int]:
    from tests.reliability.live import session_pids

    return session_pids(live.sup.session_id, agent_id)


def test_a_receipt_always_fits_even_for_a_summary_at_the_frame(tmp_path: Path) -> None:
    """A done whose summary fills its envelope gets a receipt: receipts are previews."""
    from protocol.records.settings import Settings

    live = Live(tmp_path, Settings(max_envelope_bytes=16 * 1024))
    try:
        receipt = live.root / "receipt.json"
        summary = live.root / "summary.txt"
        summary.write_text("s" * (15 * 1024))
        cmd = (
            f'shepherd-child done --status completed --summary "$(cat {summary})" --json '
            f"> {receipt} 2>&1; : {{message}}"
        )
        live.sup.call("spawn", {"name": "worker", "adapter": "command", "cmd": cmd})
        live.sup.call("delegate", {"target": "worker", "task": "fill"})
        live.story.wait("worker: process idle", after=live.story.wait("worker: process working"))
        answer = json.loads(receipt.read_text())
        assert answer["accepted"] is True, answer
    finally:
        live.close()
