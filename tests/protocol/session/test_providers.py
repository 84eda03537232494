"""Model providers (protocol.session.providers): one cool-down per provider, shared by its
agents, told once each way, only ever extended; provider errors retried with capped, jittered
exponential backoff, then failing the task ``provider_error``; a rate limit is no attempt; and
Hypothesis properties: no agent of a provider is resumed during its cool-down, a cool-down
never shortens, a paced provider starts one task per token and never before it is due."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.calls import api
from protocol.records.notifications import Notice
from protocol.records.settings import Settings
from protocol.records.tasks import TaskState
from protocol.session.effects import CooldownDue, PaceDue, RetryDue, StartTimer, TellTask
from protocol.session.task import Start
from protocol.wire.envelopes import ControlEnvelope

from .harness import Session, delivered, notes, of

SETTINGS = Settings(
    provider_retries=2,
    provider_backoff_s=2.0,
    provider_backoff_max_s=5.0,
    provider_cooldown_max_s=100.0,
)


def team(*agents: tuple[str, str], **more: object) -> Session:
    s = Session(msgspec.structs.replace(SETTINGS, **more))
    for name, provider in agents:
        s.call(api.SpawnArgs(name=name, adapter="pi-rpc", provider=provider))
    return s


def agent(s: Session, name: str) -> str:
    return s.state.names[name]


def controls(effects: list, action: str) -> list[str]:  # type: ignore[type-arg]
    return sorted(e.target_id for e in delivered(effects, ControlEnvelope) if e.action == action)


def told(effects: list, code: str) -> list[Notice]:  # type: ignore[type-arg]
    return [n for n in notes(effects, Notice) if n.code == code]


def cooled(s: Session, provider: str) -> list:  # type: ignore[type-arg]
    """The provider's cool-down timer goes off at its time."""
    s.now = max(s.now, s.state.cooldowns[provider])
    return s.fire_timer(("cooldown", provider))


def next_token(s: Session, provider: str) -> list:  # type: ignore[type-arg]
    """A paced provider's next token comes (its timer goes off at its time)."""
    s.now = max(s.now, s.state.paces[provider].next_at)
    return s.fire_timer(("pace", provider))


def next_timer(s: Session) -> list:  # type: ignore[type-arg]
    """The first armed timer (by key) goes off; a cool-down's at its end, a token's at its."""
    due = sorted(s.timers.items(), key=lambda kv: str(kv[0]))
    if not due:
        return []
    event = due[0][1]
    if isinstance(event, CooldownDue):
        s.now = max(s.now, event.until)
    elif isinstance(event, PaceDue):
        s.now = max(s.now, s.state.paces[event.provider].next_at)
    return s.fire_timer(due[0][0])


def limited(s: Session, name: str, retry_after: float | None = None, **kw: object) -> list:  # type: ignore[type-arg]
    return s.runtime(
        agent(s, name), "rate_limited", retry_after_s=retry_after, text="429 slow down", **kw
    )


def test_a_rate_limit_holds_every_agent_of_its_provider_and_no_other() -> None:
    s = team(("a", "p1"), ("b", "p1"), ("c", "p1"), ("x", "p2"))
    effects = limited(s, "a", 10.0)
    # the reporter waits already; its siblings are told to hold; p2's agent is untouched
    assert controls(effects, "hold") == sorted([agent(s, "b"), agent(s, "c")])
    (note,) = told(effects, "provider_cooldown")
    assert note.refs == ("p1",) and "10." in note.text and "3 agent(s)" in note.text
    until = s.state.cooldowns["p1"]
    assert s.now + 10.0 <= until < s.now + 11.0  # its Retry-After, with up to a tenth more
    (timer,) = [e for e in of(effects, StartTimer) if isinstance(e.event, CooldownDue)]
    assert timer.event == CooldownDue(provider="p1", until=until)


def test_the_cool_down_only_extends_and_is_told_once_each_way() -> None:
    s = team(("a", "p1"), ("b", "p1"))
    limited(s, "a", 10.0)
    first = s.state.cooldowns["p1"]
    effects = limited(s, "b", 2.0)  # shorter: changes nothing
    assert s.state.cooldowns["p1"] == first and told(effects, "provider_cooldown") == []
    assert not of(effects, StartTimer)
    s.now += 1.0
    effects = limited(s, "b", 30.0)  # longer: extended, not told again
    assert s.state.cooldowns["p1"] > first and told(effects, "provider_cooldown") == []
    # the first timer comes and goes: the cool-down was extended
    assert s.fire(CooldownDue(provider="p1", until=first)) == []
    assert "p1" in s.state.cooldowns
    effects = cooled(s, "p1")
    assert len(told(effects, "provider_cooldown_ended")) == 1
    # paced: the first refused turn now, the next one at the next token
    assert controls(effects, "resume") == [agent(s, "a")]
    assert "p1" not in s.state.cooldowns and list(s.state.held) == [agent(s, "b")]
    assert controls(next_token(s, "p1"), "resume") == [agent(s, "b")] and not s.state.held


