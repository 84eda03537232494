"""protocol.session.watchers: exactly once per watcher; coalescing into one notification in
the order the ids were named; a watcher with nothing pending is not kept."""

from __future__ import annotations

import pytest

from protocol.calls import api
from protocol.core.errors import DuplicateIds, InvalidArgument, InvalidHandle, MixedIds
from protocol.records.journal import WatcherRecord
from protocol.records.notifications import TaskCompletion
from protocol.records.settings import Settings
from protocol.records.tasks import TaskResult
from protocol.session import watcher, watchers
from protocol.session.effects import Flush, Journal, Notify, StartTimer
from protocol.session.state import WatcherState

from .harness import T0, Session, answer, journaled, notes, of


def team(n: int = 3) -> tuple[Session, list[str], list[str]]:
    """``n`` agents, each with a task: (session, agent ids, task ids)."""
    s = Session(Settings(coalesce_ms=50.0))
    names = [f"w{i}" for i in range(n)]
    agent_ids = [s.spawn(name) for name in names]
    return s, agent_ids, [s.delegate(name, f"job {name}") for name in names]


def watch(s: Session, ids: list[str]) -> api.WatchResult:
    result = answer(s.call(api.WatchArgs(ids=tuple(ids))))
    assert isinstance(result, api.WatchResult)
    return result


def completions(s: Session) -> list[TaskCompletion]:
    return notes([*s.heard], TaskCompletion)


# ------------------------------------------------------------------ watch


def test_a_watch_of_open_tasks_is_journaled_before_its_answer_and_kept() -> None:
    s, _, tasks = team()
    effects = s.call(api.WatchArgs(ids=(tasks[2], tasks[0])))
    assert isinstance(effects[0], Journal)
    result = answer(effects)
    assert effects[0].record == WatcherRecord(
        watcher_id=result.watcher_id, ids=(tasks[2], tasks[0]), created_at=T0, inline=()
    )
    assert result.pending == (tasks[2], tasks[0]) and result.completed == ()
    watcher = s.watchers[result.watcher_id]
    assert watcher.pending == {tasks[0], tasks[2]}
    assert s.state.subscribers == {tasks[2]: [result.watcher_id], tasks[0]: [result.watcher_id]}


def test_results_already_settled_are_in_the_answer_and_journaled_as_delivered() -> None:
    s, agents, tasks = team()
    s.done(agents[1], summary="one")
    effects = s.call(api.WatchArgs(ids=(tasks[0], tasks[1])))
    result = answer(effects)
    assert [r.task_id for r in result.completed] == [tasks[1]]
    assert result.pending == (tasks[0],)
    (record,) = journaled(effects, WatcherRecord)
    assert record.inline == (tasks[1],)
    assert s.watchers[result.watcher_id].pending == {tasks[0]}


def test_a_watcher_with_nothing_pending_is_not_kept_nor_journaled() -> None:
    s, agents, tasks = team(2)
    s.done(agents[0])
    s.done(agents[1])
    effects = s.call(api.WatchArgs(ids=tuple(tasks)))
    result = answer(effects)
    assert result.pending == () and len(result.completed) == 2
    assert journaled(effects) == [] and s.watchers == {}


def test_a_prompt_id_watches_its_task() -> None:
    s = Session()
    s.spawn("scout")
    prompt = answer(s.call(api.PromptArgs(target="scout", prompt="count")))
    result = watch(s, [prompt.prompt_id])
    assert result.ids == (prompt.task_id,) and result.pending == (prompt.task_id,)


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        ([], InvalidArgument),
        (["shepherd-task-0badc0de"], InvalidHandle),
        (["shepherd-agent-00000001"], InvalidHandle),
        (["not an id"], InvalidHandle),
        (["TASK0", "TASK0"], DuplicateIds),
        (["TASK0", "PROMPT"], MixedIds),
    ],
)
def test_a_bad_watch_is_refused_and_keeps_no_watcher(ids: list[str], error: type) -> None:
    s = Session()
    s.spawn("w0")
    tasks = [s.delegate("w0")]
    s.spawn("w1")
    prompt = answer(s.call(api.PromptArgs(target="w1", prompt="x")))
    named = [tasks[0] if i == "TASK0" else prompt.prompt_id if i == "PROMPT" else i for i in ids]
    s.refuses(error, lambda: watchers.watch(s.state, named, s.ctx()))


