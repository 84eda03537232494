"""Admission on the actor runtime, over many seeds (the seeded scheduler interleaves the broker,
the task actors and the agents): never more than ``max_running`` tasks handed over, a freed
slot filled at once, every task completed once; and a cancel racing the start of a queued
task settles it once, whichever comes first, without losing the slot."""

from __future__ import annotations

from protocol.records.notifications import TaskCompletion
from protocol.records.settings import Settings
from tests.conftest import SeedRunner
from tests.sim.scenarios import new_session

#: takes a task, works, finishes when messaged
FINISHER = {
    "steps": [
        {"await": "task"},
        {"run": "make"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "finished"}},
        {"await": "any"},
    ]
}
CAP = 2


def _holding(s) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        a.name
        for a in s.status().agents
        if a.task is not None and a.task.state.value in ("running", "waiting", "verifying")
    ]


def test_never_more_than_the_cap_and_every_task_completes_once(seeds: SeedRunner) -> None:
    def scenario(seed: int) -> None:
        s, sink = new_session(seed, settings=Settings(max_running=CAP))
        names = [f"w{i}" for i in range(5)]
        for name in names:
            s.spawn(name, script=FINISHER)
        tasks = [
            s.delegate(name, f"task {name}", priority=i % 2).task_id for i, name in enumerate(names)
        ]
        s.watch(tuple(tasks))
        s.sim.run_all()
        finished: set[str] = set()
        while len(finished) < len(names):
            holding = _holding(s)
            summary = s.status().summary
            assert summary is not None
            assert len(holding) <= CAP and summary.running == len(holding)
            if summary.queued:
                assert len(holding) == CAP  # a free slot never idles
            assert holding, "nothing runs while tasks are left"
            for name in holding:
                s.message(name, "go")
                finished.add(name)
            s.sim.run_all()
        results = [r for n in sink.items if isinstance(n, TaskCompletion) for r in n.results]
        assert sorted(r.task_id for r in results) == sorted(tasks)
        assert all(r.status == "completed" for r in results)

    seeds.run(scenario)


def test_a_cancel_racing_a_queued_tasks_start_settles_it_once(seeds: SeedRunner) -> None:
    def scenario(seed: int) -> None:
        s, sink = new_session(seed, settings=Settings(max_running=1))
        for name in ("a", "b", "c"):
            s.spawn(name, script=FINISHER)
        first = s.delegate("a", "one").task_id
        second = s.delegate("b", "two").task_id
        third = s.delegate("c", "three").task_id
        s.watch((first, second, third))
        s.sim.run_all()
        s.message("a", "go")  # frees the slot: the second starts ...
        s.cancel(second)  # ... or is cancelled first, whichever the scheduler runs first
        s.sim.run_all()
        results = {
            r.task_id: r for n in sink.items if isinstance(n, TaskCompletion) for r in n.results
        }
        assert results[second].status == "cancelled"
        assert results[first].status == "completed"
        # the slot was not lost: the third runs now
        row = s.status("c").agents[0]
        assert row.task is not None and row.task.state.value == "running", row
        s.message("c", "go")
        s.sim.run_all()
        told = [r for n in sink.items if isinstance(n, TaskCompletion) for r in n.results]
        assert sorted(r.task_id for r in told) == sorted((first, second, third))

    seeds.run(scenario)
