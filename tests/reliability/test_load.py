"""Load: 50 agents x 200 messages each, a quarter of them requests that get replies, while tasks
settle and watchers register — then the supervisor's memory must come back to its baseline.

Runtime: the production :class:`~actors.runtime.runtime.ThreadedRuntime` (a worker pool, real
threads)
with the :class:`~actors.runtime.transport.InMemoryTransport` and simulated scripted agents. Why
not the simulation: the claims under test — exactly once, per-sender order, nothing left behind —
are about concurrency, and only real threads publishing at once (100 of them here) and a
worker pool interleaving actors exercise them; the mailbox is left out so that what is measured
is the supervisor, not the file system (the mailbox has load tests of its own).

Memory: the full-size round is measured structurally (the broker's per-message tables, live
actors, pending timers, allocated blocks); a second, smaller round (50 x 40) runs under
``tracemalloc`` and its retained growth must stay under what is kept by design (each task's
record and result) plus a small constant. A measured round over that is measured once more,
and the second decides: what the supervisor keeps of a round, every round keeps, while a
table of the whole process (sized by every test run before this one) grows once. The
smaller size is deliberate: ``tracemalloc`` slows this allocation-heavy, 100-thread workload
6-10 times, and a 50 x 200 round traced takes about a minute on two cores. Agent-side
simulation code (the simulated agents' scripts and received lists) is cleared or filtered
out: it is the children's memory, not the parent's.
"""

from __future__ import annotations

import gc
import linecache
import random
import sys
import threading
import time
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from actors.child.scripted import ScriptedDriver
from actors.records.notes import FileTaskNotes
from actors.runtime.clock import SystemClock
from actors.runtime.inbox import RuntimeInbox
from actors.runtime.runtime import ShepherdActor, ThreadedRuntime
from actors.runtime.transport import PARENT_INBOX, InMemoryTransport
from actors.session.agent import AgentSpec
from actors.session.broker import BrokerActor
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.session.task_actor import TaskActor
from actors.testing.simagent import SimLauncher
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import AnyNotification, TaskCompletion
from protocol.records.settings import Settings
from protocol.scripted.script import parse_script
from protocol.session.state import SessionState
from protocol.watchdog.config import WatchdogConfig
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope, ReplyEnvelope, TaskDoneEnvelope

AGENTS = 50
MESSAGES = 200
TRACED_MESSAGES = 40
REQUEST_EVERY = 4
WATCHERS = 25
#: retained per settled task by design (its record and result stay queryable)
PER_TASK_BYTES = 3 * 1024
#: everything else a round may leave behind (caches warming up, interned strings)
CONSTANT_BYTES = 96 * 1024
DEADLINE_S = 120.0

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}
#: the interpreter's table of interned strings is one block for the whole process; pathlib
#: interns each part of a path, so the table's doubling is charged to pathlib's intern call
#: (once 3.7 MiB, in a loaded random-order run of the whole suite: the suite's paths, not
#: this round's). A block that big at such a line is that table, never what the round kept.
INTERNED_TABLE_BYTES = 1024 * 1024


def interned_table(diff: tracemalloc.StatisticDiff) -> bool:
    """Whether ``diff`` is the interned strings' table growing (one new block, over a MiB,
    allocated by a call of ``sys.intern``)."""
    frame = diff.traceback[0]
    return (
        diff.count_diff == 1
        and diff.size_diff > INTERNED_TABLE_BYTES
        and "sys.intern(" in linecache.getline(frame.filename, frame.lineno)
    )


AGENT_SIDE = (
    "*/actors/child/scripted.py",
    "*/protocol/scripted/script.py",
    "*/protocol/scripted/script_machine.py",
    "*/actors/testing/simagent.py",
)


class NullJournal:
    """The on-disk journal is what keeps history in production; here only count records."""

    def __init__(self) -> None:
        self.count = 0

    def append(self, record: Any) -> None:
        self.count += 1


class News:
    """A condition that the rig's observers announce every change on (an agent launched, an
    actor stopped, the timer heap touched), for the test to wait on instead of polling."""

    def __init__(self) -> None:
        self._cond = threading.Condition()

    def announce(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = DEADLINE_S) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout=timeout)


