"""The session's rules under random programs: after every step the state keeps the promises of
``protocol.session.state`` and every effect list is well formed.

A Hypothesis state machine drives random sequences of the parent's operations, agents'
envelopes, process exits, failed deliveries, timers (armed ones and stale ones) and parent
restarts through the rules. :class:`~tests.protocol.session.harness.Session` checks each
effect list (a journal record before what tells of it, one answer and last, a task settled
once, nothing sent to a closed agent) and the state's invariants (names, subscribers and
pending requests agree with what they index; one active task per agent). Here, on top: a
refused operation raises a typed error and changes nothing, a refused envelope gets one
refusing receipt and changes nothing, each watcher gets each result once, in the order it
named the ids, and the fold of the journal always agrees with the live state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from protocol.calls import api
from protocol.core.errors import ErrorInfo, ShepherdError
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import StaleWait, TaskCompletion
from protocol.records.settings import Settings
from protocol.session import agents, calls, inbound, watchers
from protocol.session.effects import Deliver, Effect, Publish, TellTask, TimerEvent
from protocol.session.restore import Restore, fold, resume
from protocol.session.state import SessionState
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)

from .harness import SESSION, Session, TaskDue, check_invariants, snapshot

NAMES = ("a", "b", "c")
BOGUS_TASK = "shepherd-task-0badc0de"
BOGUS_REQUEST = "shepherd-message-0badc0de"

index = st.integers(min_value=0, max_value=7)
timeouts = st.sampled_from([None, 5.0, 60.0])


def pick(items: list[str], i: int) -> str | None:
    return items[i % len(items)] if items else None


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = Session(
            Settings(stale_wait_threshold_s=20.0, coalesce_ms=10.0, closed_requests_kept=4)
        )
        self.requests: list[str] = []  # every request id ever opened
        self.sent: list[TaskEnvelope | MessageEnvelope | ReplyEnvelope] = []
        self.fired: list[TimerEvent | TaskDue] = []
        self.handed: set[tuple[str, str]] = set()  # (watcher, task) results handed over
        self.seen = 0  # notifications of s.heard already looked at

    # ------------------------------------------------------------------ how a step is run

    @property
    def state(self) -> SessionState:
        return self.s.state

    def agents(self) -> list[str]:
        return list(self.state.agents)

    def live(self) -> list[str]:
        return [a for a, row in self.state.agents.items() if not row.closed]

    def step(self, rule: Callable[[], list[Effect]]) -> list[Effect] | None:
        """A parent's operation or a runtime event: applied, or refused changing nothing."""
        before = snapshot(self.state)
        try:
            effects = rule()
        except ShepherdError:
            assert snapshot(self.state) == before
            return None
        self.keep(self.s.run(effects))
        return effects

    def send(self, env: AnyEnvelope) -> None:
        """An agent's envelope: one receipt (in the inbox it named); a refusal changes nothing."""
        before = snapshot(self.state, activity=False)
        effects = self.s.send(env)
        self.keep(effects)
        if isinstance(env, RuntimeEnvelope):
            return
        acks = [e.envelope for e in effects if isinstance(e, Publish)]
        assert len(acks) == 1, effects
        ack = acks[0]
        assert isinstance(ack, AckEnvelope) and ack.ack_for == env.message_id
        if not ack.accepted:
            assert ack.error is not None
            # besides its receipt, only the ending routed to the task (which refused it)
            told = [e for e in effects if not isinstance(e, TellTask)]
            assert told == [effects[-1]] and snapshot(self.state, activity=False) == before

    def keep(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Deliver) and isinstance(
                e.envelope, TaskEnvelope | MessageEnvelope | ReplyEnvelope
            ):
                self.sent.append(e.envelope)
        for r in self.state.requests.pending():
            if r.request_id not in self.requests:
                self.requests.append(r.request_id)

    def agent_env(self, cls: type[Any], sender: str, target: str, **fields: Any) -> Any:
        return self.s.envelope(cls, sender, target, reply_inbox="receipts", **fields)

    # ------------------------------------------------------------------ the parent

    @initialize()
    def a_team_at_work(self) -> None:
        for name in NAMES:
            self.spawn(name)
            self.delegate(len(self.state.agents) - 1, None, prompt=False)

    @rule(name=st.sampled_from(NAMES))
    def spawn(self, name: str) -> None:
        self.step(lambda: calls.call(self.state, api.SpawnArgs(name=name), self.s.ctx()))

    @rule(i=index, minutes=st.sampled_from([None, 1.0]), prompt=st.booleans())
    def delegate(self, i: int, minutes: float | None, prompt: bool) -> None:
        target = pick(self.agents(), i) or "a"
        args: Any = (
            api.PromptArgs(target=target, prompt="p", timeout_minutes=minutes)
            if prompt
            else api.DelegateArgs(target=target, task="t", timeout_minutes=minutes)
        )
        self.step(lambda: calls.call(self.state, args, self.s.ctx()))

    @rule(i=index, asks=st.booleans(), timeout=timeouts, j=index, reply=st.booleans())
    def parent_message(
        self, i: int, asks: bool, timeout: float | None, j: int, reply: bool
    ) -> None:
        target = pick(self.agents(), i) or "a"
        reply_to = pick(self.requests, j) if reply else None
        args = api.MessageArgs(
            target=target,
            message="m",
            expects_reply=asks and reply_to is None,
            reply_timeout_s=timeout,
            reply_to=reply_to,
        )
        self.step(lambda: calls.call(self.state, args, self.s.ctx()))

    @rule(i=index, cancel=st.booleans(), bogus=st.booleans())
    def settle(self, i: int, cancel: bool, bogus: bool) -> None:
        task_id = BOGUS_TASK if bogus else pick(list(self.state.tasks), i) or BOGUS_TASK
        args: Any = (
            api.CancelArgs(task_id=task_id) if cancel else api.FailArgs(task_id=task_id, error="e")
        )
        self.step(lambda: calls.call(self.state, args, self.s.ctx()))

    @rule(i=index)
    def close(self, i: int) -> None:
        target = pick(self.agents(), i) or "a"
        self.step(lambda: calls.call(self.state, api.CloseArgs(agent=target), self.s.ctx()))

    @rule(ids=st.lists(index, min_size=1, max_size=3), journaled=st.booleans())
    def watch(self, ids: list[int], journaled: bool) -> None:
        tasks = list(self.state.tasks)
        named = [pick(tasks, i) or BOGUS_TASK for i in ids]
        self.step(lambda: watchers.watch(self.state, named, self.s.ctx(), journaled=journaled))

    # ------------------------------------------------------------------ agents

    @rule(i=index, j=index, asks=st.booleans(), timeout=timeouts, own_task=st.booleans())
    def agent_message(
        self, i: int, j: int, asks: bool, timeout: float | None, own_task: bool
    ) -> None:
        everyone = self.agents()
        sender = pick(everyone, i)
        if sender is None:
            return
        target = pick([*everyone, PARENT_ID], j) or PARENT_ID
        task_id = pick(list(self.state.tasks), j) if own_task else None
        env = self.agent_env(
            MessageEnvelope,
            sender,
            target,
            content="q",
            expects_reply=asks,
            reply_timeout_s=timeout,
            task_id=task_id,
        )
        self.send(env)

    @rule(i=index, j=index, timeout=timeouts)
    def ask(self, i: int, j: int, timeout: float | None) -> None:
        """A live agent asks another live agent or the parent (the common case)."""
        live = self.live()
        sender = pick(live, i)
        if sender is None:
            return
        others = [a for a in live if a != sender] + [PARENT_ID]
        target = others[j % len(others)]
        self.send(
            self.agent_env(
                MessageEnvelope,
                sender,
                target,
                content="q",
                expects_reply=True,
                reply_timeout_s=timeout,
            )
        )

    @rule(j=index)
    def answer(self, j: int) -> None:
        """The asked one answers a pending question (the parent too)."""
        pending = self.state.requests.pending()
        if not pending:
            return
        request = pending[j % len(pending)]
        if request.target_id == PARENT_ID:
            asker = request.sender_id
            args = api.MessageArgs(target=asker, message="r", reply_to=request.request_id)
            self.step(lambda: calls.call(self.state, args, self.s.ctx()))
            return
        target = request.sender_id
        env = self.agent_env(
            ReplyEnvelope, request.target_id, target, content="r", reply_to=request.request_id
        )
        self.send(env)

    @rule(i=index, j=index, elsewhere=st.booleans())
    def agent_reply(self, i: int, j: int, elsewhere: bool) -> None:
        request_id = pick(self.requests, j) or BOGUS_REQUEST
        request = self.state.requests.get(request_id)
        sender = (
            request.target_id
            if request is not None and request.target_id != PARENT_ID and not elsewhere
            else pick(self.agents(), i)
        )
        if sender is None:
            return
        target = request.sender_id if request is not None and not elsewhere else PARENT_ID
        if target == sender:
            target = PARENT_ID
        self.send(self.agent_env(ReplyEnvelope, sender, target, content="r", reply_to=request_id))

    @rule(
        i=index,
        status=st.sampled_from(["completed", "blocked", "failed"]),
        cancel=st.booleans(),
        name_it=st.booleans(),
    )
    def done(self, i: int, status: str, cancel: bool, name_it: bool) -> None:
        sender = pick(self.agents(), i)
        if sender is None:
            return
        task_id = pick(list(self.state.tasks), i) if name_it else None
        env = self.agent_env(
            TaskDoneEnvelope,
            sender,
            PARENT_ID,
            status=status,
            cancel_requests=cancel,
            task_id=task_id,
        )
        self.send(env)

    @rule(i=index, event=st.sampled_from(["ready", "turn_start", "turn_end", "output"]))
    def runtime(self, i: int, event: str) -> None:
        agent_id = pick(self.agents(), i)
        if agent_id is not None:
            self.send(self.agent_env(RuntimeEnvelope, agent_id, PARENT_ID, event=event, text="x"))

    @rule(i=index, code=st.sampled_from([None, 0, 1]))
    def exit(self, i: int, code: int | None) -> None:
        agent_id = pick(self.agents(), i)
        if agent_id is not None:
            self.step(lambda: agents.exited(self.state, agent_id, code, self.s.ctx(), reason="r"))

    @rule(i=index)
    def not_delivered(self, i: int) -> None:
        if self.sent:
            env = self.sent[i % len(self.sent)]
            error = ErrorInfo(code="limit_exceeded", message="inbox full")
            self.step(lambda: inbound.delivery_failed(self.state, env, error, self.s.ctx()))

    # ------------------------------------------------------------------ time and restarts

    @rule(dt=st.sampled_from([0.0, 1.0, 10.0, 30.0]))
    def tick(self, dt: float) -> None:
        self.s.now += dt

    @rule(i=index)
    def fire(self, i: int) -> None:
        keys = sorted(self.s.timers)
        if keys:
            event = self.s.timers.pop(keys[i % len(keys)])
            self.fired.append(event)
            self.step(lambda: self.s.fired(event))

    @rule(i=index)
    def fire_again(self, i: int) -> None:
        """A timer event that may no longer apply (the broker's cancel can race it)."""
        if self.fired:
            event = self.fired[i % len(self.fired)]
            self.step(lambda: self.s.fired(event))

    @rule()
    def restart(self) -> None:
        old = self.s
        delivered: dict[str, set[str]] = {}
        noticed: dict[str, set[str]] = {}
        for told in old.heard:
            if old.to_parent(told) and isinstance(told.note, TaskCompletion):
                got = delivered.setdefault(told.note.watcher_id, set())
                got.update(r.task_id for r in told.note.results)
            if isinstance(told.note, StaleWait):
                noticed.setdefault(told.note.task_id, set()).add(told.note.request_id)
        new = Session(old.state.settings, now=old.now)
        new.ids = old.ids
        new.journal, new.heard, new.settled = old.journal, old.heard, old.settled
        new.state = fold(old.journal, SessionState(SESSION, old.state.settings))
        # a wait caller's watcher is not journaled: it goes with the old parent
        restore = Restore(state=new.state, delivered=delivered, stale_noticed=noticed)
        self.s = new
        self.keep(new.run(resume(restore, new.ctx())))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def the_state_keeps_its_promises(self) -> None:
        check_invariants(self.state)

    @invariant()
    def each_watcher_gets_each_result_once_in_the_order_it_named_them(self) -> None:
        for told in self.s.heard[self.seen :]:
            note = told.note
            if isinstance(note, TaskCompletion):
                got = [r.task_id for r in note.results]
                assert got == [t for t in note.ids if t in got]
                for task_id in got:
                    assert (note.watcher_id, task_id) not in self.handed
                    self.handed.add((note.watcher_id, task_id))
                assert set(note.pending).isdisjoint(got)
        self.seen = len(self.s.heard)

    @invariant()
    def the_fold_of_the_journal_agrees_with_the_state(self) -> None:
        folded = fold(self.s.journal, SessionState(SESSION, self.state.settings))
        assert folded.tasks == self.state.tasks
        assert dict(folded.requests.items()) == dict(self.state.requests.items())
        assert folded.prompts == self.state.prompts
        assert folded.names == self.state.names
        for agent_id, row in self.state.agents.items():
            again = folded.agents[agent_id]
            assert again.active_task == row.active_task
            assert again.exit_code == row.exit_code and again.pid == row.pid
            # a close is not journaled until the process exits (test_restore pins the gap)
            if row.process_state == "exited":
                assert again.closed == row.closed
        for task_id, episode in self.state.stale.items():
            assert (folded.stale[task_id].since, folded.stale[task_id].requests) == (
                episode.since,
                episode.requests,
            )


TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
