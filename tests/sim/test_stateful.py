"""Hypothesis stateful test: random lifecycles against the session's invariants.

Rules drive three puppet agents and the parent: delegate, ask, reply, plain message, done
(every status), cancel, fail, advance time past deadlines, re-publish an envelope already
sent (a duplicate), register watchers, turn endings. After every rule the invariants hold:
legal states; waiting iff a request is open; a settled result never changes; each watcher
gets each of its tasks at most once, and only terminal ones; at most one active task per
agent; nothing settles without a done, a parent action or a deadline.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from actors.runtime.transport import PARENT_INBOX
from actors.testing import SimSession
from protocol.core.errors import ShepherdError
from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TERMINAL_STATES, TaskResult, TaskState
from tests.sim.puppet import Puppet
from tests.sim.scenarios import IDLE, broker, new_session

NAMES = ("a", "b", "c")


class Lifecycle(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**32 - 1))
    def setup(self, seed: int) -> None:
        self.session, self.sink = new_session(seed)
        for name in NAMES:
            self.session.spawn(name, script=IDLE)
        self.session.sim.run_all()
        self.puppets = {name: Puppet(self.session, name) for name in NAMES}
        self.tasks: list[str] = []
        self.settled: dict[str, TaskResult] = {}
        self.allowed_to_settle: set[str] = set()  # tasks that got a done/cancel/fail/deadline
        self.watchers: dict[str, set[str]] = {}
        for name in NAMES[:2]:  # start with work in flight so every rule has something to do
            self.tasks.append(self.s.delegate(name, "first").task_id)
        self.s.sim.run_all()

    @property
    def s(self) -> SimSession:
        return self.session

    def _settle_all(self) -> None:
        self.s.sim.run_until_idle()

    @rule(name=st.sampled_from(NAMES), timeout=st.sampled_from([None, 1.0, 5.0]))
    def delegate(self, name: str, timeout: float | None) -> None:
        try:
            self.tasks.append(self.s.delegate(name, "work", timeout_minutes=timeout).task_id)
        except ShepherdError as exc:
            assert exc.code == "agent_busy"
        self._settle_all()

    def _active(self, name: str) -> str | None:
        b = broker(self.s)
        return b.agents[b.names[name]].active_task

    @rule(sender=st.sampled_from(NAMES), to=st.sampled_from(NAMES))
    def ask(self, sender: str, to: str) -> None:
        if sender != to:
            self.puppets[sender].ask(to)
            self._settle_all()

    @rule(sender=st.sampled_from(NAMES), to=st.sampled_from((*NAMES, "shepherd")))
    def say(self, sender: str, to: str) -> None:
        if sender != to:
            self.puppets[sender].say(to)
            self._settle_all()

    @rule(data=st.data())
    def reply(self, data: st.DataObject) -> None:
        requests = [r for r in broker(self.s).requests.values() if r.sender_id != "shepherd"]
        if not requests:
            return
        req = data.draw(st.sampled_from(requests))
        b = broker(self.s)
        target_name = b.agents[req.target_id].name
        sender_name = b.agents[req.sender_id].name
        self.puppets[target_name].reply(sender_name, req.request_id)
        self._settle_all()

    @rule(
        name=st.sampled_from(NAMES),
        status=st.sampled_from(["completed", "blocked", "failed"]),
        cancel=st.booleans(),
    )
    def done(self, name: str, status: str, cancel: bool) -> None:
        task = self._active(name)
        if task is None:
            return
        record = broker(self.s).tasks[task]
        if status != "completed" or not record.pending_requests or cancel:
            self.allowed_to_settle.add(task)
        self.puppets[name].done(task, status, cancel_requests=cancel)
        self._settle_all()

    @rule(data=st.data(), how=st.sampled_from(["cancel", "fail"]))
    def parent_settles(self, data: st.DataObject, how: str) -> None:
        if not self.tasks:
            return
        task = data.draw(st.sampled_from(self.tasks))
        self.allowed_to_settle.add(task)
        result = self.s.cancel(task) if how == "cancel" else self.s.fail(task, "parent")
        assert result.task_id == task
        self._settle_all()

    @rule(seconds=st.sampled_from([1.0, 30.0, 400.0]))
    def advance(self, seconds: float) -> None:
        now = self.s.sim.vclock.now()
        for task, record in broker(self.s).tasks.items():
            if record.deadline_at is not None and record.deadline_at <= now + seconds:
                self.allowed_to_settle.add(task)
        self.s.sim.advance(seconds)

    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        sent = [e for p in self.puppets.values() for e in p.sent]
        if sent:
            self.s.transport.publish(PARENT_INBOX, data.draw(st.sampled_from(sent)))
            self._settle_all()

    @rule(name=st.sampled_from(NAMES))
    def turn_ends(self, name: str) -> None:
        self.puppets[name].runtime("turn_start")
        self.puppets[name].runtime("turn_end")
        self._settle_all()

    @rule(data=st.data())
    def watch(self, data: st.DataObject) -> None:
        if not self.tasks:
            return
        ids = data.draw(st.lists(st.sampled_from(self.tasks), min_size=1, max_size=3, unique=True))
        w = self.s.watch(ids)
        for r in w.completed:
            assert r == self.settled.get(r.task_id, r)
        self.watchers[w.watcher_id] = set(w.pending)
        self._settle_all()

    @invariant()
    def session_invariants(self) -> None:  # not `invariants`: hypothesis keeps its list there
        if not hasattr(self, "session"):
            return
        self.s.sim.run_until_idle()
        b = broker(self.s)
        active_per_agent: dict[str, int] = {}
        for task, record in b.tasks.items():
            assert record.state in TaskState
            if record.state not in TERMINAL_STATES:
                assert (record.state is TaskState.WAITING) == bool(record.pending_requests), record
                active_per_agent[record.agent_id] = active_per_agent.get(record.agent_id, 0) + 1
            else:
                assert record.result is not None
                first = self.settled.setdefault(task, record.result)
                assert first == record.result, "a settled result changed"
                assert task in self.allowed_to_settle, f"{task} settled with no cause"
        assert all(n <= 1 for n in active_per_agent.values())
        seen: dict[str, set[str]] = {}
        for note in self.sink.items:
            if isinstance(note, TaskCompletion):
                for r in note.results:
                    assert r.task_id not in seen.setdefault(note.watcher_id, set()), (
                        "double delivery"
                    )
                    seen[note.watcher_id].add(r.task_id)
                    assert r.task_id in self.watchers[note.watcher_id]
                    assert r == self.settled[r.task_id]

    def teardown(self) -> None:
        if hasattr(self, "session"):
            self.s.shutdown()


Lifecycle.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_lifecycle = Lifecycle.TestCase