class _AnnouncingSink(CollectingSink):
    """The session's sink, announcing each notification: a watcher is forgotten just before
    its last notification leaves for the sink, so the test sees it gone on this news."""

    def __init__(self, news: News) -> None:
        super().__init__()
        self._news = news

    def __call__(self, note: AnyNotification) -> None:
        super().__call__(note)
        self._news.announce()


class _AnnouncingCondition(threading.Condition):
    """A clock's lock: every time it is let go (the heap was pushed, popped or compacted
    under it) or its timer thread goes back to sleep, the news is announced."""

    def __init__(self, news: News) -> None:
        super().__init__()
        self._news = news

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._news.announce()

    def wait(self, timeout: float | None = None) -> bool:
        self._news.announce()
        return super().wait(timeout)


class ObservedClock(SystemClock):
    """The production clock, announcing every change of its timer heap."""

    def __init__(self, news: News) -> None:
        super().__init__()
        assert isinstance(self._cond, threading.Condition), "SystemClock changed: fix the test"
        self._cond = _AnnouncingCondition(news)

    @property
    def pending(self) -> int:
        """Timers in the heap (live, or cancelled and not dropped yet)."""
        return len(self._heap)


class ObservedRuntime(ThreadedRuntime):
    """The production runtime, announcing every actor that stops."""

    def __init__(self, news: News) -> None:
        super().__init__(clock=ObservedClock(news))
        self._news = news

    def untrack(self, actor: ShepherdActor) -> None:
        super().untrack(actor)
        self._news.announce()


class Inbox(list[AnyEnvelope]):
    """A simulated agent's ``received`` list (its driver appends what it is handed, on the
    agent's worker thread), under a condition the agent's sender and replier wait on. Messages
    are also counted into :class:`Traffic`, which paces the watchers."""

    def __init__(self, traffic: Traffic) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._traffic = traffic
        self.replies = 0

    def append(self, env: AnyEnvelope) -> None:
        with self._cond:
            super().append(env)
            self.replies += isinstance(env, ReplyEnvelope)
            self._cond.notify_all()
        if isinstance(env, MessageEnvelope):
            self._traffic.delivered()

    def clear(self) -> None:
        with self._cond:
            super().clear()
            self.replies = 0

    def wait_replies(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.replies >= count, timeout=timeout)

    def wait_beyond(self, position: int, timeout: float) -> list[AnyEnvelope]:
        """What arrived after the first ``position`` items (waiting for at least one)."""
        with self._cond:
            self._cond.wait_for(lambda: len(self) > position, timeout=timeout)
            return self[position:]


