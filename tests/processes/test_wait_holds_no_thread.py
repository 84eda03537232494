"""A ``wait`` is a watcher actor, and holds no thread: many CLI waits at once cost the parent no
thread each; each is answered once, when its tasks settle or its timeout passes, and its
watcher's actor is gone after."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from actors.session.supervisor import Supervisor
from actors.surfaces.client import Client
from tests.reliability.live import write_script
from tests.sim.scenarios import live_watchers

pytestmark = pytest.mark.processes

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}
WAITS = 24


def idle_task(sup: Supervisor, tmp_path: Path) -> str:
    """A task of an agent that never finishes it by itself."""
    sup.session.spawn("worker", script=str(write_script(tmp_path, "idle", IDLE)))
    return sup.session.delegate("worker", "never finishes by itself").task_id


def test_many_cli_waits_hold_no_thread_each_and_are_each_answered_once(
    supervisor: tuple[Supervisor, Any], tmp_path: Path
) -> None:
    sup, _ = supervisor
    task_id = idle_task(sup, tmp_path)
    client = Client(sup.info)
    before = {t.ident for t in threading.enumerate()}
    answers: list[dict[str, Any]] = []
    callers = [
        threading.Thread(
            target=lambda: answers.append(client.call("wait", {"ids": [task_id]})),
            name=f"test-caller-{i}",
        )
        for i in range(WAITS)
    ]
    for caller in callers:
        caller.start()
    assert sup.runtime.wait_until(lambda: len(live_watchers(sup.runtime)) == WAITS, 60)
    callers_ids = {c.ident for c in callers}
    grown = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before
        and t.ident not in callers_ids
        # each in-process caller's reply inbox has its receiver (a CLI's is in its process)
        and t.name != "shepherd-mailbox-receiver"
    ]
    # the call pool's workers may start (4 at most); no thread per wait
    assert len(grown) <= 4 and all(n.startswith("shepherd-call") for n in grown), grown
    sup.session.cancel(task_id, "the test settles it")
    for caller in callers:
        caller.join(60)
        assert not caller.is_alive()
    assert len(answers) == WAITS
    for answer in answers:
        assert answer["pending"] == [] and not answer["timed_out"]
        assert [r["task_id"] for r in answer["completed"]] == [task_id]
    assert sup.runtime.wait_until(lambda: not live_watchers(sup.runtime), 30)


def test_a_cli_wait_past_its_timeout_says_what_is_pending_and_leaves_no_watcher(
    supervisor: tuple[Supervisor, Any], tmp_path: Path
) -> None:
    sup, _ = supervisor
    task_id = idle_task(sup, tmp_path)
    answer = Client(sup.info).call("wait", {"ids": [task_id], "timeout_s": 0.5})
    assert answer["timed_out"] and answer["pending"] == [task_id] and answer["completed"] == []
    assert sup.runtime.wait_until(lambda: not live_watchers(sup.runtime), 30)
    # the task is untouched: a wait's timeout never ends it
    (row,) = sup.session.status("worker").agents
    assert row.task is not None and row.task.task_id == task_id
