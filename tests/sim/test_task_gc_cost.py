"""What an open task leaves for the garbage collector to walk, before its first mail: its
actor and its inbox (which is also its ref and its stopped flag), nothing else; its record is
not tracked at all. A burst of delegations leaves thousands of open tasks at once, and every
tracked object they leave makes each collection longer and the next full one nearer."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from actors.runtime.runtime import ShepherdActor, ThreadedRuntime
from actors.session.task_actor import TaskActor
from protocol.records.tasks import TaskEvent, TaskRecord, TaskResult, TaskState, settle

WAIT_S = 10.0


@pytest.fixture
def threaded() -> Iterator[ThreadedRuntime]:
    runtime = ThreadedRuntime(workers=2)
    yield runtime
    runtime.shutdown()


class _Broker(ShepherdActor):
    def on_receive(self, message: Any) -> Any:
        return None


def _record(i: int) -> TaskRecord:
    return TaskRecord(
        task_id=f"shepherd-task-{i:016x}",
        agent_id=f"shepherd-agent-{i:016x}",
        description="work",
        state=TaskState.RUNNING,
        created_at=1.0,
        started_at=1.0,
    )


def test_a_task_record_is_never_tracked_whatever_it_holds() -> None:
    record = _record(1)
    settled, _ = settle(record, TaskEvent.COMPLETE, 2.0, text="done")
    assert isinstance(settled.result, TaskResult)
    assert not gc.is_tracked(record) and not gc.is_tracked(settled)


def test_an_open_task_without_mail_costs_the_collector_two_objects(
    threaded: ThreadedRuntime,
) -> None:
    broker = threaded.spawn(_Broker)
    records = [_record(i) for i in range(200)]
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    refs = [threaded.spawn(TaskActor, record, broker) for record in records]
    gc.collect()
    added = [o for o in gc.get_objects() if id(o) not in before]
    assert len(added) <= 2 * len(refs) + 10, sorted({type(o).__name__ for o in added})
    for ref in refs:
        threaded.retire(ref)
    assert threaded.wait_until(lambda: threaded.actor_count == 1, timeout=WAIT_S)
