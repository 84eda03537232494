"""protocol.session.restore: a fold of the journal through the same rules gives the same state,
and resuming from it asks for the same things again, never twice."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.calls import api, api_batch
from protocol.calls.api import ProcessState
from protocol.core.errors import InvalidHandle
from protocol.core.ids import PARENT_ID
from protocol.records.journal import AgentExitRecord
from protocol.records.notifications import StaleWait, TaskCompletion
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.session.effects import (
    Effect,
    Flush,
    RequestTimeout,
    SpawnAgent,
    StartTimer,
)
from protocol.session.restore import Restore, fold, resume
from protocol.session.state import AgentRow, SessionState
from protocol.wire.envelopes import TaskEnvelope

from .harness import SESSION, T0, Session, answer, delivered, notes, of

SETTINGS = Settings(stale_wait_threshold_s=100.0, coalesce_ms=10.0)


def restart(s: Session, *, after: float = 50.0) -> tuple[Session, list[Effect]]:
    """A new parent for ``s``'s session: its journal folded, what its notifications file
    says was delivered, and the resume effects (run through the same checks)."""
    delivered_to: dict[str, set[str]] = {}
    noticed: dict[str, set[str]] = {}
    for told in s.heard:
        note = told.note
        if s.to_parent(told) and isinstance(note, TaskCompletion):
            delivered_to.setdefault(note.watcher_id, set()).update(r.task_id for r in note.results)
        if isinstance(note, StaleWait):
            noticed.setdefault(note.task_id, set()).add(note.request_id)
    t = Session(s.state.settings, now=s.now + after)
    t.ids.made = 0x10000  # a new process: ids never collide with the old ones
    t.state = fold(s.journal, SessionState(SESSION, s.state.settings))
    restore = Restore(state=t.state, delivered=delivered_to, stale_noticed=noticed)
    return t, t.run(resume(restore, t.ctx()))


def facts(s: SessionState) -> dict[str, Any]:
    """What the journal holds the truth of (not when an agent was last heard from, nor a
    running process's state: its bridge tells that again)."""
    return {
        "agents": {
            a: msgspec.structs.replace(r, last_active_at=None, process_state=_gone(r))
            for a, r in s.agents.items()
        },
        "names": dict(s.names),
        "tasks": dict(s.tasks),
        "requests": dict(s.requests.items()),
        "edges": sorted(s.requests.wait_edges()),
        "prompts": dict(s.prompts),
        "episodes": {t: (e.since, e.requests) for t, e in s.stale.items()},
    }


def _gone(row: AgentRow) -> ProcessState:
    return "exited" if row.process_state == "exited" else "starting"


def busy() -> tuple[Session, dict[str, str]]:
    """A session with a bit of everything in its journal."""
    s = Session(SETTINGS)
    a, b, c, d = (s.spawn(n) for n in ("a", "b", "c", "d"))
    s.runtime(a, "ready", pid=101)
    ta = s.delegate("a", "write the parser", timeout_minutes=10)
    tb = answer(s.call(api.PromptArgs(target="b", prompt="review it"))).task_id
    tc = s.delegate("c", "lint")
    w = answer(s.call(api.WatchArgs(ids=(ta, tb, tc)))).watcher_id
    s.now += 1
    first = s.ask(a, "b", "which grammar?", reply_timeout_s=600.0)
    s.now += 1
    second = s.ask(a, "c", "which style?")
    s.reply(c, second, "pep8")
    s.ask(b, PARENT_ID, "may I?")
    s.now += 1
    s.done(c, summary="clean")
    s.now += 1
    s.fire_timer(("flush", w))  # tc delivered to the watcher
    s.call(api.CloseArgs(agent="d"))
    s.exit(d, 0)
    s.parent_says("a", "status?", expects_reply=True, reply_timeout_s=30.0)
    return s, {"a": a, "b": b, "c": c, "d": d, "ta": ta, "tb": tb, "tc": tc, "w": w, "q": first}


def test_the_fold_of_the_journal_is_the_state_the_rules_left() -> None:
    s, _ = busy()
    folded = fold(s.journal, SessionState(SESSION, SETTINGS))
    assert facts(folded) == facts(s.state)


def test_the_fold_of_every_prefix_of_the_journal_resumes_to_a_sound_state() -> None:
    s, _ = busy()
    journal = list(s.journal)
    for cut in range(len(journal) + 1):
        old = Session(SETTINGS, now=s.now)
        old.journal = journal[:cut]
        restart(old)  # the checks of every step: well-formed effects, invariants


def test_resume_adopts_every_bridge_and_starts_no_second_process() -> None:
    s, ids = busy()
    t, effects = restart(s)
    spawns = {e.agent_id: e for e in of(effects, SpawnAgent)}
    assert set(spawns) == set(s.state.agents)
    for agent_id in (ids["a"], ids["b"], ids["c"]):
        assert spawns[agent_id].adopt and not spawns[agent_id].exited
    assert spawns[ids["a"]].pid == 101
    gone = spawns[ids["d"]]
    assert not gone.adopt and gone.exited
    assert all(r.last_active_at == t.now for r in t.state.agents.values())


def test_resume_hands_each_open_task_over_again_with_its_old_envelope_id() -> None:
    s, ids = busy()
    _, effects = restart(s)
    handed = {e.task_id: e for e in delivered(effects, TaskEnvelope)}
    assert set(handed) == {ids["ta"], ids["tb"]}
    for task_id, env in handed.items():
        assert env.message_id == s.state.tasks[task_id].message_id
        assert env.created_at == s.state.tasks[task_id].created_at


def test_resume_arms_the_deadlines_that_are_left() -> None:
    s, ids = busy()
    t, effects = restart(s)
    timers = {e.event.key: e for e in of(effects, StartTimer)}
    reply = timers[("reply", ids["q"])]
    assert reply.event == RequestTimeout(request_id=ids["q"])
    assert reply.delay == T0 + 1 + 600 - t.now
    # the restored task's actor armed its timer again: first for the point where its wait is
    # stale (its episode began at T0 + 1), then for its deadline; the session arms neither
    assert not any(key[0] == "stale" for key in timers)
    assert t.deadline_armed(ids["ta"]) == T0 + 1 + 100
    (stale,) = notes(t.ring(ids["ta"]), StaleWait)
    assert stale.task_id == ids["ta"] and stale.waiting_since == T0 + 1
    assert t.deadline_armed(ids["ta"]) == T0 + 600
    # a deadline already passed fires at once
    late, _ = busy()
    _, effects = restart(late, after=10_000.0)
    assert {e.delay for e in of(effects, StartTimer)} == {0.0}


def test_a_waiting_task_comes_back_waiting_since_its_episode_began() -> None:
    s, ids = busy()
    t, _ = restart(s)
    task = t.state.tasks[ids["ta"]]
    assert task.state is TaskState.WAITING and task.waiting_since == T0 + 1
    assert task.pending_requests == (ids["q"],)


def test_an_episode_told_stale_before_the_restart_is_not_told_again() -> None:
    s, ids = busy()
    (note,) = notes(s.ring(ids["ta"]), StaleWait)
    assert s.now == T0 + 101 and note.request_id == ids["q"]
    t, _ = restart(s)
    assert t.state.stale[ids["ta"]].notified
    stale = t.task_stale[ids["ta"]]  # its actor starts knowing it told of this episode
    assert stale is not None and stale.told == T0 + 1
    assert t.deadline_armed(ids["ta"]) == T0 + 600  # its deadline alone is left to go off
    assert notes(t.ring(ids["ta"]), StaleWait) == []


def test_an_episode_not_told_before_the_restart_is_told_after_it() -> None:
    s, ids = busy()
    t, _ = restart(s)
    assert t.deadline_armed(ids["ta"]) == T0 + 101
    assert len(notes(t.ring(ids["ta"]), StaleWait)) == 1


def test_a_watcher_hands_over_only_what_it_had_not_delivered() -> None:
    s, ids = busy()
    s.done(
        ids["b"], summary="lgtm", cancel_requests=True
    )  # settled, buffered, never flushed: never delivered
    t, effects = restart(s)
    watcher = t.watchers[ids["w"]]
    assert watcher.pending == {ids["ta"], ids["tb"]}  # tc was delivered before the restart
    assert StartTimer(delay=0.01, event=Flush(watcher_id=ids["w"])) in effects
    (note,) = notes(t.fire_timer(("flush", ids["w"])), TaskCompletion)
    assert [r.task_id for r in note.results] == [ids["tb"]]
    assert note.pending == (ids["ta"],)


def test_a_result_carried_by_the_watch_answer_is_never_handed_over_again() -> None:
    s = Session(SETTINGS)
    a, _ = s.spawn("a"), s.spawn("b")
    done_task = s.delegate("a")
    s.done(a)
    open_task = s.delegate("b")
    watcher = answer(s.call(api.WatchArgs(ids=(done_task, open_task)))).watcher_id
    t, effects = restart(s)
    assert t.watchers[watcher].pending == {open_task}
    assert [e for e in of(effects, StartTimer) if isinstance(e.event, Flush)] == []


def test_a_task_whose_agent_was_gone_at_the_restart_fails() -> None:
    s = Session(SETTINGS)
    a = s.spawn("a")
    task_id = s.delegate("a")
    s.exit(a, 9)
    # the parent died between journaling the exit and the task's settlement
    cut = next(i for i, r in enumerate(s.journal) if isinstance(r, AgentExitRecord))
    s.journal = s.journal[: cut + 1]
    t, _ = restart(s)
    result = t.state.results[task_id]
    assert result.status == "failed"
    assert result.error == "the agent was gone when the parent restarted"
    assert t.state.agents[a].active_task is None


def test_an_agent_closed_before_the_restart_stays_closed_after_it() -> None:
    s = Session(SETTINGS)
    a = s.spawn("scout")
    s.delegate("scout")
    s.call(api.CloseArgs(agent="scout"))
    # the parent dies before the agent's process has exited (its exit is not journaled)
    t, _ = restart(s)
    assert t.state.agents[a].closed
    t.call_refused(api.DelegateArgs(target="scout", task="again"), InvalidHandle)


def test_a_batch_folds_back_to_the_state_it_left_and_its_watcher_resumes() -> None:
    s = Session(SETTINGS)
    agents = [s.spawn(f"w{i}") for i in range(4)]
    s.call(api.build_args(api_batch.SpawnManyArgs, names=["v0", "v1", "w0"]))
    items = [{"target": f"w{i}", "task": f"job {i}"} for i in range(4)]
    items.append({"target": "w0", "task": "twice"})
    result = answer(
        s.call(
            api.build_args(api_batch.DelegateManyArgs, items=items, watch=True, timeout_minutes=9)
        )
    )
    s.done(agents[1])
    s.fire_timer(("flush", result.watcher_id))  # delivered before the restart
    assert facts(fold(s.journal, SessionState(SESSION, SETTINGS))) == facts(s.state)
    t, _effects = restart(s)
    watcher = t.watchers[result.watcher_id]
    assert watcher.pending == {result.task_ids[i] for i in (0, 2, 3)}
    t.done(agents[2])
    (note,) = notes(t.fire_timer(("flush", result.watcher_id)), TaskCompletion)
    assert [r.task_id for r in note.results] == [result.task_ids[2]]


def test_a_watcher_given_its_actor_again_starts_watching_at_the_restart() -> None:
    """Its window counts from the restart, not from its first ``watch`` nor from when the
    result it is handed settled (before the restart)."""
    s, ids = busy()
    first = s.watchers[ids["w"]].since
    t, _ = restart(s)
    assert first < s.now < t.now and t.watchers[ids["w"]].since == t.now
