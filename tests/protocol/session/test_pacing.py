"""Pacing (protocol.session.pacing): once a provider refused a turn for its rate limit, the
turns the session starts for it (tasks handed over, refused turns resumed) take a token each,
tokens come ``1 / pace`` seconds apart, and the pace is learned from what got through."""

from __future__ import annotations

import pytest

from protocol.calls import api
from protocol.records.tasks import TaskState
from protocol.session import pacing, status

from .harness import Session
from .test_providers import agent, controls, cooled, limited, next_token, team


def through(s: Session, *names: str) -> None:
    """Each named agent's turn got through (it ended cleanly)."""
    for name in names:
        s.runtime(agent(s, name), "turn_end", exit_code=0)


def test_the_pace_starts_at_what_got_through_in_the_second_before() -> None:
    s = team(*((n, "p1") for n in "abcdef"))
    through(s, "e")  # more than a second before: not counted
    s.now += 1.5
    through(s, "b", "c", "d")
    s.now += 0.5
    limited(s, "a", 2.0)
    assert s.state.paces["p1"].rate == 3.0
    assert s.state.paces["p1"].slow_start
    # nothing got through at all: one turn a second to start with
    s = team(("a", "p1"))
    limited(s, "a", 2.0)
    assert s.state.paces["p1"].rate == 1.0


def test_a_paced_providers_tasks_start_a_token_apart_and_wait_queued_meanwhile() -> None:
    s = team(*((n, "p1") for n in "abcd"), ("x", "p2"))
    limited(s, "a", 1.0)
    cooled(s, "p1")  # a's refused turn takes the first token
    rate = s.state.paces["p1"].rate
    first, second = s.delegate("b"), s.delegate("c")
    assert s.state.tasks[first].state is TaskState.QUEUED  # a took the token
    assert s.state.tasks[second].state is TaskState.QUEUED
    other = s.delegate("x")  # another provider: not paced
    assert s.state.tasks[other].state is TaskState.RUNNING
    summary = status.view(s.state, None, s.now).summary
    assert summary is not None and summary.paced == {"p1": round(rate, 2)}
    at = s.now
    next_token(s, "p1")
    assert s.now == pytest.approx(at + 1.0 / rate)
    assert s.state.tasks[first].state is TaskState.RUNNING
    assert s.state.tasks[second].state is TaskState.QUEUED  # one token, one start
    next_token(s, "p1")
    assert s.state.tasks[second].state is TaskState.RUNNING
    assert not s.state.queue and ("pace", "p1") not in s.timers


def test_slow_start_then_a_refusal_while_paced_lowers_the_pace() -> None:
    s = team(*((n, "p1") for n in "abcdef"))
    limited(s, "a", 1.0)
    cooled(s, "p1")
    pace = s.state.paces["p1"]
    assert pace.rate == 2.0 and pace.slow_start  # one token spent: +1
    for name in "bcd":
        s.delegate(name)
        next_token(s, "p1")
    assert pace.rate == 5.0  # +1 a token while it was never refused paced
    through(s, "c", "d")
    limited(s, "b", 0.2)  # a paced turn refused: a tenth below what got through
    assert not pace.slow_start and pace.rate == pytest.approx(1.8)
    cooled(s, "p1")  # b's refused turn: its token, and the pace rises by RAISE / pace
    assert pace.rate == pytest.approx(1.8 + pacing.RAISE / 1.8)
    lowered = pace.rate
    limited(s, "b", 0.2)  # refused again within the second: lowered once a second at most
    assert pace.rate == lowered
    s.now += 1.0
    s.fire_timer(("cooldown", "p1"))  # b's turn resumed by a token again
    before = pace.rate
    limited(s, "b", 0.2)  # a second on: out of slow start, lowered by a tenth
    assert pace.rate == pytest.approx(before * 0.9)


def test_a_late_refusal_of_a_turn_no_token_started_leaves_the_pace() -> None:
    s = team(*((n, "p1") for n in "abc"))
    s.delegate("b")  # handed over before the provider was paced
    limited(s, "a", 1.0)
    cooled(s, "p1")
    pace = s.state.paces["p1"]
    rate = pace.rate
    s.now += 2.0
    limited(s, "b", 1.0)  # its turn was of the burst before pacing, reported late
    assert pace.rate == rate and pace.slow_start


def test_no_token_is_given_during_a_cool_down() -> None:
    s = team(*((n, "p1") for n in "abc"))
    limited(s, "a", 1.0)
    cooled(s, "p1")
    waiting = s.delegate("b")
    limited(s, "c", 30.0)  # a new cool-down before the token's time
    effects = next_token(s, "p1")
    assert controls(effects, "resume") == [] and s.state.tasks[waiting].state is TaskState.QUEUED
    cooled(s, "p1")  # the refused turn of c first, then b's task at the next token
    assert s.state.tasks[waiting].state is TaskState.QUEUED
    next_token(s, "p1")
    assert s.state.tasks[waiting].state is TaskState.RUNNING


def test_a_refused_turn_whose_agent_was_closed_takes_no_token() -> None:
    s = team(*((n, "p1") for n in "abc"))
    limited(s, "a", 1.0)
    limited(s, "b", 1.0)
    s.call(api.CloseArgs(agent="a"))
    effects = cooled(s, "p1")
    assert controls(effects, "resume") == sorted([agent(s, "b"), agent(s, "c")])
    assert not s.state.held and not s.state.paces["p1"].waiting


def test_an_agent_that_comes_up_during_its_providers_cool_down_is_told_hold() -> None:
    s = team(("a", "p1"), ("x", "p2"))
    limited(s, "a", 10.0)
    s.call(api.SpawnArgs(name="late", adapter="pi-rpc", provider="p1"))
    s.call(api.SpawnArgs(name="other", adapter="pi-rpc", provider="p2"))
    assert controls(s.runtime(agent(s, "late"), "ready"), "hold") == [agent(s, "late")]
    assert controls(s.runtime(agent(s, "other"), "ready"), "hold") == []
    effects = cooled(s, "p1")  # and is resumed with the others at its end
    assert agent(s, "late") in controls(effects, "resume")


def test_a_task_queued_for_a_slot_not_a_token_sets_no_timer_again_and_again() -> None:
    s = team(("a", "p1"), ("b", "p1"), max_running=1)
    s.delegate("a")
    limited(s, "a", 1.0)
    cooled(s, "p1")  # a's refused turn resumed: the one slot stays a's
    waiting = s.delegate("b")
    next_token(s, "p1")  # the token is there, the slot is not
    assert s.state.tasks[waiting].state is TaskState.QUEUED
    assert ("pace", "p1") not in s.timers  # no timer firing at once, forever
    s.done(agent(s, "a"))  # the slot frees: the task starts (its token was there)
    assert s.state.tasks[waiting].state is TaskState.RUNNING
