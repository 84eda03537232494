"""protocol.session.budgets: limits granted at delegation (capped by the session's remainder),
usage counted from turns and usage reports, one soft warning per task and limit, and the
hard limit ending the task as failed (budget_exceeded) the way a cancel does; then the same
under random programs (Hypothesis), and across a restart."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.calls import api
from protocol.core.errors import InvalidArgument, LimitExceeded
from protocol.core.ids import IdKind
from protocol.records.journal import UsageRecord
from protocol.records.notifications import Notice, TaskCompletion
from protocol.records.settings import Settings, apply_overrides
from protocol.records.tasks import TaskRecord, TaskState
from protocol.records.usage import Budget, Usage, over
from protocol.session import budgets, inbound
from protocol.session.effects import Effect, Publish, TellTask
from protocol.session.restore import Restore, fold, resume
from protocol.session.state import SessionState
from protocol.session.status import view
from protocol.session.task import Spent
from protocol.wire.envelopes import (
    AckEnvelope,
    ControlEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)

from .harness import SESSION, Session, TaskDue, answer, delivered, journaled, notes, of, receipt


def notices(s: Session, code: str) -> list[Notice]:
    return [t.note for t in s.heard if isinstance(t.note, Notice) and t.note.code == code]


def usage(
    s: Session, agent_id: str, tokens: int = 0, cost: float | None = None, **kw: Any
) -> list[Effect]:
    return s.runtime(agent_id, "usage", tokens=tokens, cost=cost, **kw)


def one_agent(settings: Settings | None = None) -> tuple[Session, str]:
    s = Session(settings)
    return s, s.spawn("a")


def assert_ended_by_budget(s: Session, task_id: str, effects: list[Any]) -> None:
    record = s.state.tasks[task_id]
    assert record.state is TaskState.FAILED
    result = record.result
    assert result is not None and result.reason == "budget_exceeded"
    assert result.error is not None and result.error.startswith("budget_exceeded")
    # stopped as a cancel stops it: a control cancel_task naming the task
    # (after a restart every live agent is also told resume: no hold of the last parent stands)
    controls = delivered(effects, ControlEnvelope, record.agent_id)
    (control,) = [c for c in controls if c.action != "resume"]
    assert control.action == "cancel_task" and control.task_id == task_id
    assert any(n.task_id == task_id for n in notes(effects, Notice) if n.code == "budget_exceeded")


# ------------------------------------------------------------------ granting


def test_a_task_gets_the_limits_it_asks_for_journaled_with_it() -> None:
    s, a = one_agent()
    result = answer(s.call(api.DelegateArgs(target=a, task="t", max_turns=3, max_cost=1.5)))
    assert result.budget == Budget(max_turns=3, max_cost=1.5) and result.clamped == ()
    (record,) = [r for r in s.journal if isinstance(r, TaskRecord)]
    assert record.budget == Budget(max_turns=3, max_cost=1.5)


def test_no_limits_and_no_session_budget_is_no_budget() -> None:
    s, a = one_agent()
    result = answer(s.call(api.DelegateArgs(target=a, task="t")))
    assert result.budget is None and s.state.tasks[result.task_id].budget is None


def test_a_task_asking_more_than_the_session_has_left_is_clamped_and_told() -> None:
    s, a = one_agent(Settings(budget_tokens=1000, budget_cost=2.0))
    b = s.spawn("b")
    first = s.delegate(a)
    usage(s, a, tokens=600, cost=0.5)
    result = answer(s.call(api.DelegateArgs(target=b, task="t", max_tokens=5000, max_cost=1.0)))
    assert result.budget == Budget(max_tokens=400, max_cost=1.0)
    assert result.clamped == ("max_tokens",)
    assert s.state.tasks[first].budget == Budget(max_tokens=1000, max_cost=2.0)


def test_a_session_with_nothing_left_refuses_to_delegate_naming_the_remainder() -> None:
    s, a = one_agent(Settings(budget_tokens=100))
    b = s.spawn("b")
    s.delegate(a)
    usage(s, a, tokens=100)  # exactly the budget: not over it, but nothing left
    error = s.call_refused(api.DelegateArgs(target=b, task="t"), LimitExceeded)
    assert "0 left" in error.message and "max_tokens" in error.message


def test_the_compatibility_prompt_is_capped_by_the_session_too() -> None:
    s, a = one_agent(Settings(budget_cost=3.0))
    result = answer(s.call(api.PromptArgs(target=a, prompt="p")))
    assert s.state.tasks[result.task_id].budget == Budget(max_cost=3.0)


# ------------------------------------------------------------------ counting and the limits


def test_turns_count_from_turn_starts_and_the_turn_past_the_limit_ends_the_task() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_turns=2)
    s.runtime(a, "turn_start")
    s.runtime(a, "turn_end")
    s.runtime(a, "turn_start")
    assert s.state.tasks[task].state is TaskState.RUNNING
    effects = s.runtime(a, "turn_start")
    assert_ended_by_budget(s, task, effects)
    result = s.state.tasks[task].result
    assert result is not None and result.usage == Usage(turns=3)


def test_a_turn_begun_before_the_task_is_not_the_tasks() -> None:
    s, a = one_agent()
    s.now += 1
    task = s.delegate(a, max_turns=1)
    s.runtime(a, "turn_start", created_at=s.now - 0.5)
    assert s.state.task_usage.get(task) is None
    assert s.state.agent_usage[a] == Usage(turns=1)


def test_tokens_warn_once_at_the_soft_share_then_end_the_task_past_the_limit() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_tokens=1000)
    usage(s, a, tokens=500)
    assert notices(s, "budget_soft_limit") == []
    usage(s, a, tokens=300)  # 800: the soft share (80%)
    usage(s, a, tokens=100)  # 900: no second warning
    (soft,) = notices(s, "budget_soft_limit")
    assert soft.task_id == task and "max_tokens" in soft.text
    usage(s, a, tokens=100)  # exactly 1000: within the budget
    assert s.state.tasks[task].state is TaskState.RUNNING
    effects = usage(s, a, tokens=1)
    assert_ended_by_budget(s, task, effects)
    assert len(notices(s, "budget_soft_limit")) == 1


def test_cost_past_the_limit_ends_the_task() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_cost=0.10)
    usage(s, a, cost=0.06)
    effects = usage(s, a, cost=0.05)
    assert_ended_by_budget(s, task, effects)


def test_a_done_after_the_budget_ended_the_task_gets_the_stored_failure() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_tokens=10)
    usage(s, a, tokens=11)
    ack = receipt(s.done(a, task_id=task))
    assert ack.accepted and ack.result is not None and ack.result.status == "failed"
    assert s.state.tasks[task].state is TaskState.FAILED


def test_a_completed_task_carries_its_usage_to_its_watcher() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_tokens=1000)
    s.call(api.WatchArgs(ids=(task,)))
    s.runtime(a, "turn_start")
    usage(s, a, tokens=42, cost=0.25)
    s.done(a, task_id=task)
    s.fire_timer(next(k for k in s.timers if k[0] == "flush"))
    (completion,) = [t.note for t in s.heard if isinstance(t.note, TaskCompletion)]
    (result,) = completion.results
    assert result.usage == Usage(turns=1, tokens=42, cost=0.25) and result.reason is None


def test_usage_is_journaled_before_anything_tells_of_it() -> None:
    s, a = one_agent()
    s.delegate(a, max_tokens=10)
    effects = usage(s, a, tokens=11)
    (record,) = journaled(effects, UsageRecord)
    assert record.tokens == 11 and record.agent_id == a


def test_a_usage_report_with_a_reply_inbox_gets_a_receipt_there() -> None:
    s, a = one_agent()
    s.delegate(a)
    inbox = s.ids.new(IdKind.MESSAGE)
    effects = usage(s, a, tokens=5, reply_inbox=inbox)
    (published,) = of(effects, Publish)
    assert published.inbox == inbox and isinstance(published.envelope, AckEnvelope)
    assert published.envelope.accepted


def test_usage_without_a_task_counts_for_the_agent_and_the_session_only() -> None:
    s, a = one_agent()
    usage(s, a, tokens=7)
    assert s.state.agent_usage[a] == Usage(tokens=7) == s.state.session_usage
    assert s.state.task_usage == {}


def test_max_minutes_arms_a_soft_and_a_hard_timer_and_the_hard_one_ends_the_task() -> None:
    s, a = one_agent()
    effects = s.call(api.DelegateArgs(target=a, task="t", max_minutes=10))
    task = answer(effects).task_id
    assert s.deadline_armed(task) == s.now + 480.0  # the soft one first: the task's own timer
    s.now += 480
    s.fire_timer(("deadline", task))
    (soft,) = notices(s, "budget_soft_limit")
    assert "max_minutes" in soft.text
    assert s.deadline_armed(task) == s.now + 120.0
    s.now += 120
    effects = s.pass_deadline(task)  # the hard one: the task's own timer too
    assert_ended_by_budget(s, task, effects)


def test_settling_cancels_the_minute_timers_and_a_late_one_changes_nothing() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_minutes=10)
    s.done(a, task_id=task)
    assert s.deadline_armed(task) is None  # its actor's timer (the soft share, then the end)
    assert s.fire(TaskDue(task_id=task, at=s.now + 480)) == []
    assert s.fire(TaskDue(task_id=task, at=s.now + 600)) == []
    assert s.state.tasks[task].state is TaskState.COMPLETED


def test_the_session_budget_passed_ends_every_open_task_after_one_warning() -> None:
    s, a = one_agent(Settings(budget_tokens=1000))
    b = s.spawn("b")
    ta = s.delegate(a, max_tokens=10_000)  # clamped to 1000
    usage(s, a, tokens=500)
    tb = s.delegate(b)  # gets what is left: 500
    assert s.state.tasks[tb].budget == Budget(max_tokens=500)
    usage(s, b, tokens=350)  # session at 850: warned once
    (soft,) = notices(s, "budget_soft_limit")
    assert soft.task_id is None and "session" in soft.text
    usage(s, b, tokens=100)  # task b at 450 of 500: its own soft warning
    effects = usage(s, a, tokens=51)  # the session at 1001: over
    for task in (ta, tb):
        assert_ended_by_budget(s, task, effects)
    assert len([n for n in notices(s, "budget_soft_limit") if n.task_id is None]) == 1


def test_status_shows_usage_per_task_per_agent_and_the_sessions_total() -> None:
    s, a = one_agent(Settings(budget_tokens=5000))
    task = s.delegate(a, max_tokens=100)
    s.runtime(a, "turn_start")
    usage(s, a, tokens=30, cost=0.01)
    status = view(s.state, None, s.now)
    (row,) = status.agents
    assert row.usage == Usage(turns=1, tokens=30, cost=0.01)
    assert row.task is not None and row.task.task_id == task
    assert row.task.usage == Usage(turns=1, tokens=30, cost=0.01)
    assert row.task.budget == Budget(max_tokens=100)
    assert status.summary is not None and status.summary.usage == row.usage
    assert status.summary.budget_tokens == 5000


# ------------------------------------------------------------------ restart


def restarted(s: Session, after: float = 10.0, told: bool = True) -> tuple[Session, list[Any]]:
    """A parent started again on ``s``'s journal; ``told``: its soft warnings were recorded
    as delivered (else the parent died after journaling their usage, before telling)."""
    t = Session(s.state.settings, now=s.now + after)
    t.ids.made = s.ids.made + 0x10000  # past every id made before (restarts can repeat)
    t.state = fold(s.journal, SessionState(SESSION, s.state.settings))
    warned = {
        (n.task_id or budgets.SESSION_SCOPE, n.refs[0])
        for n in notices(s, "budget_soft_limit")
        if told
    }
    return t, t.run(resume(Restore(state=t.state, warned=warned), t.ctx()))


def test_usage_limits_and_warnings_survive_a_restart() -> None:
    s, a = one_agent(Settings(budget_tokens=10_000))
    task = s.delegate(a, max_tokens=100, max_minutes=60)
    s.runtime(a, "turn_start")
    usage(s, a, tokens=85, cost=0.5)
    assert len(notices(s, "budget_soft_limit")) == 1
    t, _ = restarted(s)
    assert t.state.task_usage == s.state.task_usage
    assert t.state.agent_usage == s.state.agent_usage
    assert t.state.session_usage == s.state.session_usage
    assert t.state.budget_warned == s.state.budget_warned  # the session's
    assert t.task_soft[task] == s.task_soft[task]  # the task's: its actor's
    assert t.state.tasks[task].budget == Budget(max_tokens=100, max_minutes=60)
    # its actor's timer: the soft share of its minutes (not told yet)
    assert t.deadline_armed(task) == t.state.tasks[task].created_at + 3600 * 0.8
    usage(t, a, tokens=10)  # 95: no second soft warning
    assert notices(t, "budget_soft_limit") == []
    usage(t, a, tokens=10)
    result = t.state.tasks[task].result
    assert result is not None
    assert result.reason == "budget_exceeded"


def test_a_soft_warning_journaled_but_never_told_is_told_once_after_a_restart() -> None:
    s, a = one_agent(Settings(budget_tokens=100))
    task = s.delegate(a, max_tokens=100)
    s.runtime(a, "turn_start")
    usage(s, a, tokens=85)  # past 80 of 100: the task's share and the session's
    assert {n.refs for n in notices(s, "budget_soft_limit")} == {("max_tokens",)}
    # the parent died after journaling the usage, before the notices reached the record
    t, _ = restarted(s, told=False)
    again = notices(t, "budget_soft_limit")
    assert {(n.task_id, n.refs) for n in again} == {
        (task, ("max_tokens",)),
        (None, ("max_tokens",)),
    }
    assert len(again) == 2
    usage(t, a, tokens=5)  # still past both shares: told once, not again
    assert notices(t, "budget_soft_limit") == again
    # told before the death: not told again
    u, _ = restarted(s, told=True)
    assert notices(u, "budget_soft_limit") == []


def test_a_task_whose_soft_warning_was_never_told_is_handed_to_its_agent_again() -> None:
    """After a restart a soft warning never told is told, and the task, still within its
    budget, is handed to its agent again like any open task (telling the warning does not
    stand for ending it)."""
    for told in (True, False):
        s, a = one_agent()
        task = s.delegate(a, max_tokens=100)
        s.runtime(a, "turn_start")
        usage(s, a, tokens=85)
        t, effects = restarted(s, told=told)
        assert [n.task_id for n in notices(t, "budget_soft_limit")] == ([] if told else [task])
        assert [e.task_id for e in delivered(effects, TaskEnvelope, a)] == [task], told
        assert not t.state.tasks[task].terminal


def test_a_done_on_its_way_before_the_limit_passed_wins_and_no_budget_end_is_told() -> None:
    """The agent's ``done`` is routed to its task when a usage report takes the task over its
    budget: the task decides them in that order, so it completes. The parent hears of no
    budget's end (a notice is told once a task has settled so) and the agent is not
    stopped."""
    s, a = one_agent()
    task = s.delegate(a, max_tokens=10)
    s.runtime(a, "turn_start")
    done = s.envelope(TaskDoneEnvelope, a, status="completed")
    report = s.envelope(RuntimeEnvelope, a, event="usage", tokens=11)
    routed = inbound.envelope(s.state, done, s.ctx())  # on its way to the task's actor
    effects = s.run(routed + inbound.envelope(s.state, report, s.ctx()))
    assert s.state.tasks[task].state is TaskState.COMPLETED
    assert s.state.task_usage[task] == Usage(turns=1, tokens=11)  # counted all the same
    assert [n for n in notes(effects, Notice) if n.code == "budget_exceeded"] == []
    assert not [c for c in delivered(effects, ControlEnvelope, a) if c.action == "cancel_task"]


def test_a_task_over_its_own_budget_and_the_sessions_at_once_is_told_of_once() -> None:
    s, a = one_agent(Settings(budget_tokens=50))
    task = s.delegate(a, max_tokens=10)
    s.runtime(a, "turn_start")
    effects = usage(s, a, tokens=60)
    assert_ended_by_budget(s, task, effects)
    (told,) = [n for n in notes(effects, Notice) if n.code == "budget_exceeded"]
    result = s.state.results[task]
    assert told.text == f"task {task} (a) failed: {result.error}"
    assert result.error == "budget_exceeded: the task used 60 tokens, over its max_tokens of 10"


def test_a_task_left_over_its_budget_by_a_crash_ends_when_the_parent_comes_back() -> None:
    s, a = one_agent()
    task = s.delegate(a, max_tokens=10)
    # the parent journaled the usage and died before the settlement was journaled
    s.journal.append(UsageRecord(agent_id=a, task_id=task, tokens=11, at=s.now))
    t, effects = restarted(s)
    assert_ended_by_budget(t, task, effects)


# ------------------------------------------------------------------ random programs

steps = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 1)),
        st.tuples(st.just("tokens"), st.integers(0, 1), st.integers(0, 400)),
        st.tuples(st.just("cost"), st.integers(0, 1), st.floats(0, 0.4)),
        st.tuples(st.just("done"), st.integers(0, 1)),
        st.tuples(st.just("delegate"), st.integers(0, 1)),
        st.tuples(st.just("minutes"), st.integers(0, 1)),
        st.tuples(st.just("restart")),
    ),
    max_size=30,
)
limits = st.builds(
    Budget,
    max_turns=st.none() | st.integers(1, 4),
    max_tokens=st.none() | st.integers(1, 1000),
    max_cost=st.none() | st.floats(0.01, 1.0),
    max_minutes=st.none() | st.floats(1, 10),
)


def check_budgets(s: Session) -> None:
    """What budgets promise after every step."""
    state = s.state
    for task_id, record in state.tasks.items():
        spent = state.task_usage.get(task_id, Usage())
        if record.budget is not None and over(spent, record.budget):
            assert record.terminal, f"{task_id} is over its budget but still {record.state}"
        result = record.result
        if result is not None and result.reason == "budget_exceeded":
            assert record.state is TaskState.FAILED
    session = budgets.session_budget(state)
    if over(state.session_usage, session):
        assert all(r.terminal for r in state.tasks.values())
    # the soft warning: at most once per task (or session) and limit
    warned = [
        (n.task_id, lim)
        for n in notices(s, "budget_soft_limit")
        for lim in ("max_turns", "max_tokens", "max_cost", "max_minutes")
        if f"({lim})" in n.text
    ]
    assert len(warned) == len(set(warned)), warned
    # and exactly once for an open task at or past the share of a counted limit
    for task_id, record in state.tasks.items():
        if record.terminal or record.budget is None:
            continue
        spent = state.task_usage.get(task_id, Usage())
        for limit in over(spent, record.budget, state.settings.budget_soft_fraction):
            assert (task_id, limit) in warned or (task_id, limit) in state.budget_warned


def check_fold(s: Session) -> None:
    """The journal folds back to the same usage."""
    folded = fold(s.journal, SessionState(SESSION, s.state.settings))
    assert folded.session_usage == s.state.session_usage
    assert folded.task_usage == s.state.task_usage
    assert folded.agent_usage == s.state.agent_usage


@settings(max_examples=60, deadline=None)
@given(program=steps, asked=st.lists(limits, min_size=2, max_size=2), session=st.booleans())
def test_budgets_hold_under_random_programs(
    program: list[tuple[Any, ...]], asked: list[Budget], session: bool
) -> None:
    conf = Settings(budget_tokens=1500, budget_cost=1.5) if session else Settings()
    s = Session(conf)
    agents = [s.spawn("a"), s.spawn("b")]
    completed: set[str] = set()
    for step in program:
        kind, *rest = step
        agent = agents[rest[0]] if rest else agents[0]
        row = s.state.agents[agent]
        if kind == "delegate" and row.active_task is None:
            fields = msgspec.structs.asdict(asked[rest[0]])
            with contextlib.suppress(LimitExceeded):
                s.delegate(agent, **{k: v for k, v in fields.items() if v is not None})
        elif kind == "turn":
            s.runtime(agent, "turn_start")
        elif kind == "tokens":
            usage(s, agent, tokens=rest[1])
        elif kind == "cost":
            usage(s, agent, cost=rest[1])
        elif kind == "done" and row.active_task is not None:
            s.done(agent, task_id=row.active_task)
        elif kind == "minutes" and row.active_task is not None:
            if s.deadline_armed(row.active_task) is not None:
                s.ring(row.active_task)  # its soft share, or its end
        elif kind == "restart":
            t, _ = restarted(s, after=0.0)
            t.heard = s.heard + t.heard
            t.journal = s.journal + t.journal
            s = t
        s.now += 1.0
        for record in s.state.tasks.values():
            if record.state is TaskState.COMPLETED:
                completed.add(record.task_id)
        check_budgets(s)
    check_fold(s)
    # a task ended by its budget was never completed
    for record in s.state.tasks.values():
        if record.result is not None and record.result.reason == "budget_exceeded":
            assert record.task_id not in completed


def test_runtime_usage_envelope_is_bounded() -> None:
    for bad in ({"tokens": -1}, {"tokens": 10**13}, {"cost": float("nan")}, {"cost": 1e300}):
        base = {
            "kind": "runtime",
            "message_id": "shepherd-message-00000001",
            "session_id": SESSION,
            "sender_id": "shepherd-agent-00000001",
            "target_id": "shepherd",
            "created_at": 1.0,
            "event": "usage",
        }
        try:
            msgspec.convert({**base, **bad}, RuntimeEnvelope)
        except msgspec.ValidationError:
            continue
        raise AssertionError(f"{bad} was accepted")


# ------------------------------------------------------------------ bounds (Python API, settings)


def test_every_limit_refuses_hostile_values_naming_the_field() -> None:
    hostile = (float("nan"), float("inf"), float("-inf"), 0, -1, 1e300, "10", None, True)
    for field in ("max_turns", "max_tokens", "max_cost", "max_minutes"):
        for bad in hostile:
            if bad is None:
                continue  # None is "no limit", as leaving the field out
            try:
                api.build_args(api.DelegateArgs, target="a", task="t", **{field: bad})
            except InvalidArgument as exc:
                assert field in exc.message, (field, bad, exc.message)
                continue
            raise AssertionError(f"{field}={bad!r} was accepted")


def test_session_budget_settings_out_of_range_are_warnings_and_ignored() -> None:
    for key in ("budget_tokens", "budget_cost", "budget_soft_fraction"):
        for bad in (float("nan"), float("inf"), 0, -1, 1e300, "10"):
            settings, warnings = apply_overrides(Settings(), {key: bad}, "config.toml")
            assert settings == Settings() and len(warnings) == 1 and key in warnings[0]
    settings, warnings = apply_overrides(
        Settings(), {"budget_tokens": 5000, "budget_soft_fraction": 0.5}, "config.toml"
    )
    assert (settings.budget_tokens, settings.budget_soft_fraction, warnings) == (5000, 0.5, [])


# ------------------------------------------------------------------ money is exact


_CENTS = st.integers(min_value=1, max_value=10_000_000).map(lambda m: m / 1_000_000)


@given(costs=st.lists(_CENTS, min_size=1, max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_sum_of_costs_is_exact_and_prints_as_the_amount(costs: list[float]) -> None:
    """Whatever costs are reported, their sum is the exact amount (counted in micro-dollars):
    it prints without float noise and equals the same amount written directly."""
    total = Usage()
    for cost in costs:
        total = total + Usage(cost=cost)
    exact = sum(round(c * 1_000_000) for c in costs)
    assert total.cost == exact / 1_000_000
    assert repr(total.cost) == repr(float(f"{exact / 1_000_000:.6f}"))


def test_three_dimes_are_thirty_cents_in_status() -> None:
    s, a = one_agent()
    for _ in range(3):
        usage(s, a, cost=0.1)
    status = view(s.state, None, s.now)
    (row,) = status.agents
    assert row.usage is not None and row.usage.cost == 0.3  # not 0.30000000000000004
    assert status.summary is not None and status.summary.usage is not None
    assert status.summary.usage.cost == 0.3
    assert msgspec.json.encode(status.summary.usage) == b'{"turns":0,"tokens":0,"cost":0.3}'


def test_a_cost_budget_reached_exactly_is_not_passed_and_one_micro_dollar_more_is() -> None:
    """Rule 2 with money: ten reports of $0.10 reach a $1 limit (not over it); the next
    micro-dollar passes it. With float sums the ten came to 0.9999999999999999."""
    s, a = one_agent()
    task = s.delegate(a, max_cost=1.0)
    for _ in range(10):
        usage(s, a, cost=0.1)
    assert s.state.tasks[task].state is TaskState.RUNNING
    assert_ended_by_budget(s, task, usage(s, a, cost=0.000001))


@given(costs=st.lists(_CENTS, min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_a_session_budget_left_is_exact(costs: list[float]) -> None:
    """What the session has left for a new task is the budget less the exact sum."""
    budget = 100.0
    s = Session(Settings(budget_cost=budget))
    a = s.spawn("a")
    for cost in costs:
        usage(s, a, cost=cost)
    spent = sum(round(c * 1_000_000) for c in costs)
    granted, _ = budgets.grant(s.state, Budget())
    if spent >= 100_000_000:
        return  # nothing left: refused, as the tests above show
    assert granted is not None and granted.max_cost == (100_000_000 - spent) / 1_000_000


def test_what_a_task_spends_is_told_to_its_actor_only_when_it_has_a_deadline_or_a_budget() -> None:
    """A task's actor decides its deadline and its budget alone, with what the task spent: a
    task with a deadline or a budget has its actor told each count (``Spent``, the running
    total); one with neither is told nothing (mail would cost its actor a queue of its own,
    for nothing)."""
    s, a = one_agent()
    plain = s.delegate("a")
    assert [e for e in usage(s, a, tokens=10) if isinstance(e, TellTask)] == []
    s.done(a)
    timed = s.delegate("a", timeout_minutes=5)
    usage(s, a, tokens=10)
    effects = usage(s, a, tokens=5, cost=0.5)
    (told,) = [e for e in effects if isinstance(e, TellTask)]
    spent = Spent(usage=Usage(tokens=15, cost=0.5), at=s.now)
    assert told == TellTask(task_id=timed, message=spent)
    assert s.task_spent[timed] == Usage(tokens=15, cost=0.5) and plain not in s.task_spent
    s.now += 300
    s.pass_deadline(timed)
    result = s.state.results[timed]
    assert result.status == "timed_out" and result.usage == Usage(tokens=15, cost=0.5)
    capped = s.delegate("a", max_turns=9)
    (told,) = [e for e in usage(s, a, tokens=3) if isinstance(e, TellTask)]
    assert told == TellTask(task_id=capped, message=Spent(usage=Usage(tokens=3), at=s.now))
