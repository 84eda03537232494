"""protocol.session.batch: delegate_many is many delegates in one call; each item refused on its
own, every record journaled before anything else, one watcher for the batch, an answer that fits
one envelope."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.calls import api, api_batch
from protocol.calls.answers import encoded_size
from protocol.core.errors import InvalidArgument, LimitExceeded
from protocol.core.limits import MAX_BATCH, answer_budget
from protocol.records.journal import WatcherRecord
from protocol.records.notifications import TaskCompletion
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord
from protocol.session.batch import largest_answer
from protocol.session.effects import Journal
from protocol.wire.envelopes import TaskEnvelope

from .harness import Session, answer, delivered, journaled, notes


def batch(*items: tuple[str, str], **kw: object) -> api_batch.DelegateManyArgs:
    return api.build_args(
        api_batch.DelegateManyArgs,
        items=[{"target": t, "task": x} for t, x in items],
        **kw,
    )


def team(n: int, **settings: object) -> tuple[Session, list[str]]:
    s = Session(Settings(**settings))  # type: ignore[arg-type]
    return s, [s.spawn(f"w{i}") for i in range(n)]


def test_every_item_is_a_delegate_and_every_record_is_journaled_before_anything_else() -> None:
    s, agents = team(3)
    effects = s.call(batch(("w0", "a"), ("w1", "b"), ("w2", "c")))
    result = answer(effects)
    assert isinstance(result, api_batch.DelegateManyResult) and result.errors == ()
    assert all(t is not None for t in result.task_ids) and len(set(result.task_ids)) == 3
    # one run of Journal effects first: the broker writes it at once, before any other effect
    kinds = [isinstance(e, Journal) for e in effects]
    assert kinds[:3] == [True] * 3 and not any(kinds[3:])
    records = journaled(effects, TaskRecord)
    assert [r.task_id for r in records] == list(result.task_ids)
    for agent_id, task_id in zip(agents, result.task_ids, strict=True):
        (env,) = delivered(effects, TaskEnvelope, agent_id)
        assert env.task_id == task_id
        assert s.state.agents[agent_id].active_task == task_id


def test_a_bad_item_among_good_ones_is_refused_alone_by_its_index() -> None:
    s, _ = team(2)
    effects = s.call(batch(("w0", "a"), ("nobody", "b"), ("w0", "again"), ("w1", "c"), ("w1", " ")))
    result = answer(effects)
    assert result.task_ids[0] is not None and result.task_ids[3] is not None
    assert result.task_ids[1] is None and result.task_ids[2] is None
    assert result.task_ids[4] is None
    codes = {e.index: e.code for e in result.errors}
    assert codes == {1: "invalid_handle", 2: "agent_busy", 4: "invalid_argument"}
    assert len(journaled(effects, TaskRecord)) == 2


def test_an_item_whose_envelope_would_not_fit_is_refused_alone() -> None:
    s, _ = team(2, max_envelope_bytes=4096)
    result = answer(s.call(batch(("w0", "x" * 8000), ("w1", "small"))))
    assert result.task_ids[0] is None and result.task_ids[1] is not None
    assert [e.code for e in result.errors] == ["limit_exceeded"]


def test_every_item_refused_changes_nothing_but_answers() -> None:
    s, _ = team(1)
    before = len(s.journal)
    result = answer(s.call(batch(("ghost", "a"), ("ghost", "b"), watch=True)))
    assert result.task_ids == (None, None) and result.watcher_id is None
    assert len(s.journal) == before and s.watchers == {}


def test_the_batch_deadline_applies_to_items_without_their_own() -> None:
    s, _ = team(2)
    args = api.build_args(
        api_batch.DelegateManyArgs,
        items=[{"target": "w0", "task": "a"}, {"target": "w1", "task": "b", "timeout_minutes": 1}],
        timeout_minutes=10,
    )
    effects = s.call(args)
    ids = answer(effects).task_ids
    armed = {t: s.deadline_armed(t) for t in ids}  # each task's actor armed its own
    assert armed == {ids[0]: s.now + 600.0, ids[1]: s.now + 60.0}


def test_watch_registers_one_watcher_of_the_accepted_tasks_journaled_with_them() -> None:
    s, agents = team(3, coalesce_ms=10.0)
    effects = s.call(batch(("w0", "a"), ("ghost", "b"), ("w1", "c"), ("w2", "d"), watch=True))
    result = answer(effects)
    accepted = tuple(t for t in result.task_ids if t is not None)
    (record,) = journaled(effects, WatcherRecord)
    assert record.watcher_id == result.watcher_id and record.ids == accepted
    assert all(isinstance(e, Journal) for e in effects[: len(accepted) + 1])
    # each result reaches the watcher exactly once
    for agent_id in agents:
        s.done(agent_id)
    s.fire_timer(("flush", result.watcher_id))
    got = [r.task_id for n in notes(s.heard, TaskCompletion) for r in n.results]
    assert got == list(accepted)
    assert result.watcher_id not in s.watchers


def test_the_call_is_refused_whole_when_its_arguments_break_a_bound() -> None:
    item = {"target": "w0", "task": "a"}
    for items in ([], [item] * (MAX_BATCH + 1), [item] * (10 * MAX_BATCH)):
        with pytest.raises(InvalidArgument, match="items"):
            api.build_args(api_batch.DelegateManyArgs, items=items)
    for bad in (float("nan"), float("inf"), -1.0, 0.0, 1e300, None):
        with pytest.raises(InvalidArgument, match="timeout_minutes"):
            api.build_args(api_batch.DelegateManyArgs, items=[{**item, "timeout_minutes": bad}])
        if bad is None:
            continue  # the call's own deadline left out: None is how the Python API says it
        with pytest.raises(InvalidArgument, match="timeout_minutes"):
            api.build_args(api_batch.DelegateManyArgs, items=[item], timeout_minutes=bad)
    with pytest.raises(InvalidArgument, match="task"):
        api.build_args(api_batch.DelegateManyArgs, items=[{"target": "w0", "task": ""}])
    with pytest.raises(InvalidArgument, match="unknown"):
        api.build_args(api_batch.DelegateManyArgs, items=[{**item, "agent": "w0"}])


def test_the_largest_answer_fits_the_default_envelope_and_a_smaller_one_refuses_first() -> None:
    assert encoded_size(largest_answer(MAX_BATCH)) <= answer_budget(Settings().max_envelope_bytes)
    s, _ = team(1, max_envelope_bytes=4096)
    args = batch(*[("w0", "a")] * 50)
    s.refuses(LimitExceeded, lambda: s.call(args))
    assert answer(s.call(batch(("w0", "a")))).task_ids[0] is not None


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=30),
    watch=st.booleans(),
)
def test_any_batch_is_the_same_as_its_items_delegated_one_by_one(
    picks: list[int], watch: bool
) -> None:
    """Agents 0-3 exist, 4-5 do not; a repeated agent is busy the second time."""
    names = [f"w{i}" for i in picks]
    s, _ = team(4)
    one, _ = team(4)
    result = answer(s.call(batch(*[(n, f"job {i}") for i, n in enumerate(names)], watch=watch)))
    for i, name in enumerate(names):
        try:
            alone = answer(one.call(api.DelegateArgs(target=name, task=f"job {i}")))
        except Exception as exc:  # refused alone: refused in the batch, with the same code
            (error,) = [e for e in result.errors if e.index == i]
            assert error.code == getattr(exc, "code", None)
            assert result.task_ids[i] is None
        else:
            assert result.task_ids[i] is not None
            assert s.state.tasks[result.task_ids[i]].agent_id == alone.agent_id
    busy = {r.agent_id for r in s.state.tasks.values()}
    assert busy == {r.agent_id for r in one.state.tasks.values()}
    accepted = [t for t in result.task_ids if t is not None]
    if watch and accepted:
        assert s.watchers[result.watcher_id].ids == tuple(accepted)
    else:
        assert result.watcher_id is None
    assert (
        msgspec.json.decode(msgspec.json.encode(result), type=api_batch.DelegateManyResult)
        == result
    )


# ------------------------------------------------------------------ spawn_many


def test_spawn_many_starts_each_name_with_the_same_options_journaled_first() -> None:
    s = Session()
    s.spawn("taken")
    args = api.build_args(
        api_batch.SpawnManyArgs,
        names=["w0", "Bad Name", "taken", "w1", "w0"],
        adapter="command",
        cmd="echo {message}",
    )
    effects = s.call(args)
    result = answer(effects)
    assert isinstance(result, api_batch.SpawnManyResult)
    ids = result.agent_ids
    assert ids[0] and ids[3] and ids[1] is None and ids[2] is None and ids[4] is None
    assert [(e.index, e.code) for e in result.errors] == [
        (1, "invalid_argument"),
        (2, "invalid_argument"),
        (4, "invalid_argument"),
    ]
    assert [isinstance(e, Journal) for e in effects[:2]] == [True, True]
    assert not any(isinstance(e, Journal) for e in effects[2:])
    for agent_id in (ids[0], ids[3]):
        row = s.state.agents[agent_id]
        assert row.adapter == "command" and row.options["cmd"] == "echo {message}"


def test_spawn_many_refuses_hostile_calls_whole() -> None:
    for names in ([], ["w"] * (MAX_BATCH + 1), [""], ["w" * 201]):
        with pytest.raises(InvalidArgument, match="names"):
            api.build_args(api_batch.SpawnManyArgs, names=names)
    with pytest.raises(InvalidArgument, match="cwd"):
        api.build_args(api_batch.SpawnManyArgs, names=["w"], cwd="")
    s = Session(Settings(max_envelope_bytes=4096))
    args = api.build_args(api_batch.SpawnManyArgs, names=[f"w{i}" for i in range(60)])
    s.refuses(LimitExceeded, lambda: s.call(args))
