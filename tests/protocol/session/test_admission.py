"""Admission (protocol.session.admission): at most ``max_running`` tasks handed over at once,
the rest queued in order, a freed slot filled at once; per-provider caps; the queue survives a
restart; and Hypothesis properties over any sequence of delegations and endings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.calls import api, api_batch
from protocol.core.errors import InvalidArgument
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session import admission, status
from protocol.session import task as one_task
from protocol.session.effects import TellTask
from protocol.wire.envelopes import ControlEnvelope, TaskDoneEnvelope, TaskEnvelope

from .harness import Session, answer, delivered, journaled, of
from .test_restore import restart

HOLDING = (TaskState.RUNNING, TaskState.WAITING, TaskState.VERIFYING)


def team(n: int, **caps: object) -> tuple[Session, list[str]]:
    s = Session(Settings(**caps))  # type: ignore[arg-type]
    return s, [s.spawn(f"a{i}") for i in range(n)]


def holding(s: Session) -> list[str]:
    return [t for t, r in s.state.tasks.items() if r.state in HOLDING]


def queued(s: Session) -> list[str]:
    return [key[2] for key in s.state.queue]


def test_without_a_cap_nothing_is_queued() -> None:
    s, _ = team(3)
    for i in range(3):
        s.delegate(f"a{i}")
    assert len(holding(s)) == 3 and not s.state.queue
    assert sorted(s.state.admitted) == sorted(holding(s))  # counted: a node's cap may come


def test_a_nodes_cap_queues_its_agents_tasks_only_and_a_raised_cap_starts_them() -> None:
    s = Session(Settings())
    on_node = [answer(s.call(api.SpawnArgs(name=f"n{i}", node="n1"))).agent_id for i in range(3)]
    s.spawn("here")
    first = s.delegate("n0")  # handed over before the node's cap was heard: still counted
    effects = s.run(
        admission.node_cap(s.state, admission.NodeCap(node="n1", max_running=2), s.ctx())
    )
    assert of(effects, TellTask) == []  # nothing queued yet
    second = s.delegate("n1")
    third = s.delegate("n2")
    assert queued(s) == [third] and s.state.tasks[second].state is TaskState.RUNNING
    s.delegate("here")  # another host's agent: not counted against n1
    assert queued(s) == [third]
    summary = status.view(s.state, None, s.now).summary
    assert summary is not None and summary.node_caps == {"n1": 2}
    # the node's cap raised: the queued task starts at once
    effects = s.run(
        admission.node_cap(s.state, admission.NodeCap(node="n1", max_running=3), s.ctx())
    )
    assert [e.task_id for e in of(effects, TellTask)] == [third]
    assert s.state.tasks[third].state is TaskState.RUNNING
    # heard again unchanged: nothing; and a node that drops its cap holds none any more
    assert admission.node_cap(s.state, admission.NodeCap(node="n1", max_running=3), s.ctx()) == []
    admission.node_cap(s.state, admission.NodeCap(node="n1"), s.ctx())
    assert s.state.node_caps == {} and not admission.enabled(s.state)
    assert first in s.state.admitted and on_node[0] == s.state.tasks[first].agent_id


def test_a_task_beyond_the_cap_is_queued_journaled_and_not_handed_over() -> None:
    s, agents = team(3, max_running=2)
    s.delegate("a0")
    s.delegate("a1")
    effects = s.call(api.DelegateArgs(target="a2", task="third"))
    result = answer(effects)
    assert result.queued and result.queue_place == 1
    record = s.state.tasks[result.task_id]
    assert record.state is TaskState.QUEUED
    assert [r.state for r in journaled(effects, TaskRecord)] == [TaskState.QUEUED]
    assert delivered(effects, TaskEnvelope, agents[2]) == []
    (row,) = status.view(s.state, "a2", s.now).agents
    assert row.task is not None and row.task.queue_place == 1
    summary = status.view(s.state, None, s.now).summary
    assert summary is not None and (summary.running, summary.queued) == (2, 1)
    assert summary.max_running == 2


def test_a_freed_slot_starts_the_next_which_is_journaled_running_and_handed_over() -> None:
    s, agents = team(3, max_running=2)
    first = s.delegate("a0")
    s.delegate("a1")
    third = s.delegate("a2")
    s.now += 5.0
    effects = s.done(agents[0])
    assert s.state.tasks[first].state is TaskState.COMPLETED
    assert [e.task_id for e in of(effects, TellTask) if isinstance(e.message, one_task.Start)] == [
        third
    ]
    record = s.state.tasks[third]
    assert record.state is TaskState.RUNNING and record.started_at == s.now
    assert [r.state for r in journaled(effects, TaskRecord) if r.task_id == third] == [
        TaskState.RUNNING
    ]
    assert [e.task_id for e in delivered(effects, TaskEnvelope, agents[2])] == [third]
    assert sorted(holding(s)) == sorted(s.state.admitted) and not s.state.queue


def test_priority_first_then_first_queued_first() -> None:
    s, agents = team(4, max_running=1)
    s.delegate("a0")
    b = s.delegate("a1")
    c = s.delegate("a2", priority=5)
    d = s.delegate("a3")
    assert queued(s) == [c, b, d]
    started: list[str] = []
    running = agents[0]
    for _ in range(3):  # each one's end starts the next
        (env,) = delivered(s.done(running), TaskEnvelope)
        started.append(env.task_id)
        running = s.state.tasks[env.task_id].agent_id
    assert started == [c, b, d]


def test_a_queued_task_cancelled_or_failed_leaves_the_queue_and_its_agent_is_not_told() -> None:
    s, agents = team(3, max_running=1)
    s.delegate("a0")
    b = s.delegate("a1")
    c = s.delegate("a2")
    effects = s.call(api.CancelArgs(task_id=b, reason="not now"))
    assert s.state.tasks[b].state is TaskState.CANCELLED
    assert delivered(effects, ControlEnvelope) == [] and queued(s) == [c]
    effects = s.call(api.FailArgs(task_id=c, error="wrong plan"))
    assert s.state.tasks[c].state is TaskState.FAILED and not s.state.queue
    assert delivered(effects, ControlEnvelope) == []
    # the agent's own done is refused: it never had the task
    d = s.delegate("a1")
    s.send_refused(
        s.envelope(TaskDoneEnvelope, agents[1], status="completed"), "invalid_transition"
    )
    assert s.state.tasks[d].state is TaskState.QUEUED


def test_the_deadline_counts_from_delegate_unless_from_start() -> None:
    s, agents = team(3, max_running=1)
    s.delegate("a0")
    waits = s.delegate("a1", timeout_minutes=1)
    assert ("deadline", waits) in s.timers  # counts while queued
    s.pass_deadline(waits)
    assert s.state.tasks[waits].state is TaskState.TIMED_OUT
    later = s.delegate("a2", timeout_minutes=1, timeout_from="start")
    assert s.state.tasks[later].deadline_at is None and ("deadline", later) not in s.timers
    s.now += 100.0
    effects = s.done(agents[0])
    record = s.state.tasks[later]
    assert record.state is TaskState.RUNNING and record.deadline_at == s.now + 60.0
    assert s.deadline_armed(later) == s.now + 60.0  # its actor armed it as it started
    (env,) = delivered(effects, TaskEnvelope, agents[2])
    assert env.deadline_at == s.now + 60.0


def test_budgets_apply_when_it_starts() -> None:
    s, agents = team(2, max_running=1)
    s.delegate("a0")
    task_id = s.delegate("a1", max_minutes=2)
    assert s.deadline_armed(task_id) is None  # queued: its minutes do not run
    s.now += 500.0
    s.done(agents[0])
    started = s.now
    # its actor's own timer: the soft share of its minutes first, then their end
    assert s.deadline_armed(task_id) == pytest.approx(started + 96.0)
    s.ring(task_id)
    assert s.deadline_armed(task_id) == started + 120.0


def test_a_cap_per_provider_beside_the_sessions() -> None:
    s = Session(Settings(max_running_per_provider={"p1": 1}))
    for name, provider in (("x", "p1"), ("y", "p1"), ("z", "p2")):
        s.call(api.SpawnArgs(name=name, adapter="pi-rpc", provider=provider))
    x = s.delegate("x")
    y = s.delegate("y")
    z = s.delegate("z")
    states = {t: s.state.tasks[t].state for t in (x, y, z)}
    assert states == {x: TaskState.RUNNING, y: TaskState.QUEUED, z: TaskState.RUNNING}
    s.call(api.CancelArgs(task_id=x))
    assert s.state.tasks[y].state is TaskState.RUNNING


def test_delegate_many_queues_the_same_way_in_item_order() -> None:
    s, _ = team(4, max_running=2)
    items = tuple(api_batch.DelegateItem(target=f"a{i}", task=f"t{i}") for i in range(4))
    result = answer(s.call(api_batch.DelegateManyArgs(items=items)))
    states = [s.state.tasks[t].state for t in result.task_ids]
    assert states == [TaskState.RUNNING] * 2 + [TaskState.QUEUED] * 2
    assert queued(s) == list(result.task_ids[2:])


def test_a_start_that_meets_a_settled_task_gives_the_slot_to_the_next() -> None:
    record = TaskRecord(
        task_id="t", agent_id="a", description="d", created_at=0.0, state=TaskState.CANCELLED
    )
    after, report = one_task.receive(record, one_task.Start(at=1.0, then=admission.Started()))
    assert after is record and isinstance(report, one_task.Noted)


def test_the_queue_and_its_order_survive_a_restart_and_a_larger_cap_fills_it() -> None:
    s, _ = team(5, max_running=1)
    s.delegate("a0")
    order = [s.delegate(f"a{i}", priority=p) for i, p in ((1, 0), (2, 3), (3, 0), (4, 3))]
    expected = [order[1], order[3], order[0], order[2]]
    assert queued(s) == expected
    t, _ = restart(s)
    assert [key[2] for key in t.state.queue] == expected
    assert all(t.state.tasks[x].state is TaskState.QUEUED for x in expected)
    # a new parent with a cap of three starts the first two at once, in order
    s.state.settings = Settings(max_running=3)
    u, effects = restart(s)
    started = [e.task_id for e in delivered(effects, TaskEnvelope) if e.task_id in expected]
    assert started == expected[:2]
    assert [key[2] for key in u.state.queue] == expected[2:]
    # the next one queued after the restart goes after them
    u.call(api.CancelArgs(task_id=expected[2]))
    assert u.state.queue_seq > max(u.state.tasks[x].queue_seq for x in expected)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (["p1"], "not PROVIDER=N"),
        (["p1=0"], "1 to 1000000"),
        (["p1=abc"], "whole number"),
        (["a b=2"], "provider name"),
        ([f"{'x' * 70}=1"], "provider name"),
    ],
)
def test_per_provider_caps_refuse_hostile_values(values: list[str], words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        admission.parse_caps(values)
    assert admission.parse_caps(["openai=4", "local.llm=1"]) == {"openai": 4, "local.llm": 1}


# ------------------------------------------------------------------ properties

STEP = st.one_of(
    st.tuples(st.just("delegate"), st.integers(0, 5), st.integers(-2, 2)),
    st.tuples(st.just("done"), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("cancel"), st.integers(0, 5), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(cap=st.integers(1, 3), steps=st.lists(STEP, max_size=40))
def test_never_more_than_the_cap_and_a_free_slot_never_idles_and_fifo_within_a_priority(
    cap: int, steps: list[tuple[str, int, int]]
) -> None:
    s, agents = team(6, max_running=cap)
    started_order: list[str] = []
    for kind, who, priority in steps:
        agent = agents[who]
        row = s.state.agents[agent]
        before = set(holding(s))
        if kind == "delegate" and row.active_task is None:
            s.delegate(f"a{who}", priority=priority)
        elif kind == "done" and row.active_task is not None:
            if s.state.tasks[row.active_task].state in HOLDING:
                s.done(agent)
        elif kind == "cancel" and row.active_task is not None:
            s.call(api.CancelArgs(task_id=row.active_task))
        started_order += sorted(set(holding(s)) - before)
        # never more than the cap; a free slot never idles while something waits
        assert len(holding(s)) <= cap
        if s.state.queue:
            assert len(holding(s)) == cap
        assert sorted(holding(s)) == sorted(s.state.admitted)
        # the queue is in its order: priority first, then first queued
        records = [s.state.tasks[key[2]] for key in s.state.queue]
        assert records == sorted(records, key=lambda r: (-r.priority, r.queue_seq))
    # within one priority, the first queued started first
    by_priority: dict[int, list[int]] = {}
    for task_id in started_order:
        record = s.state.tasks[task_id]
        if record.queue_seq:  # it was queued (0: handed over at its delegation)
            by_priority.setdefault(record.priority, []).append(record.queue_seq)
    for seqs in by_priority.values():
        assert seqs == sorted(seqs)