class Traffic:
    """How many messages the agents have been handed, to wait for progress on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.messages = 0

    def delivered(self) -> None:
        with self._cond:
            self.messages += 1
            self._cond.notify_all()

    def wait_for(self, messages: int, timeout: float = DEADLINE_S) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.messages >= messages, timeout=timeout)


class RecordingLauncher(SimLauncher):
    """Keeps each agent's spec (the test publishes as the agent, with its capability) and
    announces each launch."""

    def __init__(self, news: News, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.specs: dict[str, AgentSpec] = {}
        self._news = news

    def launch(self, spec: AgentSpec, on_exit: Any) -> Any:
        self.specs[spec.name] = spec
        handle = super().launch(spec, on_exit)
        self._news.announce()
        return handle


@dataclass
class Round:
    number: int
    messages: int
    plan: dict[str, list[tuple[str, bool]]]
    tasks: dict[str, str] = field(default_factory=dict)
    sent: dict[str, list[MessageEnvelope]] = field(default_factory=lambda: defaultdict(list))
    replies: dict[str, list[ReplyEnvelope]] = field(default_factory=lambda: defaultdict(list))
    dones: dict[str, TaskDoneEnvelope] = field(default_factory=dict)
    watchers: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Rig:
    def __init__(self, artifacts: Path) -> None:
        self.news = News()
        self.traffic = Traffic()
        self.runtime = ObservedRuntime(self.news)
        self.sink = _AnnouncingSink(self.news)
        self.settings = Settings(
            dedup_window=2_000,
            # smaller than one traced round's 500 requests, so the first traced round turns it
            # over (like the dedup window); its default is checked by the protocol tests
            closed_requests_kept=200,
            stale_wait_threshold_s=0.5,  # dead stale-wait timers drain quickly after a round
            watchdog=WatchdogConfig(max_events_per_agent=50),
        )
        self.transport = InMemoryTransport(self.settings)
        self.launcher = RecordingLauncher(self.news, self.runtime, self.transport)
        self.session = Session(
            self.runtime,
            self.transport,
            self.launcher,
            settings=self.settings,
            sink=self.sink,
            journal=NullJournal(),
            # the notes on disk, as a real session keeps them (in memory, each note's lines
            # would count as retained by the session)
            notes=FileTaskNotes(artifacts),
        )
        self.names = [f"a{i:02d}" for i in range(AGENTS)]
        script = parse_script(IDLE)
        for name in self.names:
            self.launcher.scripts[name] = script
            self.session.spawn(name)
        assert self.news.wait_until(
            lambda: len(self.launcher.agents) == AGENTS and self._all_drivers()
        )
        self.drivers: dict[str, ScriptedDriver] = {n: self._driver(n) for n in self.names}
        # nothing is sent to an agent before its first task: its list is still empty and
        # can be swapped for one that can be waited on
        self.inboxes: dict[str, Inbox] = {}
        for name, driver in self.drivers.items():
            assert driver.received == [], (name, driver.received)
            self.inboxes[name] = driver.received = Inbox(self.traffic)

    def _driver(self, name: str) -> ScriptedDriver:
        actor = self.launcher.agents[name]._actor_weakref()
        assert actor is not None
        driver: ScriptedDriver = actor.driver
        return driver

    def _all_drivers(self) -> bool:
        return all(self.launcher.agents[n]._actor_weakref() is not None for n in self.names)

    @property
    def broker_actor(self) -> BrokerActor:
        actor = self.session.broker._actor_weakref()
        assert isinstance(actor, BrokerActor)
        return actor

    @property
    def broker(self) -> SessionState:
        return self.broker_actor.state

    def base(self, name: str) -> dict[str, Any]:
        spec = self.launcher.specs[name]
        return {
            "message_id": self.runtime.ids.new(IdKind.MESSAGE),
            "session_id": self.session.session_id,
            "sender_id": spec.agent_id,
            "created_at": 0.0,
            "capability": spec.capability,
        }

    # ------------------------------------------------------------------ one round of load

    def run_round(self, number: int, messages: int) -> Round:
        rng = random.Random(number)
        plan = {
            n: [
                (rng.choice([m for m in self.names if m != n]), i % REQUEST_EVERY == 0)
                for i in range(messages)
            ]
            for n in self.names
        }
        r = Round(number, messages, plan)
        incoming = Counter(t for n in self.names for t, asks in plan[n] if asks)
        r.tasks = {n: self.session.delegate(n, f"round {number}").task_id for n in self.names}
        task_ids = list(r.tasks.values())
        for _ in range(WATCHERS // 2):  # watchers on tasks that have not settled yet...
            r.watchers.append(self.session.watch(rng.sample(task_ids, rng.randint(1, 6))))
        threads = [
            threading.Thread(target=self._guard, args=(r, fn, n), name=f"load-{fn.__name__}-{n}")
            for n in self.names
            for fn in (self._sender, self._replier)
        ]
        later = WATCHERS - WATCHERS // 2
        # ...and while traffic flows and tasks settle: one after every few (a random number)
        # messages handed to the agents, so registrations interleave with deliveries
        gap = AGENTS * messages // (later + 1)
        progress = self.traffic.messages
        for thread in threads:
            thread.start()
        for _ in range(later):
            r.watchers.append(self.session.watch(rng.sample(task_ids, rng.randint(1, 6))))
            progress += rng.randint(1, gap)
            assert self.traffic.wait_for(progress), f"traffic stalled before {progress} messages"
        for thread in threads:
            thread.join(DEADLINE_S)
        assert not r.errors, r.errors[:3]
        assert not [t.name for t in threads if t.is_alive()], "a load thread is stuck"
        r.incoming = incoming  # type: ignore[attr-defined]
        done = self.session.wait(task_ids, timeout_s=DEADLINE_S)
        assert not done.pending, f"{len(done.pending)} tasks never settled"
        assert {x.status for x in done.completed} == {"completed"}
        return r

    def _guard(self, r: Round, fn: Any, name: str) -> None:
        try:
            fn(r, name)
        except Exception as exc:  # reported by the main thread
            r.errors.append(f"{name}: {exc!r}")

    def _sender(self, r: Round, name: str) -> None:
        for i, (target, asks) in enumerate(r.plan[name]):
            env = MessageEnvelope(
                **self.base(name), target_id=target, content=f"{name}:{i}", expects_reply=asks
            )
            r.sent[name].append(env)
            self.transport.publish(PARENT_INBOX, env)
        asked = sum(1 for _, asks in r.plan[name] if asks)
        # finish the task once every question has its answer (a task settles only by done)
        assert self.inboxes[name].wait_replies(asked, DEADLINE_S), "replies missing"
        done = TaskDoneEnvelope(
            **self.base(name), target_id=PARENT_ID, task_id=r.tasks[name], status="completed"
        )
        r.dones[name] = done
        self.transport.publish(PARENT_INBOX, done)

    def _replier(self, r: Round, name: str) -> None:
        inbox = self.inboxes[name]
        expected = sum(1 for n in self.names for t, asks in r.plan[n] if asks and t == name)
        answered = 0
        position = 0
        deadline = time.monotonic() + DEADLINE_S
        while answered < expected:
            fresh = inbox.wait_beyond(position, deadline - time.monotonic())
            assert fresh, f"{answered}/{expected} questions arrived"
            position += len(fresh)
            for env in fresh:
                if isinstance(env, MessageEnvelope) and env.expects_reply:
                    reply = ReplyEnvelope(
                        **self.base(name),
                        target_id=env.sender_id,
                        content="ok",
                        reply_to=env.message_id,
                    )
                    r.replies[name].append(reply)
                    self.transport.publish(PARENT_INBOX, reply)
                    answered += 1

    # ------------------------------------------------------------------ checks

    def check_delivery(self, r: Round) -> Counter[str]:
        counts: Counter[str] = Counter()
        by_id = {s.agent_id: n for n, s in self.launcher.specs.items()}
        for target in self.names:
            driver = self.drivers[target]
            assert driver.duplicates == 0, f"{target} was handed a message twice"
            got: dict[str, list[int]] = defaultdict(list)
            for env in driver.received:
                if isinstance(env, MessageEnvelope) and env.sender_id in by_id:
                    sender, index = env.content.split(":")
                    assert sender == by_id[env.sender_id]
                    got[sender].append(int(index))
            for sender in self.names:
                planned = [i for i, (t, _) in enumerate(r.plan[sender]) if t == target]
                assert got[sender] == planned, (
                    f"{sender} -> {target}: delivered {got[sender][:10]}..., "
                    f"sent {planned[:10]}... (lost, doubled or out of order)"
                )
                counts["messages_delivered_in_order"] += len(planned)
        for sender in self.names:
            driver = self.drivers[sender]
            replies = Counter(
                e.reply_to for e in driver.received if isinstance(e, ReplyEnvelope) and not e.late
            )
            asked = [e.message_id for e in r.sent[sender] if e.expects_reply]
            assert all(replies[q] == 1 for q in asked), f"{sender}: a question's reply count != 1"
            assert sum(replies.values()) == len(asked)
            counts["requests_replied_once"] += len(asked)
            acks = Counter(a.ack_for for a in driver.acks if a.accepted)
            mine = [e.message_id for e in r.sent[sender]] + [
                e.message_id for e in r.replies[sender]
            ]
            mine.append(r.dones[sender].message_id)
            assert all(acks[m] == 1 for m in mine), f"{sender}: a receipt missing or doubled"
            assert not [a for a in driver.acks if not a.accepted], f"{sender}: refused"
            counts["receipts"] += len(mine)
        for request_id in (e.message_id for s in r.sent.values() for e in s if e.expects_reply):
            request = self.broker.requests.get(request_id)
            assert request is None or request.state.value == "replied", request
        # a watcher holds results for a coalescing window before it notifies, so the last
        # of them may come after the round's own wait returned: wait until each watcher was
        # told of every task it had pending (then compare: nothing more, nothing twice)
        delivered: dict[str, list[str]] = defaultdict(list)
        read = 0

        def notified(items: list[Any]) -> bool:
            nonlocal read
            for note in items[read:]:
                if isinstance(note, TaskCompletion):
                    delivered[note.watcher_id].extend(x.task_id for x in note.results)
            read = len(items)
            return all(set(w.pending) <= set(delivered[w.watcher_id]) for w in r.watchers)

        self.sink.wait_for(notified, timeout=30)
        for watch in r.watchers:
            got_ids = delivered[watch.watcher_id]
            assert sorted(got_ids) == sorted(watch.pending), f"{watch.watcher_id}: {got_ids}"
            assert not set(got_ids) & {x.task_id for x in watch.completed}
            counts["watcher_deliveries"] += len(got_ids)
        counts["watchers"] += len(r.watchers)
        return counts

    def forget_agent_side(self) -> None:
        """Clear what the simulated agents and the test keep (the children's memory)."""
        for driver in self.drivers.values():
            driver.received.clear()
            driver.acks.clear()
            driver._seen.clear()
            driver.machine._queue.clear()  # a finished script queues what it is sent
        self.sink.items.clear()

    def quiet(self, baseline_actors: int) -> None:
        """Wait until the session holds no more actors than before the load (a watcher's actor
        stops once it delivered everything: nothing may be left behind by one), dead timers
        drained and every watcher done."""
        clock = self.runtime.clock
        assert isinstance(clock, ObservedClock)
        assert self.news.wait_until(lambda: self.runtime.actor_count == baseline_actors, 30), (
            f"{self.runtime.actor_count - baseline_actors} actors outlived their task or watcher"
        )
        assert self.news.wait_until(lambda: clock.pending <= 5, 30), f"{clock.pending} timers left"
        # every watcher's last notification dispatched (its coalescing window may still be open
        # when the actors are back to the baseline)
        live = self.broker_actor._watchers
        assert self.news.wait_until(lambda: not live, 30), f"{len(live)} watchers still live"
        # and every actor's mail handled: what the last run told the note writer and the
        # watchdog is not retained memory, only memory not yet freed (it once looked like a
        # leak of 400 KiB in a measured round)
        inboxes: list[RuntimeInbox] = [a.actor_inbox for a in self.runtime.actors()]  # type: ignore[misc]
        assert self.runtime.wait_until(lambda: all(i.idle for i in inboxes), 30), "mail left"

    def census(self) -> dict[str, int]:
        b = self.broker
        timers = Counter(kind for kind, _ in self.broker_actor._timers)
        return {
            "requests": len(b.requests),
            "tasks": len(b.tasks),
            "results": len(b.results),
            "dedup_ids": len(self.transport.gate),  # the transport de-duplicates, not the broker
            "subscriptions": sum(len(v) for v in b.subscribers.values()),
            "watchers": len(self.broker_actor._watchers),  # one actor per live watcher
            # one per open task with a deadline: its actor's own timer
            "deadline_timers": sum(
                1 for a in self.runtime.actors() if isinstance(a, TaskActor) and a.armed is not None
            ),
            "request_timers": timers["reply"],
            "stale_timers": timers["stale"],
            "actors": self.runtime.actor_count,
        }


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    built = Rig(tmp_path / "artifacts")
    yield built
    built.session.shutdown()


def test_fifty_agents_two_hundred_messages_each(rig: Rig, report: Counter[str]) -> None:
    baseline_actors = rig.runtime.actor_count
    # an agent and a simulated agent each; the broker, the watchdog, the note writer and the
    # journal's writer (a watcher's actor is gone once it delivered everything)
    assert baseline_actors == 2 * AGENTS + 4
    started = time.monotonic()

    # --- the load: everything delivered once, in per-sender order; everything settles
    first = rig.run_round(1, MESSAGES)
    report.update(rig.check_delivery(first))
    report["seconds_full_round"] = round(time.monotonic() - started)
    del first
    rig.forget_agent_side()
    rig.quiet(baseline_actors)

    # --- memory: the same load again, smaller, under tracemalloc. A first traced round turns
    # the bounded caches (dedup window, watchdog rings) over, so that they hold traced objects:
    # otherwise their replacement during the measured round would look like growth.
    allowance = AGENTS * PER_TASK_BYTES + CONSTANT_BYTES
    once: Measured | None = None  # a first measured round over the allowance, if one was
    tracemalloc.start()
    try:
        rig.run_round(2, TRACED_MESSAGES)
        rig.forget_agent_side()
        rig.quiet(baseline_actors)
        measured = measure_round(rig, 3, baseline_actors, report)
        if measured.grown > allowance:
            # what the round keeps, every round keeps; a table of the whole process that grew
            # once (the suite's, sized by every test before this one) does not grow again
            once = measured
            measured = measure_round(rig, 4, baseline_actors, report)
            report["retained_bytes_first_measured_round"] = once.grown
    finally:
        tracemalloc.stop()
    report["messages"] = AGENTS * (MESSAGES + 2 * TRACED_MESSAGES)
    report["retained_bytes_traced_round"] = measured.grown
    report["seconds"] = round(time.monotonic() - started)

    # bounded tables stay bounded, per-message state is gone, settled actors are stopped
    before, after = measured.before, measured.after
    assert after["dedup_ids"] <= rig.settings.dedup_window
    rest = ("subscriptions", "watchers", "deadline_timers", "request_timers", "stale_timers")
    for key in rest:
        assert after[key] == before[key] == 0, (key, before[key], after[key])
    assert after["actors"] == before["actors"] == baseline_actors
    assert after["tasks"] - before["tasks"] == AGENTS  # kept by design: results stay queryable
    assert after["requests"] - before["requests"] == 0, (
        f"every closed request is kept forever: {before['requests']} -> {after['requests']} "
        f"after {measured.requests} more requests; retained {measured.grown} bytes; "
        f"top:\n{measured.top}"
    )
    assert measured.grown <= allowance, (
        f"retained {measured.grown} bytes (allowed {allowance}); "
        f"{'' if once is None else f'the measured round before it, {once.grown}; '}"
        f"top:\n{measured.top}"
    )


@dataclass
class Measured:
    """One measured round: the census before and after, the requests it made, what it kept."""

    before: dict[str, int]
    after: dict[str, int]
    requests: int
    grown: int
    top: str


def measure_round(rig: Rig, number: int, baseline_actors: int, report: Counter[str]) -> Measured:
    """Round ``number`` (of ``TRACED_MESSAGES``), under the running ``tracemalloc``: what it
    left allocated once everything is quiet again (agent-side code left out)."""
    before = rig.census()
    gc.collect()
    blocks_before = sys.getallocatedblocks()
    snap_before = tracemalloc.take_snapshot()
    r = rig.run_round(number, TRACED_MESSAGES)
    report.update(rig.check_delivery(r))
    requests = sum(1 for s in r.sent.values() for e in s if e.expects_reply)
    del r
    rig.forget_agent_side()
    rig.quiet(baseline_actors)
    gc.collect()
    snap_after = tracemalloc.take_snapshot()
    after = rig.census()
    report["allocated_blocks_growth"] = sys.getallocatedblocks() - blocks_before

    filters = [tracemalloc.Filter(False, pattern) for pattern in AGENT_SIDE]
    filters.append(tracemalloc.Filter(False, tracemalloc.__file__))
    diff = snap_after.filter_traces(filters).compare_to(
        snap_before.filter_traces(filters), "lineno"
    )
    diff = [d for d in diff if not interned_table(d)]
    top = "\n".join(f"  {d}" for d in diff[:8])
    return Measured(before, after, requests, sum(d.size_diff for d in diff), top)


def test_the_interned_strings_table_is_told_apart_from_what_a_round_keeps() -> None:
    """What :func:`interned_table` leaves out of the retained bytes is the interpreter's table:
    strings interned and then dropped leave one block, charged to the ``sys.intern`` line;
    a list the round keeps is not left out."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        interned = [sys.intern(f"load-probe-{i}") for i in range(600_000)]  # past its size
        del interned  # mortal: gone from the table, which keeps its size
        gc.collect()
        kept = [bytearray(2 * INTERNED_TABLE_BYTES)]
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    diff = after.compare_to(before, "lineno")
    (table,) = [d for d in diff if interned_table(d)]
    assert table.count_diff == 1 and table.size_diff > INTERNED_TABLE_BYTES
    assert any(d.size_diff >= 2 * INTERNED_TABLE_BYTES and not interned_table(d) for d in diff)
    assert kept
