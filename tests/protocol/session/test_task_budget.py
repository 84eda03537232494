"""A task's soft warnings and its one timer (:mod:`protocol.session.task_budget`), without a
runtime: what its actor decides of what it spent and of its timer, beside its ends."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from protocol.records.tasks import TaskEvent, TaskRecord, queue, start
from protocol.records.usage import BUDGET_EXCEEDED, Budget, Usage
from protocol.session.task import DEADLINE_PASSED, End, Noted, Settled, Spent, Sync
from protocol.session.task_budget import Soft, Warned, alarm, notices, rang, soft_for, told

T0 = 1000.0


def task(budget: Budget | None, *, queued: bool = False, **fields: object) -> TaskRecord:
    record = TaskRecord(
        task_id="shepherd-task-1",
        agent_id="shepherd-agent-1",
        agent_name="w",
        description="x",
        created_at=T0,
        budget=budget,
        **fields,  # type: ignore[arg-type]
    )
    return queue(record) if queued else start(record, T0)


def spent(tokens: int = 0, cost: float = 0.0, turns: int = 0, at: float = T0 + 1) -> Spent:
    return Spent(usage=Usage(turns=turns, tokens=tokens, cost=cost), at=at)


def test_a_task_without_a_budget_has_no_soft_state_and_is_never_warned() -> None:
    assert soft_for(task(None), 0.8) is None
    assert soft_for(task(Budget()), 0.8) is None
    assert soft_for(task(Budget(max_tokens=10)), 0.8) == Soft(fraction=0.8)
    record = task(None)
    after, soft, report = told(record, None, spent(tokens=10**6))
    assert (after, soft, report) == (record, None, None)


def test_the_soft_share_of_a_counted_limit_warns_once_and_past_the_limit_it_ends() -> None:
    record = task(Budget(max_tokens=100, max_cost=1.0))
    soft = soft_for(record, 0.8)
    # below the share: nothing
    record, soft, report = told(record, soft, spent(tokens=79))
    assert report is None and soft == Soft(fraction=0.8)
    # at the share of tokens: warned of tokens, with what it spent and when
    record, soft, report = told(record, soft, spent(tokens=80, at=T0 + 2))
    assert report == Warned(
        record=record, limits=("max_tokens",), usage=Usage(tokens=80), at=T0 + 2
    )
    assert soft == Soft(fraction=0.8, told=frozenset({"max_tokens"}))
    # still past it, and at the limit: nothing more
    record, soft, report = told(record, soft, spent(tokens=100))
    assert report is None
    # the cost's share passed too: only the cost is warned of
    record, soft, report = told(record, soft, spent(tokens=100, cost=0.9, at=T0 + 3))
    assert isinstance(report, Warned) and report.limits == ("max_cost",)
    # over a limit: it ends, and no warning is given beside the end
    fresh = task(Budget(max_tokens=100, max_cost=1.0))
    ended, after, report = told(fresh, soft_for(fresh, 0.8), spent(tokens=101))
    assert isinstance(report, Settled) and report.alone
    assert ended.result is not None and ended.result.reason == BUDGET_EXCEEDED
    assert after == Soft(fraction=0.8)  # not warned


def test_two_shares_passed_at_once_are_one_report_and_a_settled_task_warns_of_none() -> None:
    record = task(Budget(max_turns=10, max_tokens=100))
    _, soft, report = told(record, soft_for(record, 0.5), spent(turns=5, tokens=60))
    assert isinstance(report, Warned) and report.limits == ("max_turns", "max_tokens")
    assert soft is not None and soft.told == {"max_turns", "max_tokens"}
    cancelled, _, _ = told(record, soft_for(record, 0.5), End(event=TaskEvent.CANCEL, at=T0))
    assert cancelled.terminal
    again, same, said = told(cancelled, soft_for(record, 0.5), spent(tokens=99))
    assert (again, said) == (cancelled, None) and same == Soft(fraction=0.5)


def test_a_warning_keeps_what_the_session_asked_to_do_after_it() -> None:
    record = task(Budget(max_tokens=100))
    message = msgspec.structs.replace(spent(tokens=90), then="after")
    _, _, report = told(record, soft_for(record, 0.8), message)
    assert isinstance(report, Warned) and report.then == "after"
    # below the share: the rules' own note of it
    _, _, report = told(
        record, soft_for(record, 0.8), msgspec.structs.replace(message, usage=Usage())
    )
    assert report == Noted(record=record, then="after")
    # a message that is not what it spent: the task's rules alone
    _, _, report = told(record, soft_for(record, 0.8), Sync(then="x"))
    assert report == Noted(record=record, then="x")


def test_its_one_timer_is_the_earliest_of_its_deadline_its_minutes_and_their_soft_share() -> None:
    record = task(Budget(max_minutes=10), deadline_at=T0 + 1000)
    soft = soft_for(record, 0.8)
    assert alarm(record, soft) == T0 + 480  # the soft share of its minutes, from its start
    told_it = Soft(fraction=0.8, told=frozenset({"max_minutes"}))
    assert alarm(record, told_it) == T0 + 600  # told: their end
    assert alarm(task(None, deadline_at=T0 + 30), None) == T0 + 30
    # a queued task's minutes have not begun
    waiting = task(Budget(max_minutes=10), queued=True)
    assert alarm(waiting, soft_for(waiting, 0.8)) is None
    # a settled task has no timer
    ended, _, _ = told(record, soft, End(event=TaskEvent.CANCEL, at=T0))
    assert alarm(ended, soft) is None


def test_the_timer_warns_at_the_soft_share_and_ends_the_task_at_its_end() -> None:
    record = task(Budget(max_minutes=10))
    soft = soft_for(record, 0.8)
    usage = Usage(tokens=3)
    record, soft, report = rang(record, soft, T0 + 480, T0 + 481, usage)
    assert report == Warned(record=record, limits=("max_minutes",), usage=usage, at=T0 + 481)
    assert alarm(record, soft) == T0 + 600
    # armed for the soft share again (its mail crossed): nothing
    same, soft, report = rang(record, soft, T0 + 480, T0 + 482, usage)
    assert (same, report) == (record, None)
    record, soft, report = rang(record, soft, T0 + 600, T0 + 600, usage)
    assert isinstance(report, Settled) and report.alone
    assert record.result is not None and record.result.reason == BUDGET_EXCEEDED
    assert record.result.usage == usage
    # a deadline before the minutes' share: it times out, nothing is warned
    timed = task(Budget(max_minutes=10), deadline_at=T0 + 60)
    timed, after, report = rang(timed, soft_for(timed, 0.8), T0 + 60, T0 + 60, None)
    assert isinstance(report, Settled) and timed.result is not None
    assert timed.result.error == DEADLINE_PASSED and after == Soft(fraction=0.8)


def test_the_parent_is_told_one_notice_per_limit_naming_it() -> None:
    record = task(Budget(max_tokens=100, max_cost=1.0, max_minutes=10))
    warned = Warned(
        record=record, limits=("max_tokens", "max_cost"), usage=Usage(tokens=85, cost=0.85), at=T0
    )
    tokens, cost = notices(warned)
    assert (tokens.code, tokens.task_id, tokens.refs) == (
        "budget_soft_limit",
        record.task_id,
        ("max_tokens",),
    )
    assert "has used 85 of its 100 tokens (max_tokens)" in tokens.text
    assert cost.refs == ("max_cost",) and "0.85 of its 1 US dollars" in cost.text
    (minutes,) = notices(msgspec.structs.replace(warned, limits=("max_minutes",), at=T0 + 480))
    assert "has run 8.0 of its 10 minutes (max_minutes)" in minutes.text


@given(
    reports=st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 130), st.floats(0, 1.3)), max_size=20
    ),
    fraction=st.floats(0.1, 1.0),
)
def test_each_limit_is_warned_of_at_most_once_and_never_past_its_end(
    reports: list[tuple[int, int, float]], fraction: float
) -> None:
    record = task(Budget(max_turns=10, max_tokens=100, max_cost=1.0))
    soft = soft_for(record, fraction)
    warned: list[str] = []
    turns = tokens = 0
    cost = 0.0
    for i, (dturns, dtokens, dcost) in enumerate(reports):
        turns, tokens, cost = turns + dturns, tokens + dtokens, cost + dcost
        was_open = not record.terminal
        record, soft, report = told(record, soft, spent(tokens, cost, turns, at=T0 + i))
        if isinstance(report, Warned):
            assert was_open and not record.terminal
            warned += report.limits
    assert len(warned) == len(set(warned))
    assert soft is not None and set(warned) == soft.told
