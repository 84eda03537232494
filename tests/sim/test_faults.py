"""Faults on the simulated transport and in agents: duplicates, reordering, loss, crashes."""

from __future__ import annotations

from functools import partial

from actors.child.scripted import ScriptedDriver
from actors.runtime.transport import PARENT_INBOX
from actors.testing import SimSession
from actors.testing.simulation import Faults
from protocol.records.tasks import TaskResult, TaskState
from tests.conftest import SeedRunner
from tests.sim.scenarios import PLANNER, SCOUT, broker, delivered_results, new_session


def _canonical_with(seed: int, faults: Faults) -> tuple[list[TaskResult], SimSession]:
    s, sink = new_session(seed, faults=faults)
    s.spawn("scout", script=SCOUT)
    s.spawn("planner", script=PLANNER)
    s.delegate("planner", "plan")
    t = s.delegate("scout", "map").task_id
    s.watch(t)
    s.sim.run_all()
    return delivered_results(sink), s


def test_duplicated_envelopes_never_double_anything(seeds: SeedRunner) -> None:
    total_dups = 0

    def scenario(seed: int) -> None:
        nonlocal total_dups
        faults = Faults(duplicate=0.5)
        results, s = _canonical_with(seed, faults)
        assert [r.status for r in results] == ["completed"]
        total_dups += faults.counts.get("duplicate", 0)
        assert _dups_at_parent(s) + _dups_to_agents(s) == faults.counts.get("duplicate", 0)

    seeds.run(scenario, limit=100)
    assert total_dups > 0


def _dups_at_parent(s: SimSession) -> int:
    # the transport absorbs duplicates (the broker never sees one)
    return int(s.transport.gate.duplicates[PARENT_INBOX])


def _dups_to_agents(s: SimSession) -> int:
    # towards agents, the transport absorbs them too (and the agent side, should one pass)
    by_transport = sum(
        n for inbox, n in s.transport.gate.duplicates.items() if inbox != PARENT_INBOX
    )
    return by_transport + sum(s.sim_launcher.driver(n).duplicates for n in ("scout", "planner"))


def test_delayed_and_reordered_envelopes_still_end_in_exactly_one_completion(
    seeds: SeedRunner,
) -> None:
    def scenario(seed: int) -> None:
        results, _ = _canonical_with(seed, Faults(delay=0.5, max_delay_s=2.0, duplicate=0.2))
        assert [r.status for r in results] == ["completed"]

    seeds.run(scenario, limit=100)


def test_a_lost_done_never_becomes_a_completion_the_deadline_settles_it() -> None:
    s, sink = new_session(3)
    script = {"steps": [{"await": "task"}, {"done": {"status": "completed"}}, {"await": "any"}]}
    s.spawn("scout", script=script)
    s.sim.faults.drop = 1.0
    s.sim.faults.only = frozenset({"parent"})
    t = s.delegate("scout", "x", timeout_minutes=2).task_id
    s.watch(t)
    s.sim.advance(119)
    assert s.sim.faults.counts.get("drop", 0) >= 1
    assert delivered_results(sink) == []
    s.sim.faults.drop = 0.0
    s.sim.advance(2)
    assert [(r.status, r.return_code) for r in delivered_results(sink)] == [("timed_out", 124)]


def _started(s: SimSession, name: str) -> bool:
    return name in s.sim_launcher.agents


def _received_or_exited(driver: ScriptedDriver, n: int) -> bool:
    return len(driver.received) >= n or driver.exited is not None


def test_crash_at_every_step_of_the_canonical_scenario_never_completes_falsely() -> None:
    # Count the scout's steps in a clean run, then crash it after each one in turn.
    clean, _s0 = _canonical_with(0, Faults())
    assert [r.status for r in clean] == ["completed"]
    crash_points = 0
    for crash_after in range(1, 40):
        s, sink = new_session(0)
        s.spawn("scout", script=SCOUT)
        s.spawn("planner", script=PLANNER)
        s.delegate("planner", "plan")
        t = s.delegate("scout", "map").task_id
        s.watch(t)
        # the agent's process starts with its actor's first message: wait for it, not for
        # whatever else the broker happens to be doing meanwhile
        s.sim.run_until(partial(_started, s, "scout"))
        driver = s.sim_launcher.driver("scout")
        s.sim.run_until(partial(_received_or_exited, driver, crash_after))
        if broker(s).tasks[t].state in (TaskState.COMPLETED,):
            break
        s.sim_launcher.crash("scout")
        s.sim.run_all()
        results = delivered_results(sink)
        assert len(results) == 1, f"crash after {crash_after} deliveries: {results}"
        assert results[0].status in ("failed", "completed")
        if results[0].status == "failed":
            assert results[0].return_code == 1 and "137" in (results[0].error or "")
        # the planner's request from scout, if any, is closed
        assert all(
            not r.pending for r in broker(s).requests.values() if r.sender_id == results[0].agent_id
        )
        crash_points += 1
    assert crash_points >= 3


def test_timers_fired_early_or_late_keep_settlement_single() -> None:
    for seed in range(50):
        s, sink = new_session(seed)
        s.spawn("scout", script=SCOUT)
        s.spawn("planner", script=PLANNER)
        s.delegate("planner", "plan")
        t = s.delegate("scout", "map", timeout_minutes=1.2).task_id
        s.watch(t)
        s.sim.run_until_idle()
        s.sim.jitter_timers(30.0)
        s.sim.run_all()
        results = delivered_results(sink)
        assert len(results) == 1 and results[0].status in ("completed", "timed_out"), seed