# ------------------------------------------------------------------ exactly once, coalesced


def test_a_settled_result_opens_the_window_and_goes_out_once_when_it_closes() -> None:
    s, agents, tasks = team()
    w = watch(s, [tasks[0], tasks[1]]).watcher_id
    effects = s.done(agents[0], summary="zero")
    assert StartTimer(delay=0.05, event=Flush(watcher_id=w)) in effects
    assert completions(s) == []  # not before the window closes
    s.now += 0.05
    effects = s.fire_timer(("flush", w))
    (note,) = notes(effects, TaskCompletion)
    assert note.watcher_id == w and note.ids == (tasks[0], tasks[1])
    assert [r.task_id for r in note.results] == [tasks[0]] and note.results[0].text == "zero"
    assert note.pending == (tasks[1],)
    assert s.watchers[w].pending == {tasks[1]} and s.watchers[w].buffer == ()
    assert s.fire(Flush(watcher_id=w)) == []  # nothing buffered: nothing again


def test_results_within_one_window_coalesce_in_the_order_the_ids_were_named() -> None:
    s, agents, tasks = team()
    w = watch(s, [tasks[1], tasks[2], tasks[0]]).watcher_id
    s.done(agents[0])
    more = s.done(agents[2]) + s.done(agents[1])
    assert of(more, StartTimer) == []  # the window is open already
    s.now += 0.05
    (note,) = notes(s.fire_timer(("flush", w)), TaskCompletion)
    assert [r.task_id for r in note.results] == [tasks[1], tasks[2], tasks[0]]
    assert note.pending == ()
    assert w not in s.watchers  # nothing pending: done


def test_each_watcher_of_a_task_gets_its_result_exactly_once() -> None:
    s, agents, tasks = team(2)
    first = watch(s, [tasks[0]]).watcher_id
    second = watch(s, [tasks[0], tasks[1]]).watcher_id
    s.done(agents[0])
    s.call(api.CancelArgs(task_id=tasks[0]))  # settled already: nothing new to hand over
    s.fire_timer(("flush", first))
    s.fire_timer(("flush", second))
    s.done(agents[1])
    s.fire_timer(("flush", second))
    got = [(n.watcher_id, r.task_id) for n in completions(s) for r in n.results]
    assert got == [(first, tasks[0]), (second, tasks[0]), (second, tasks[1])]
    assert s.watchers == {} and s.state.subscribers == {}


def test_taking_a_result_twice_buffers_it_once() -> None:
    s, agents, tasks = team(2)
    w = watch(s, [tasks[0], tasks[1]]).watcher_id
    s.done(agents[0])
    result = s.state.results[tasks[0]]
    state = s.watchers[w]
    at = result.completed_at
    assert watcher.take(state, result, at, 0.05, s.now) == (state, None)  # buffered: not again
    assert s.watchers[w].buffer == (result,)
    s.fire_timer(("flush", w))
    state = s.watchers[w]
    assert watcher.take(state, result, at, 0.05, s.now) == (state, None)  # delivered: not pending


def test_a_watch_after_settling_but_before_the_flush_does_not_double_deliver() -> None:
    s, agents, tasks = team(1)
    w1 = watch(s, tasks).watcher_id
    s.done(agents[0])
    later = watch(s, tasks)
    assert later.pending == () and [r.task_id for r in later.completed] == tasks
    s.fire_timer(("flush", w1))
    assert [n.watcher_id for n in completions(s)] == [w1]


def test_a_wait_callers_watcher_is_not_journaled_and_its_notes_go_to_the_caller() -> None:
    s, agents, tasks = team(1)
    effects = s.run(watchers.watch(s.state, tasks, s.ctx(), journaled=False))
    w = answer(effects).watcher_id
    assert journaled(effects) == [] and not s.watchers[w].journaled
    s.done(agents[0])
    (notify,) = of(s.fire_timer(("flush", w)), Notify)
    assert isinstance(notify.note, TaskCompletion)
    assert notify.note.watcher_id == w and not s.to_parent(notify)


