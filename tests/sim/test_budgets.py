"""Budgets in the simulation, over many seeds: the turn past a task's ``max_turns`` ends it as
failed (budget_exceeded) and stops its work, the session's budget passed ends every open task,
the soft limit is told once, and a budget-ended task is never also completed, whatever the
interleaving."""

from __future__ import annotations

from protocol.records.notifications import Notice, TaskCompletion
from protocol.records.settings import Settings
from protocol.wire.envelopes import ControlEnvelope
from tests.conftest import SeedRunner
from tests.sim.puppet import Puppet
from tests.sim.scenarios import new_session

#: a turn per message, and a done it never reaches once its budget ends the task
TALKER = {
    "steps": [
        {"await": "task"},
        {"say": "started {last}"},
        {"await": "message"},
        {"say": "more: {last}"},
        {"await": "message"},
        {"say": "more: {last}"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "finished"}},
        {"await": "any"},
    ]
}
IDLE = {"steps": [{"await": "any"}]}


def _notices(sink, code: str) -> list[Notice]:  # type: ignore[no-untyped-def]
    return [n for n in sink.items if isinstance(n, Notice) and n.code == code]


def _results(sink, task_id: str) -> list:  # type: ignore[no-untyped-def,type-arg]
    return [
        r
        for n in sink.items
        if isinstance(n, TaskCompletion)
        for r in n.results
        if r.task_id == task_id
    ]


def test_the_turn_past_max_turns_ends_the_task_over_many_seeds(seeds: SeedRunner) -> None:
    def scenario(seed: int) -> None:
        s, sink = new_session(seed)
        s.spawn("worker", script=TALKER)
        task = s.delegate("worker", "talk", max_turns=2)
        s.watch(task.task_id)
        s.sim.run_all()
        for text in ("one", "two", "three"):
            s.message("worker", text)
            s.sim.run_all()
        result = s.result(task.task_id)
        assert result is not None
        assert (result.status, result.reason) == ("failed", "budget_exceeded"), result
        assert result.usage is not None and result.usage.turns == 3
        (told,) = _results(sink, task.task_id)  # once, and as the failure
        assert told.status == "failed"
        (soft,) = _notices(sink, "budget_soft_limit")
        assert soft.task_id == task.task_id
        (hard,) = _notices(sink, "budget_exceeded")
        assert hard.task_id == task.task_id
        driver = s.sim_launcher.driver("worker")
        stops = [e for e in driver.received if isinstance(e, ControlEnvelope)]
        assert [(c.action, c.task_id) for c in stops] == [("cancel_task", task.task_id)]
        # its done never came: the script was stopped before it (or its done got the failure)
        assert all(
            a.result is None or a.result.status == "failed"
            for a in driver.acks
            if a.task_id == task.task_id
        )
        s.shutdown()

    seeds.run(scenario, limit=100)


def test_the_session_budget_passed_ends_every_open_task_over_many_seeds(
    seeds: SeedRunner,
) -> None:
    def scenario(seed: int) -> None:
        s, sink = new_session(seed, settings=Settings(budget_tokens=100))
        s.spawn("a", script=IDLE)
        s.spawn("b", script=IDLE)
        ta = s.delegate("a", "spend")
        tb = s.delegate("b", "spend")
        assert ta.budget is not None and ta.budget.max_tokens == 100
        s.watch([ta.task_id, tb.task_id])
        s.sim.run_all()
        a, b = Puppet(s, "a"), Puppet(s, "b")
        a.runtime("usage", tokens=45)
        b.runtime("usage", tokens=40)  # 85: the session is warned
        s.sim.run_all()
        b.runtime("usage", tokens=20)  # 105: over, every open task ends
        a.done(ta.task_id)  # too late, or first: the first terminal event wins
        s.sim.run_all()
        results = {t: s.result(t) for t in (ta.task_id, tb.task_id)}
        assert results[tb.task_id].reason == "budget_exceeded"  # type: ignore[union-attr]
        first = results[ta.task_id]
        assert first is not None
        assert (first.status, first.reason) in (
            ("failed", "budget_exceeded"),
            ("completed", None),  # its done was settled before the last report came
        )
        assert len([n for n in _notices(sink, "budget_soft_limit") if n.task_id is None]) == 1
        for task_id in results:
            assert len(_results(sink, task_id)) == 1
        s.shutdown()

    seeds.run(scenario, limit=100)
