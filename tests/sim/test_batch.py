"""delegate_many through the Python API, on the seeded simulation: one journal write for the
batch, each accepted task's result reaches the batch's watcher exactly once, a refused item
changes nothing, and the same call refuses hostile arguments whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from actors.records.journal import MemoryJournal
from protocol.calls import api_batch
from protocol.core.errors import InvalidArgument
from protocol.core.limits import MAX_BATCH
from protocol.records.tasks import TaskRecord
from tests.sim.scenarios import IDLE, broker, delivered_results, new_session

DONE = {"steps": [{"await": "task"}, {"done": {"status": "completed", "summary": "ok"}}]}
SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_batch_is_one_journal_write_and_each_result_reaches_its_watcher_once(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, sink = new_session(seed)
    for i in range(5):
        s.spawn(f"w{i}", script=DONE)
    s.spawn("idle", script=IDLE)
    s.sim.run_all()
    writes: list[list[Any]] = []
    journal = s.journal
    assert isinstance(journal, MemoryJournal)  # the simulation's journal, in memory
    many = journal.append_many

    def counted(records: Sequence[msgspec.Struct]) -> None:
        writes.append(list(records))
        many(records)

    monkeypatch.setattr(journal, "append_many", counted)
    items = [{"target": f"w{i}", "task": f"job {i}"} for i in range(5)]
    items[2:2] = [{"target": "ghost", "task": "x"}, {"target": "w0", "task": "twice"}]
    result = s.delegate_many(items, watch=True)
    accepted = [t for t in result.task_ids if t is not None]
    assert len(accepted) == 5 and result.task_ids[2] is None and result.task_ids[3] is None
    assert [(e.index, e.code) for e in result.errors] == [
        (2, "invalid_handle"),
        (3, "agent_busy"),
    ]
    # the five tasks and the watcher: one write (one fsync on a file journal)
    (first, *_) = writes
    assert [type(r).__name__ for r in first] == ["TaskRecord"] * 5 + ["WatcherRecord"]
    s.sim.run_all()
    got = [r.task_id for r in delivered_results(sink)]
    assert sorted(got) == sorted(accepted) and len(got) == len(set(got))
    assert all(broker(s).tasks[t].state.value == "completed" for t in accepted)
    s.shutdown()


def test_the_python_api_refuses_hostile_batches_whole_naming_the_field() -> None:
    s, _sink = new_session(1)
    s.spawn("w0", script=IDLE)
    s.sim.run_all()
    item = {"target": "w0", "task": "x"}
    hostile: list[dict[str, Any]] = [
        {"items": []},
        {"items": [item] * (10 * MAX_BATCH)},
        {"items": [{**item, "timeout_minutes": float("nan")}]},
        {"items": [item], "timeout_minutes": float("inf")},
        {"items": [{**item, "task": ""}]},
        {"items": [{"target": "", "task": "x"}]},
        {"items": [{**item, "target": "w" * 10_000}]},
        {"items": "w0"},
    ]
    for args in hostile:
        with pytest.raises(InvalidArgument, match="delegate_many"):
            s.delegate_many(**args)
    assert not any(isinstance(r, TaskRecord) for r in s.journal.records)  # type: ignore[attr-defined]
    # the same item twice: the second finds the agent busy, the first is delegated
    result = s.delegate_many([item, item])
    assert result.task_ids[0] is not None and result.task_ids[1] is None
    assert [e.code for e in result.errors] == ["agent_busy"]
    assert isinstance(result, api_batch.DelegateManyResult)
    s.shutdown()


def test_spawn_many_through_the_python_api_starts_each_agent_once() -> None:
    s, _sink = new_session(2)
    got = s.spawn_many(["w0", "w1", "w0", "Nope"], script=IDLE)
    assert got.agent_ids[0] and got.agent_ids[1] and got.agent_ids[2] is None
    assert [e.index for e in got.errors] == [2, 3]
    s.sim.run_all()
    rows = {a.name: a for a in s.status().agents}
    assert set(rows) == {"w0", "w1"} and all(a.process_state == "idle" for a in rows.values())
    for bad in ([], ["w"] * (10 * MAX_BATCH)):
        with pytest.raises(InvalidArgument, match="names"):
            s.spawn_many(bad, script=IDLE)
    s.shutdown()