def test_a_cool_down_is_capped_and_without_retry_after_it_backs_off() -> None:
    s = team(("a", "p1"), ("b", "p2"))
    limited(s, "a", 86_400.0)
    assert s.state.cooldowns["p1"] == s.now + 100.0  # the cap
    limited(s, "b")
    assert s.now + 2.0 <= s.state.cooldowns["p2"] < s.now + 2.2  # the first backoff


def test_a_queued_task_of_a_cooling_provider_waits_and_starts_when_it_ends() -> None:
    s = team(("a", "p1"), ("b", "p1"), ("x", "p2"), max_running=5)
    limited(s, "a", 10.0)
    blocked = s.delegate("b")
    free = s.delegate("x")
    assert s.state.tasks[blocked].state is TaskState.QUEUED
    assert s.state.tasks[free].state is TaskState.RUNNING
    effects = cooled(s, "p1")
    # every agent of p1 may take turns again; the refused turn takes the first token, and
    # the queued task waits for the next
    assert controls(effects, "resume") == sorted([agent(s, "a"), agent(s, "b")])
    assert s.state.tasks[blocked].state is TaskState.QUEUED
    effects = next_token(s, "p1")
    starts = [e.task_id for e in of(effects, TellTask)]
    assert starts == [blocked] and s.state.tasks[blocked].state is TaskState.RUNNING


def test_provider_errors_back_off_then_fail_the_task_with_provider_error() -> None:
    s = team(("a", "p1"))
    me = agent(s, "a")
    task_id = s.delegate("a")
    delays = []
    for attempt in (1, 2):
        effects = s.runtime(me, "provider_error", provider="p1", text="500 internal error")
        (timer,) = of(effects, StartTimer)
        assert timer.event == RetryDue(agent_id=me, counted=task_id, attempt=attempt)
        delays.append(timer.delay)
        effects = s.fire_timer(("retry", me))
        assert controls(effects, "resume") == [me]
    assert 2.0 <= delays[0] < 2.2 and 4.0 <= delays[1] < 4.4  # doubled, jittered
    effects = s.runtime(me, "provider_error", provider="p1", text="500 internal error")
    result = s.state.tasks[task_id].result
    assert result is not None and (result.status, result.reason) == ("failed", "provider_error")
    assert (
        result.error is not None and "p1" in result.error and "500 internal error" in result.error
    )
    assert "retried 2 times" in result.error
    (control,) = delivered(effects, ControlEnvelope, me)
    assert control.action == "cancel_task"


def test_backoff_is_capped_and_a_rate_limit_is_not_an_attempt() -> None:
    s = team(("a", "p1"), provider_retries=5)
    me = agent(s, "a")
    task_id = s.delegate("a")
    for attempt in range(1, 5):
        effects = s.runtime(me, "provider_error", provider="p1", text="boom")
        (timer,) = of(effects, StartTimer)
        assert timer.delay < 5.0 * 1.1  # the cap
        limited(s, "a", 1.0)  # between two errors: not counted
        cooled(s, "p1")
        assert s.state.provider_attempts[task_id] == attempt


def test_a_turn_that_gets_through_starts_the_count_again() -> None:
    s = team(("a", "p1"))
    me = agent(s, "a")
    task_id = s.delegate("a")
    s.runtime(me, "provider_error", provider="p1", text="boom")
    s.fire_timer(("retry", me))
    s.runtime(me, "tool_call", tool="bash", command="ls")
    assert task_id not in s.state.provider_attempts


def test_a_retry_waits_for_its_providers_cool_down() -> None:
    s = team(("a", "p1"), ("b", "p1"))
    me = agent(s, "a")
    s.delegate("a")
    s.runtime(me, "provider_error", provider="p1", text="boom")
    limited(s, "b", 30.0)
    assert controls(s.fire_timer(("retry", me)), "resume") == []  # cooling: not yet
    assert me in controls(cooled(s, "p1"), "resume")