def test_a_zero_window_still_coalesces_through_one_flush() -> None:
    s = Session(Settings(coalesce_ms=0.0))
    a = s.spawn("a")
    task_id = s.delegate("a")
    w = watch(s, [task_id]).watcher_id
    effects = s.done(a)
    assert StartTimer(delay=0.0, event=Flush(watcher_id=w)) in effects


# ------------------------------------------------------------- the window counts from settling


def _waiting_for(task_id: str, since: float) -> WatcherState:
    return WatcherState(
        watcher_id="shepherd-watcher-00000001",
        ids=(task_id,),
        pending=frozenset({task_id}),
        since=since,
    )


def _settled(task_id: str, at: float) -> TaskResult:
    return TaskResult(
        task_id=task_id, agent_id="a", status="completed", ok=True, return_code=0, completed_at=at
    )


@pytest.mark.parametrize(
    ("heard_after", "delay"),
    [(0.0, 0.025), (0.010, 0.015), (0.025, 0.0), (3.0, 0.0), (-1.0, 0.025)],
    ids=["at-once", "after-10ms", "after-the-window", "long-after", "clock-went-back"],
)
def test_the_window_closes_its_length_after_the_first_result_settled(
    heard_after: float, delay: float
) -> None:
    """The time a result took to reach the watcher (its journal write, the routing) counts
    against the window, never beyond it; a clock that went back never makes it longer."""
    task_id = "shepherd-task-00000001"
    w = _waiting_for(task_id, since=T0 - 10)
    _, opens = watcher.take(w, _settled(task_id, T0), T0, 0.025, T0 + heard_after)
    assert opens is not None and opens.delay == pytest.approx(delay, abs=1e-9)
    assert 0.0 <= opens.delay <= 0.025


def test_the_window_never_counts_from_before_the_watcher_started() -> None:
    """A watcher started after its task settled (a restart gave it its actor again) waits a
    whole window from its start for the results handed to it."""
    task_id = "shepherd-task-00000001"
    w = _waiting_for(task_id, since=T0 + 50)
    _, opens = watcher.take(w, _settled(task_id, T0), T0, 0.025, T0 + 50.005)
    assert opens is not None and opens.delay == pytest.approx(0.020)


def test_a_watch_starts_watching_at_its_call() -> None:
    s, _, tasks = team(1)
    w = watch(s, tasks).watcher_id
    assert s.watchers[w].since == s.now


@pytest.mark.parametrize(
    ("said_before", "delay"),
    [(0.0, 0.05), (0.020, 0.03), (0.060, 0.0), (-5.0, 0.05)],
    ids=["just-now", "20ms-before", "before-the-window", "clock-ahead"],
)
def test_a_window_counts_from_when_the_agent_said_done(said_before: float, delay: float) -> None:
    """The time between the agent's ``done`` and its settlement (the parent busy with others,
    the mailbox) counts against the window; an agent's clock that is ahead never makes the
    window close later than it would from the settlement."""
    s, agents, tasks = team(1)
    w = watch(s, tasks).watcher_id
    s.now += 1.0
    effects = s.done(agents[0], created_at=s.now - said_before)
    (timer,) = [e for e in of(effects, StartTimer) if e.event == Flush(watcher_id=w)]
    assert timer.delay == pytest.approx(delay, abs=1e-9)


def test_a_parents_ending_counts_from_when_the_task_settled() -> None:
    s, _, tasks = team(1)
    w = watch(s, tasks).watcher_id
    s.now += 1.0
    effects = s.call(api.CancelArgs(task_id=tasks[0]))
    assert StartTimer(delay=0.05, event=Flush(watcher_id=w)) in effects


@pytest.mark.parametrize(
    ("said", "ended"),
    [(None, T0), (T0 - 0.01, T0 - 0.01), (T0 + 3.0, T0), (float("inf"), T0), (float("nan"), T0)],
    ids=["not-said", "said-before", "said-after", "infinite", "not-a-number"],
)
def test_when_a_task_ended_for_its_window(said: float | None, ended: float) -> None:
    assert watchers.ended_at(_settled("shepherd-task-00000001", T0), said) == ended
