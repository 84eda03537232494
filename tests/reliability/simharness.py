"""A simulated session under faults, with its invariants checked after EVERY scheduler step.

:class:`Harness` wraps ``SimSession.simulated(seed)``:

- it hooks the simulated transport's ``publish`` to keep a ledger of every envelope offered to
  an inbox: accepted or refused, and what the seeded fault did to it (dropped, duplicated,
  delayed);
- it moves timers "to the edges" (:meth:`Harness._edge_timers`): each timer once, early, late,
  or snapped onto a coarse grid so that unrelated timers (a deadline and an agent's ``done``)
  fall due at the same virtual instant; every timer due at one instant fires before any actor
  runs, so the seeded scheduler interleaves their effects;
- it registers :meth:`Harness.check` in ``SimRuntime.invariant_checks``, run after each step:

  1. legal task states, and only single legal moves between two observations
     (``protocol.records.tasks.TRANSITIONS``), for the task actors and the broker's read model;
  2. waiting iff an open request (within a record after every step; against the broker's
     request table whenever the simulation is quiescent);
  3. a settled result never changes (task results, terminal requests, journal entries);
  4. each watcher reports each task at most once, only terminal ones, only tasks it was
     registered for while they were pending, and only after the result was journaled;
  5. at most one active task per agent;
  6. nothing settles without a cause: a ``done`` with that status published by the owner, a
     parent action (cancel / fail / close), a deadline that passed (less the early-timer
     spread), or the agent's exit;

- :meth:`Harness.final` checks, once the run is quiescent, that every accepted envelope was
  handled (publishes vs hand-offs vs the broker's handled ``Inbound`` steps vs the drops the fault
  made), that every agent envelope that needed a receipt got one, and that every watcher got
  every pending task that settled exactly once.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.child.scripted import ScriptedDriver
from actors.runtime.transport import PARENT_INBOX
from actors.session.messages import ParentCall
from actors.session.sinks import CollectingSink
from actors.session.task_actor import TaskActor
from actors.testing import SimSession
from actors.testing.simulation import Faults
from protocol.calls import api
from protocol.core.errors import ShepherdError
from protocol.records.notifications import TaskCompletion
from protocol.records.requests import RequestRecord
from protocol.records.settings import Settings
from protocol.records.tasks import (
    TERMINAL_STATES,
    TRANSITIONS,
    TaskRecord,
    TaskResult,
    TaskState,
)
from protocol.scripted.script import parse_script
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    TaskDoneEnvelope,
)
from tests.sim.scenarios import broker, live_watchers

__all__ = ["Harness", "Offer"]

#: every single move the task machine allows (state -> state)
LEGAL_MOVES = frozenset((before, after) for (before, _event), after in TRANSITIONS.items())
TERMINAL_STATUSES = frozenset(s.value for s in TERMINAL_STATES)
MAX_STEPS = 200_000


@dataclass(slots=True)
class Offer:
    """One envelope offered to an inbox of the simulated transport."""

    inbox: str
    env: AnyEnvelope
    accepted: bool
    dropped: bool = False
    copies: int = 0  # hand-offs it causes: 0 (refused or dropped), 1, or 2 (duplicated)
    delayed: int = 0


class Harness:
    def __init__(
        self,
        seed: int,
        *,
        faults: Faults | None = None,
        settings: Settings | None = None,
        spread_s: float = 0.0,
        grid_s: float = 0.0,
    ) -> None:
        self.seed = seed
        self.faults = faults or Faults()
        self.sink = CollectingSink()
        self.s = SimSession.simulated(
            seed, faults=self.faults, settings=settings or Settings(), sink=self.sink
        )
        self.sim = self.s.sim
        self.broker = broker(self.s)
        self.spread_s = spread_s
        self.grid_s = grid_s
        self.counts: Counter[str] = Counter()
        self.offers: list[Offer] = []
        transport = self.s.transport
        self._publish = transport.publish
        transport.publish = self._publish_hook  # type: ignore[method-assign,assignment]
        self.parent_causes: dict[str, set[str]] = defaultdict(set)
        self.closed_agents: set[str] = set()
        self.settled: dict[str, TaskResult] = {}
        self.journaled: dict[str, TaskResult] = {}
        self.requests: dict[str, RequestRecord] = {}
        self.watchers: dict[str, api.WatchResult] = {}
        self.delivered: dict[str, list[str]] = defaultdict(list)
        self._states: dict[tuple[str, str], TaskState] = {}
        self._records: dict[object, object] = {}
        self._sink_pos = 0
        self._journal_pos = 0
        self._timers: dict[int, object] = {}
        self.drivers: dict[str, ScriptedDriver] = {}
        self.checks = 0
        self.sim.invariant_checks.append(self.check)

    # ------------------------------------------------------------------ operations

    def spawn(self, name: str, script: dict[str, Any]) -> str:
        """Spawn and start a simulated agent (its driver is kept: it outlives a crash)."""
        agent_id = self.s.spawn(name, script=parse_script(script)).agent_id
        self.sim.run_until_idle()
        self.drivers[name] = self.s.sim_launcher.driver(name)
        return agent_id

    def delegate(self, agent: str, text: str, *, timeout_minutes: float | None = None) -> str:
        return self.s.delegate(agent, text, timeout_minutes=timeout_minutes).task_id

    def watch(self, ids: list[str]) -> api.WatchResult:
        result = self.s.watch(ids)
        self.watchers[result.watcher_id] = result
        return result

    def cancel(self, task_id: str) -> TaskResult:
        self.parent_causes[task_id].add("cancel")
        return self.s.cancel(task_id, "cancelled by the test")

    def fail(self, task_id: str) -> TaskResult:
        self.parent_causes[task_id].add("fail")
        return self.s.fail(task_id, "failed by the test")

    def cancel_racing(self, task_id: str, fire_at: int) -> TaskResult:
        """Cancel ``task_id`` while every timer due now fires: before the parent's call
        (``fire_at`` 0), after the broker answered it (1), or after the settle request went
        to the task (2); the seeded scheduler interleaves everything else."""
        self.parent_causes[task_id].add("cancel")
        if fire_at == 0:
            self._fire_due()
        # the broker settles it at once (the task's one owner): the timers race the answer
        answer: Any = self.s.broker.ask(
            ParentCall(args=api.CancelArgs(task_id=task_id, reason="race"))
        )
        self._fire_due()
        assert isinstance(answer, TaskResult)
        # the answer says whether it was this cancel that settled it; the result is the result
        return TaskResult(**{f: getattr(answer, f) for f in TaskResult.__struct_fields__})

    def close(self, name: str) -> api.CloseResult:
        self.closed_agents.add(self.agent_id(name))
        return self.s.close(name)

    def crash(self, name: str) -> None:
        self.counts["crash"] += 1
        self.s.sim_launcher.crash(name)

    def agent_id(self, name: str) -> str:
        return self.broker.names[name]

    def driver(self, name: str) -> ScriptedDriver:
        return self.drivers[name]

    def task(self, task_id: str) -> TaskRecord:
        return self.broker.tasks[task_id]

    def result(self, task_id: str) -> TaskResult | None:
        return self.broker.results.get(task_id)

    # ------------------------------------------------------------------ driving

    def run(self, until: Callable[[], bool] | None = None, *, max_time: float = 3600.0) -> bool:
        """Step (seeded) and fire timers until ``until()`` holds, or nothing is left to do
        within ``max_time`` virtual seconds."""
        limit = self.sim.vclock.now() + max_time
        while until is None or not until():
            if self.sim.steps > MAX_STEPS:
                raise AssertionError(f"seed {self.seed}: no quiescence after {MAX_STEPS} steps")
            if self.sim.step():
                continue
            if not self._fire_next(limit):
                return until() if until is not None else True
        return True

    def run_steps(self, n: int, *, timers: bool = False) -> None:
        """Run ``n`` scheduler steps; with ``timers``, fire timers whenever nothing is ready."""
        target = self.sim.steps + n
        if timers:
            self.run(lambda: self.sim.steps >= target)
            return
        while self.sim.steps < target and self.sim.step():
            pass

    def _fire_next(self, limit: float) -> bool:
        """Fire every timer due at the earliest pending instant (if it is within ``limit``)."""
        self._edge_timers()
        vclock = self.sim.vclock
        instant = vclock.next_deadline()
        if instant is None or instant > limit:
            return False
        while (due := vclock.next_deadline()) is not None and due <= instant:
            vclock.fire_next(instant)
        return True

    def _fire_due(self) -> None:
        vclock = self.sim.vclock
        now = vclock.now()
        while (due := vclock.next_deadline()) is not None and due <= now:
            vclock.fire_next(now)

    def _edge_timers(self) -> None:
        """Fault: move each new timer once — early, late, or onto the grid (collisions)."""
        if not (self.spread_s or self.grid_s):
            return
        vclock = self.sim.vclock
        heap = vclock._heap
        now = vclock.now()
        rng = self.sim.rng
        moved = False
        for timer in heap:
            if timer.cancelled or id(timer) in self._timers:
                continue
            self._timers[id(timer)] = timer  # kept alive: its id is never reused here
            roll = rng.random()
            if roll < 0.2 and self.spread_s:
                timer.deadline = max(now, timer.deadline - rng.uniform(0.0, self.spread_s))
                self.counts["timer_early"] += 1
            elif roll < 0.4 and self.spread_s:
                timer.deadline += rng.uniform(0.0, self.spread_s)
                self.counts["timer_late"] += 1
            elif roll < 0.7 and self.grid_s:
                timer.deadline = max(now, math.ceil(timer.deadline / self.grid_s) * self.grid_s)
                self.counts["timer_on_grid"] += 1
            else:
                continue
            moved = True
        if moved:
            heapq.heapify(heap)

    # ------------------------------------------------------------------ the ledger

    def _publish_hook(self, inbox: str, env: AnyEnvelope) -> None:
        counts = self.faults.counts
        before = (counts.get("drop", 0), counts.get("duplicate", 0), counts.get("delay", 0))
        try:
            self._publish(inbox, env)
        except ShepherdError:
            self.offers.append(Offer(inbox, env, accepted=False))
            raise
        dropped = counts.get("drop", 0) > before[0]
        duplicated = counts.get("duplicate", 0) - before[1]
        self.offers.append(
            Offer(
                inbox,
                env,
                accepted=True,
                dropped=dropped,
                copies=0 if dropped else 1 + duplicated,
                delayed=counts.get("delay", 0) - before[2],
            )
        )

    # ------------------------------------------------------------------ invariants, every step

    def check(self) -> None:
        self.checks += 1
        b = self.broker
        active: Counter[str] = Counter()
        for record in b.tasks.values():  # the broker's read model of the task records
            self._task("broker", record)
            if not record.terminal:
                active[record.agent_id] += 1
        live: dict[str, TaskRecord] = {}  # the records' owners: the live task actors
        for actor in self.sim.actors():
            if isinstance(actor, TaskActor) and not actor.actor_stopped.is_set():
                self._task("actor", actor.record)
                live[actor.record.task_id] = actor.record
        assert max(active.values(), default=0) <= 1, f"two active tasks for one agent: {active}"
        for task_id, result in b.results.items():
            assert self.settled.get(task_id) == result, f"broker result of {task_id} differs"
        for request_id, request in b.requests.items():
            if self._records.get(request_id) is request:
                continue
            self._records[request_id] = request
            if not request.pending:
                first = self.requests.setdefault(request_id, request)
                assert first == request, f"closed request {request_id} changed: {request}"
            else:
                assert request_id not in self.requests, f"request {request_id} reopened"
        self._journal()
        self._notifications()
        if not self.sim._ready:
            self._quiescent(live)

    def _task(self, source: str, record: TaskRecord) -> None:
        key = (source, record.task_id)
        if self._records.get(key) is record:
            return  # records are immutable: the same object was checked already
        self._records[key] = record
        task_id = record.task_id
        state = record.state
        if record.terminal:
            result = record.result
            assert result is not None and result.status == state.value, record
            assert record.pending_requests == () and record.waiting_since is None, record
            first = self.settled.get(task_id)
            if first is None:
                self._cause(record)
                self.settled[task_id] = result
            else:
                assert first == result, f"settled result of {task_id} changed: {first} -> {result}"
        else:
            assert (state is TaskState.WAITING) == bool(record.pending_requests), record
        before = self._states.get(key)
        if before is not None and before is not state:
            assert (before, state) in LEGAL_MOVES, f"{source}: {task_id} {before} -> {state}"
        self._states[key] = state

    def _cause(self, record: TaskRecord) -> None:
        """Invariant 6: a first settlement must have a cause the test can point to."""
        assert record.result is not None
        status = record.result.status
        task_id, agent_id = record.task_id, record.agent_id
        causes = self.parent_causes.get(task_id, set())
        ok = False
        if status in ("completed", "blocked", "failed"):
            ok = self._done_published(agent_id, task_id, status)
        if status == "failed":
            ok = ok or "fail" in causes or self._exited(agent_id)
        elif status == "cancelled":
            ok = "cancel" in causes or agent_id in self.closed_agents
        elif status == "timed_out":
            now = self.sim.vclock.now()
            ok = record.deadline_at is not None and now >= record.deadline_at - self.spread_s - 1e-6
        assert ok, f"{task_id} settled {status} with no cause ({record.result})"
        self.counts[f"settled_{status}"] += 1

    def _done_published(self, agent_id: str, task_id: str, status: str) -> bool:
        return any(
            o.accepted
            and not o.dropped
            and o.inbox == PARENT_INBOX
            and isinstance(o.env, TaskDoneEnvelope)
            and o.env.sender_id == agent_id
            and o.env.status == status
            and o.env.task_id in (task_id, None)
            for o in self.offers
        )

    def _exited(self, agent_id: str) -> bool:
        entry = self.broker.agents.get(agent_id)
        return entry is not None and entry.name in self.s.sim_launcher.exits

    def _journal(self) -> None:
        records = self.s.journal.records  # type: ignore[attr-defined]
        while self._journal_pos < len(records):
            record = records[self._journal_pos]
            self._journal_pos += 1
            if isinstance(record, TaskRecord) and record.terminal:
                assert record.task_id not in self.journaled, f"{record.task_id} journaled twice"
                assert record.result is not None
                self.journaled[record.task_id] = record.result

    def _notifications(self) -> None:
        items = self.sink.items
        while self._sink_pos < len(items):
            note = items[self._sink_pos]
            self._sink_pos += 1
            if not isinstance(note, TaskCompletion):
                continue
            watcher = self.watchers.get(note.watcher_id)
            assert watcher is not None, f"completion for an unknown watcher {note.watcher_id}"
            got = self.delivered[note.watcher_id]
            order = [watcher.ids.index(r.task_id) for r in note.results]
            assert order == sorted(order), f"{note.watcher_id}: not in the caller's order"
            for result in note.results:
                task_id = result.task_id
                assert result.status in TERMINAL_STATUSES, result
                assert task_id not in got, f"{note.watcher_id} reported {task_id} twice"
                assert task_id in watcher.pending, f"{task_id} was not pending for the watcher"
                assert self.settled.get(task_id) == result, f"reported {result}, not the result"
                assert self.journaled.get(task_id) == result, f"{task_id} notified unjournaled"
                got.append(task_id)

    def _quiescent(self, live: dict[str, TaskRecord]) -> None:
        """Nothing is in flight between actors: the read models agree with their owners."""
        b = self.broker
        pending_by_task: dict[str, set[str]] = defaultdict(set)
        for request in b.requests.values():
            if request.pending and request.task_id is not None:
                pending_by_task[request.task_id].add(request.request_id)
        for task_id, record in b.tasks.items():
            if record.terminal:
                assert task_id not in live, f"settled task {task_id} still has a live actor"
                assert not pending_by_task.get(task_id), (
                    f"settled task {task_id} still holds open requests {pending_by_task[task_id]}"
                )
                continue
            # the census: one live actor per open task, and the read model agrees with it
            assert live.get(task_id) == record, f"broker's view of {task_id} is stale"
            assert set(record.pending_requests) == pending_by_task.get(task_id, set()), (
                f"{task_id} is {record.state} with {record.pending_requests}, but the open "
                f"requests are {pending_by_task.get(task_id)}"
            )
            owner = b.agents[record.agent_id]
            assert owner.active_task == task_id, f"{task_id} is active but not its agent's slot"
        for entry in b.agents.values():
            if entry.active_task is not None:
                assert not b.tasks[entry.active_task].terminal, f"{entry.name} holds a settled slot"
        assert not b.endings, f"endings routed and never reported: {b.endings}"
        unknown = set(live) - set(b.tasks)
        assert not unknown, f"task actors the session does not know: {unknown}"

    # ------------------------------------------------------------------ at the end

    def final(self) -> None:
        """Run to the end, then check delivery accounting and watcher completeness."""
        self.run()
        assert not self.sim._ready
        b = self.broker
        # --- every accepted envelope was handled (or explicitly dropped by the fault)
        handed = Counter[str]()
        for offer in self.offers:
            if offer.accepted:
                handed[offer.inbox] += offer.copies
        delivered_total = sum(handed.values())
        transport: Any = self.s.transport
        assert transport.delivered == delivered_total, "transport hand-offs do not add up"
        assert self.sim.trace is not None
        inbound = sum(
            1 for _, _, label, kind in self.sim.trace if kind == "Inbound" and "Broker" in label
        )
        gate = transport.gate  # the transport authenticates and drops duplicates, not the broker
        passed = handed[PARENT_INBOX] - gate.duplicates[PARENT_INBOX] - gate.refused
        assert inbound == passed, (
            f"{passed} envelopes handed to the parent inbox, broker handled {inbound}"
        )
        to_parent = {o.env.message_id for o in self.offers if o.inbox == PARENT_INBOX and o.copies}
        lost = to_parent - gate.seen(PARENT_INBOX)
        assert not lost, f"accepted by the parent inbox, never handled: {lost}"
        assert gate.duplicates[PARENT_INBOX] == handed[PARENT_INBOX] - len(to_parent)
        seen_by = {b.names[name]: set(d._seen) for name, d in self.drivers.items()}
        for offer in self.offers:
            if offer.inbox == PARENT_INBOX or not offer.copies:
                continue
            if offer.env.message_id in seen_by.get(offer.inbox, set()):
                self.counts["agent_envelopes_handled"] += 1
            elif self._gone(offer.inbox):
                self.counts["agent_envelopes_after_exit"] += 1
            else:
                raise AssertionError(f"accepted for {offer.inbox}, never handled: {offer.env}")
        self.counts["parent_envelopes_handled"] += len(to_parent)
        self.counts["dropped_by_fault"] += sum(1 for o in self.offers if o.dropped)
        self.counts["refused_at_publish"] += sum(1 for o in self.offers if not o.accepted)
        # --- every message / reply / done from a live agent got exactly one receipt
        acks: Counter[str] = Counter(
            o.env.ack_for for o in self.offers if isinstance(o.env, AckEnvelope)
        )
        for offer in self.offers:
            env = offer.env
            if offer.inbox != PARENT_INBOX or not offer.copies:
                continue
            if not isinstance(env, MessageEnvelope | ReplyEnvelope | TaskDoneEnvelope):
                continue
            if env.reply_inbox is None and self._gone(env.sender_id):
                assert acks[env.message_id] <= 1
                continue
            assert acks[env.message_id] == 1, (
                f"{type(env).__name__} {env.message_id} from {env.sender_id} got "
                f"{acks[env.message_id]} receipts"
            )
        # --- every watcher got every pending task that settled, exactly once
        for watcher_id, watch in self.watchers.items():
            got = self.delivered[watcher_id]
            want = [t for t in watch.pending if t in b.results]
            assert sorted(got) == sorted(want), f"{watcher_id}: got {got}, expected {want}"
        # --- the census: one live actor per watcher with something still to deliver, none
        # left behind by a watcher that is done
        live = live_watchers(self.s.runtime)
        owing = sorted(
            w
            for w, watch in self.watchers.items()
            if any(t not in b.results for t in watch.pending)
        )
        assert live == owing, f"live watcher actors {live}, watchers still owing {owing}"
        self.counts["watcher_actors_live_at_end"] += len(live)
        # the census: one task actor per open task, none for a settled one
        tasks = {
            a.record.task_id
            for a in self.sim.actors()
            if isinstance(a, TaskActor) and not a.actor_stopped.is_set()
        }
        open_tasks = {t for t, r in b.tasks.items() if not r.terminal}
        assert tasks == open_tasks, f"task actors {tasks}, open tasks {open_tasks}"
        self.counts["task_actors_live_at_end"] += len(tasks)
        self.counts["tasks_in_session"] += len(b.tasks)
        self.counts["steps"] += self.sim.steps
        self.counts["invariant_checks"] += self.checks
        for kind, n in self.faults.counts.items():
            self.counts[f"fault_{kind}"] += n

    def _gone(self, agent_id: str) -> bool:
        entry = self.broker.agents.get(agent_id)
        return entry is None or entry.closed or entry.name in self.s.sim_launcher.exits

    def shutdown(self) -> None:
        self.sim.invariant_checks.clear()  # stopping every actor is not a lifecycle step
        self.s.shutdown()