def test_a_provider_reported_by_an_agent_is_learnt() -> None:
    s = Session(SETTINGS)
    s.call(api.SpawnArgs(name="cmd", adapter="command", cmd="x {message}"))
    s.call(api.SpawnArgs(name="other", adapter="command", cmd="x {message}"))
    limited(s, "other", 5.0, provider="acme")  # learnt from the report
    effects = limited(s, "cmd", 50.0, provider="acme")
    assert s.state.providers[agent(s, "cmd")] == "acme"
    assert told(effects, "provider_cooldown") == []  # extending acme's: told once already


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["limit", "error", "advance", "timer"]),
        st.sampled_from(["a", "b", "x"]),
        st.floats(0.0, 50.0),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_no_agent_is_resumed_in_its_providers_cool_down_and_it_never_shortens(
    steps: list[tuple[str, str, float]],
) -> None:
    s = team(("a", "p1"), ("b", "p1"), ("x", "p2"))
    s.delegate("a")
    s.delegate("b")
    for kind, name, value in steps:
        before = dict(s.state.cooldowns)
        if kind == "limit":
            effects = limited(s, name, value)
        elif kind == "error":
            effects = s.runtime(agent(s, name), "provider_error", text="boom")
        elif kind == "advance":
            s.now += value
            effects = []
        else:
            effects = next_timer(s)
        for provider, until in before.items():
            if until > s.now:  # not over yet: never shortened, whatever fired
                assert s.state.cooldowns.get(provider, 0.0) >= until
        for target in controls(effects, "resume"):
            provider = "p2" if target == agent(s, "x") else "p1"
            assert s.state.cooldowns.get(provider, 0.0) <= s.now


@pytest.mark.parametrize("retries", [0])
def test_no_retries_fails_at_the_first_error(retries: int) -> None:
    s = team(("a", "p1"), provider_retries=retries)
    task_id = s.delegate("a")
    s.runtime(agent(s, "a"), "provider_error", provider="p1", text="model not found")
    result = s.state.tasks[task_id].result
    assert result is not None and result.reason == "provider_error"
    assert "retried 0 times" in (result.error or "")


def test_a_cool_down_timer_that_goes_off_early_is_armed_again() -> None:
    s = team(("a", "p1"), ("b", "p1"))
    limited(s, "a", 10.0)
    until = s.state.cooldowns["p1"]
    effects = s.fire_timer(("cooldown", "p1"))  # at the same time it was armed
    assert controls(effects, "resume") == [] and s.state.cooldowns["p1"] == until
    assert [e.event for e in of(effects, StartTimer)] == [CooldownDue(provider="p1", until=until)]


def test_the_refused_turns_own_end_does_not_start_the_count_again() -> None:
    s = team(("a", "p1"))
    me = agent(s, "a")
    task_id = s.delegate("a")
    s.runtime(me, "provider_error", provider="p1", text="boom")
    s.runtime(me, "turn_end", exit_code=0)  # a command's turn that reported, then exited 0
    assert s.state.provider_attempts[task_id] == 1
    s.fire_timer(("retry", me))
    s.runtime(me, "turn_end", exit_code=0)  # resumed, and this time it got through
    assert task_id not in s.state.provider_attempts


ADMISSION_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["delegate", "delegate", "done", "limit", "advance", "timer"]),
        st.sampled_from(["a", "b", "x", "y"]),
        st.floats(1.0, 20.0),
    ),
    min_size=4,
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(steps=ADMISSION_STEPS)
def test_no_queued_task_starts_for_a_provider_in_cool_down(
    steps: list[tuple[str, str, float]],
) -> None:
    s = team(("a", "p1"), ("b", "p1"), ("x", "p2"), ("y", "p2"), max_running=2)
    for kind, name, value in steps:
        # a paced provider's next token: one start per token, never before it is due
        tokens = {p: pace.next_at for p, pace in s.state.paces.items()}
        me = agent(s, name)
        row = s.state.agents[me]
        if kind == "delegate" and row.active_task is None:
            effects = s.call(api.DelegateArgs(target=name, task="t"))
        elif kind == "done" and row.active_task is not None:
            record = s.state.tasks[row.active_task]
            effects = s.done(me) if record.state is TaskState.RUNNING else []
        elif kind == "limit":
            effects = limited(s, name, value)
        elif kind == "advance":
            s.now += value
            effects = []
        else:
            effects = next_timer(s)
        starts = [e.task_id for e in of(effects, TellTask) if isinstance(e.message, Start)]
        for started in starts:
            provider = (
                "p1" if s.state.tasks[started].agent_id in (agent(s, "a"), agent(s, "b")) else "p2"
            )
            assert s.state.cooldowns.get(provider, 0.0) <= s.now, (provider, s.state.cooldowns)
        for provider, due in tokens.items():
            mine = {agent(s, n) for n in (("a", "b") if provider == "p1" else ("x", "y"))}
            paced = [t for t in starts if s.state.tasks[t].agent_id in mine]
            assert len(paced) <= 1 and (not paced or due <= s.now), (provider, paced, due)


def test_a_restarted_parent_resumes_every_live_agent_no_hold_of_the_last_one_stands() -> None:
    from .test_restore import restart

    s = team(("a", "p1"), ("b", "p1"), ("gone", "p2"))
    s.delegate("a")
    limited(s, "a", 60.0)  # a waits, b is held: then the parent dies
    s.exit(agent(s, "gone"), 0)
    t, effects = restart(s)
    assert controls(effects, "resume") == sorted([agent(t, "a"), agent(t, "b")])
    assert not t.state.cooldowns and not t.state.held
