"""A task's working note that cannot be written (a full disk) never stops the task, and the
parent is told: one ``note_not_written`` notice per task, however often its note fails."""

from __future__ import annotations

import errno
from typing import Any

from actors.records.notes import MemoryTaskNotes
from actors.session.sinks import CollectingSink
from actors.testing import SimSession
from actors.testing.simagent import SimLauncher
from actors.testing.simulation import SimRuntime, SimTransport
from protocol.records.notifications import Notice, TaskCompletion
from protocol.records.tasks import TaskRecord
from tests.sim.scenarios import publish_done

IDLE: dict[str, Any] = {"steps": []}


class FullDisk(MemoryTaskNotes):
    """Notes on a disk with no space left: every write fails (counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = 0

    def _full(self) -> None:
        self.failed += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    def open(self, record: TaskRecord) -> None:
        self._full()

    def append(self, task_id: str, line: str) -> None:
        self._full()

    def finalise(self, record: TaskRecord) -> None:
        self._full()


def test_a_note_that_cannot_be_written_is_told_once_per_task_and_the_task_goes_on() -> None:
    runtime = SimRuntime(21, trace=False)
    transport = SimTransport(runtime, None)
    notes, sink = FullDisk(), CollectingSink()
    session = SimSession(
        runtime, transport, SimLauncher(runtime, transport), sink=sink, notes=notes
    )
    try:
        agents = [session.spawn(f"w{i}", script=IDLE).agent_id for i in range(2)]
        runtime.run_all(max_time=1)
        tasks = [session.delegate(a, "write it").task_id for a in agents]
        session.watch(tasks)
        runtime.run_all(max_time=1)
        for agent_id, task_id in zip(agents, tasks, strict=True):
            publish_done(session, agent_id, task_id, created_at=runtime.vclock.now())
        runtime.run_all(max_time=5)
        # opened and finalised: each note failed twice, and each task completed all the same
        assert notes.failed >= 4
        completed = [r for n in sink.items if isinstance(n, TaskCompletion) for r in n.results]
        assert sorted(r.task_id for r in completed) == sorted(tasks)
        assert all(r.status == "completed" for r in completed)
        told = [n for n in sink.items if isinstance(n, Notice) and n.code == "note_not_written"]
        assert sorted(n.task_id for n in told if n.task_id) == sorted(tasks)
        assert all("No space left on device" in n.text for n in told)
    finally:
        session.shutdown()
