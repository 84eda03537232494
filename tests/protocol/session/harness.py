"""A session without a runtime: the rules of ``protocol.session``, called directly.

:class:`Session` holds a :class:`SessionState`, a deterministic id source and a fixed clock
(``now`` moves only when a test moves it). Every step goes through :meth:`Session.run`, which
checks the effect list is well formed (:func:`check_effects`) and the state's invariants
(:func:`check_invariants`) after it, and keeps what a runtime would keep: the journal, what the
parent heard, the armed timers, and each watcher's state as its actor would (``SpawnWatcher``
starts one, ``HandOver`` and its ``Flush`` timer go through its rules,
:mod:`protocol.session.watcher`; what the watchers did is returned after the session's
effects), and each task's record as its actor would (``SpawnTask`` starts one, ``TellTask``
goes through its rules, :mod:`protocol.session.task`, and what it reports through the
session's, :func:`protocol.session.settlement.reported`, at once: what that did follows the
effects that routed it). :meth:`Session.refuses` checks a refusal is typed and changes
nothing (a snapshot of the state before and after).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import pytest

from protocol.calls import api
from protocol.core.errors import ShepherdError
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.journal import (
    AgentCloseRecord,
    AgentExitRecord,
    AgentRecord,
    AgentRecoverRecord,
    PromptRecord,
    TaskChangesRecord,
    TaskResumeRecord,
    UsageRecord,
    WatcherRecord,
    WorktreeRemovedRecord,
)
from protocol.records.notifications import AnyNotification, TaskCompletion
from protocol.records.requests import RequestRecord
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord, TaskState
from protocol.records.usage import Usage
from protocol.session import agents, calls, inbound, settlement, task_budget, task_stale
from protocol.session import task as task_rules
from protocol.session import watcher as watcher_rules
from protocol.session.effects import (
    Answer,
    AnswerFromOutput,
    AppendNote,
    CancelTimer,
    Deliver,
    Effect,
    FinaliseNote,
    Flush,
    HandOver,
    Journal,
    Notify,
    OpenNote,
    Publish,
    SpawnTask,
    SpawnWatcher,
    StartTimer,
    StopTask,
    TellTask,
    TimerEvent,
    TimerKey,
)
from protocol.session.state import Ctx, SessionState, WatcherState
from protocol.session.task_budget import Soft
from protocol.session.task_stale import Stale
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)

SESSION = "shepherd-session-00000000"
T0 = 1000.0

E = TypeVar("E", bound=Effect)
V = TypeVar("V")
S = TypeVar("S", bound=msgspec.Struct)


class FixedIds:
    """Ids in the order they are asked for: ``shepherd-<kind>-00000001``, ``...02``, ..."""

    def __init__(self) -> None:
        self.made = 0

    def new(self, kind: IdKind) -> str:
        self.made += 1
        return make_id(kind, f"{self.made:08x}")

    def secret(self) -> str:
        self.made += 1
        return f"secret-{self.made:08x}"


class TaskDue(msgspec.Struct, frozen=True, kw_only=True):
    """A task's own timer, as its actor arms it (:func:`protocol.session.task_budget.alarm`:
    its deadline, its budget's minutes or their soft share, its wait's stale point, the
    earliest): it goes off
    ``at``; kept among the armed timers under ``("deadline", task_id)``."""

    task_id: str
    at: float

    @property
    def key(self) -> TimerKey:
        return ("deadline", self.task_id)


# ------------------------------------------------------------------ reading effects


def of(effects: Sequence[Effect], cls: type[E]) -> list[E]:
    return [e for e in effects if isinstance(e, cls)]


def answer(effects: list[Effect]) -> Any:
    (found,) = of(effects, Answer)
    return found.value


def delivered(effects: list[Effect], cls: type[V], agent_id: str | None = None) -> list[V]:
    """The envelopes of class ``cls`` handed to agents' inboxes (to ``agent_id`` if given)."""
    return [
        e.envelope
        for e in of(effects, Deliver)
        if isinstance(e.envelope, cls) and agent_id in (None, e.agent_id)
    ]


def receipt(effects: list[Effect]) -> AckEnvelope:
    """The one receipt an agent's envelope got."""
    acks = [
        e.envelope
        for e in effects
        if isinstance(e, Deliver | Publish) and isinstance(e.envelope, AckEnvelope)
    ]
    assert len(acks) == 1, effects
    return acks[0]


def notes(effects: Sequence[Effect], cls: type[V] = AnyNotification) -> list[V]:  # type: ignore[assignment]
    return [e.note for e in of(effects, Notify) if isinstance(e.note, cls)]


def journaled(effects: list[Effect], cls: type[V] = msgspec.Struct) -> list[V]:  # type: ignore[assignment]
    return [e.record for e in of(effects, Journal) if isinstance(e.record, cls)]


# ------------------------------------------------------------------ well-formed effects

_TELLS = (Notify, Deliver, Publish, Answer, FinaliseNote, AppendNote, OpenNote)


def _key(record: msgspec.Struct) -> str:
    """What a journal record makes durable, by id."""
    match record:
        case TaskRecord() | PromptRecord():
            return record.prompt_id if isinstance(record, PromptRecord) else record.task_id
        case RequestRecord():
            return record.request_id
        case AgentRecord() | AgentExitRecord() | AgentCloseRecord():
            return record.agent_id
        case WatcherRecord():
            return record.watcher_id
        case UsageRecord():
            return f"usage {record.agent_id}"
        case AgentRecoverRecord():
            return record.agent_id
        case TaskResumeRecord():
            return record.message_id  # the resumed envelope it makes durable
        case TaskChangesRecord():
            return f"changes:{record.task_id}"
        case WorktreeRemovedRecord():
            return f"worktree:{record.agent_id}"
    raise AssertionError(f"a rule journaled a record the fold does not know: {record!r}")


def _mentions(effect: Effect) -> set[str]:
    """The ids an effect that tells someone something is about."""
    inner: Any
    match effect:
        case Notify(note=inner) | Answer(value=inner):
            pass
        case Deliver(envelope=inner) | Publish(envelope=inner):
            pass
        case FinaliseNote(record=inner) | OpenNote(record=inner):
            pass
        case AppendNote(task_id=task_id):
            return {task_id}
        case _:
            return set()
    found: set[str] = set()
    fields = (
        "task_id",
        "request_id",
        "message_id",
        "watcher_id",
        "prompt_id",
        "reply_to",
        "ref_id",
    )
    for field in fields:
        value = getattr(inner, field, None)
        if isinstance(value, str):
            found.add(value)
    found.update(getattr(inner, "refs", ()))
    for result in getattr(inner, "results", ()) or ():
        found.add(result.task_id)
    result = getattr(inner, "result", None)
    if result is not None and hasattr(result, "task_id"):
        found.add(result.task_id)
    return found


def check_effects(effects: list[Effect]) -> None:
    """An effect list as the broker runs it: Effects only; at most one answer, and last; a
    record is journaled before anything that tells of it; a task settles at most once."""
    assert all(isinstance(e, Effect) for e in effects), effects
    answers = [i for i, e in enumerate(effects) if isinstance(e, Answer | AnswerFromOutput)]
    assert len(answers) <= 1 and (not answers or answers[0] == len(effects) - 1), effects
    first_journal: dict[str, int] = {}
    for i, e in enumerate(effects):
        if isinstance(e, Journal):
            first_journal.setdefault(_key(e.record), i)
    for i, e in enumerate(effects):
        if isinstance(e, OpenNote) and e.restored:
            continue  # a restart: the task's note, written long before, is taken over
        if isinstance(e, _TELLS):
            for ref in _mentions(e):
                assert first_journal.get(ref, -1) < i, f"{e!r} told before {ref} was journaled"
    settled = [r.task_id for r in journaled(effects, TaskRecord) if r.terminal]
    assert len(settled) == len(set(settled)), effects
    for e in effects:
        if isinstance(e, StartTimer):
            assert 0.0 <= e.delay < float("inf"), e


# ------------------------------------------------------------------ the state's invariants


def check_invariants(s: SessionState, watchers: dict[str, WatcherState] | None = None) -> None:
    """What ``protocol.session.state`` promises after every step (and, given the live
    watchers' states, that ``subscribers`` routes to them)."""
    # names index agents: each name names the newest agent of that name; a live agent owns it
    for name, agent_id in s.names.items():
        assert s.agents[agent_id].name == name
    for row in s.agents.values():
        assert row.name in s.names
        if not row.closed:
            assert s.names[row.name] == row.agent_id
    # one active task per agent, and every open task is exactly one agent's active task
    active = [row.active_task for row in s.agents.values() if row.active_task is not None]
    assert len(active) == len(set(active))
    assert set(active) == {t for t, r in s.tasks.items() if not r.terminal}
    for row in s.agents.values():
        if row.active_task is not None:
            assert s.tasks[row.active_task].agent_id == row.agent_id
            assert not row.closed
    # a task's pending_requests index the pending requests of the request table
    pending = s.requests.pending()
    for task_id, record in s.tasks.items():
        mine = sorted(r.request_id for r in pending if r.task_id == task_id)
        assert len(set(record.pending_requests)) == len(record.pending_requests)
        if record.terminal:
            assert record.pending_requests == () and record.waiting_since is None
            assert record.result is not None and task_id in s.results
            continue
        assert sorted(record.pending_requests) == mine, (task_id, record.pending_requests, mine)
        waiting = record.state is TaskState.WAITING
        assert waiting == bool(record.pending_requests) == (record.waiting_since is not None)
        assert record.result is None and task_id not in s.results
        # a waiting task has its episode, since the time it began to wait
        episode = s.stale.get(task_id)
        assert (episode is not None) == waiting
        if episode is not None:
            assert episode.since == record.waiting_since
    assert set(s.stale) <= set(s.tasks)
    assert set(s.requests.wait_edges()) == {(r.sender_id, r.target_id) for r in pending}
    # subscribers index the watchers' pending tasks that are not settled yet
    for task_id, watcher_ids in s.subscribers.items():
        assert watcher_ids and len(watcher_ids) == len(set(watcher_ids))
        # (a settled worktree task's watchers wait for its changes: protocol.session.worktrees)
        assert task_id not in s.results or task_id in s.diffing, f"{task_id} has subscribers"
        for watcher_id in watcher_ids:
            assert watchers is None or task_id in watchers[watcher_id].pending
    assert not s.folded_watchers, "resume hands every folded watcher to its actor"
    for watcher in (watchers or {}).values():
        assert watcher.pending, "a watcher with nothing pending is kept"
        assert watcher.pending <= set(watcher.ids)
        buffered = [r.task_id for r in watcher.buffer]
        assert len(buffered) == len(set(buffered)) and set(buffered) <= watcher.pending
        for task_id in watcher.pending - set(buffered):
            assert watcher.watcher_id in s.subscribers.get(task_id, [])
    assert set(s.turn_stats) <= {t for t, r in s.tasks.items() if not r.terminal}
    assert not s.endings, "every ending routed to a task was reported"


def snapshot(s: SessionState, *, activity: bool = True) -> dict[str, Any]:
    """Everything the rules may change, by value (``activity``: with ``last_active_at``)."""
    rows = (
        s.agents
        if activity
        else {a: msgspec.structs.replace(r, last_active_at=None) for a, r in s.agents.items()}
    )
    return {
        "agents": dict(rows),
        "names": dict(s.names),
        "tasks": dict(s.tasks),
        "requests": dict(s.requests.items()),
        "pending": [r.request_id for r in s.requests.pending()],
        "edges": sorted(s.requests.wait_edges()),
        "prompts": dict(s.prompts),
        "subscribers": {t: list(w) for t, w in s.subscribers.items()},
        "stale": dict(s.stale),
        "turns": dict(s.turns),
        "turn_stats": dict(s.turn_stats),
    }


# ------------------------------------------------------------------ the session


class Session:
    """One session's state driven through its rules, as the broker would (without actors)."""

    def __init__(self, settings: Settings | None = None, *, now: float = T0) -> None:
        self.state = SessionState(SESSION, settings or Settings())
        self.ids = FixedIds()
        self.now = now
        self.journal: list[msgspec.Struct] = []
        self.heard: list[Notify] = []
        self.timers: dict[TimerKey, TimerEvent | TaskDue] = {}
        self.settled: set[str] = set()
        #: each live watcher's state, as its actor holds it
        self.watchers: dict[str, WatcherState] = {}
        #: each live task's record, as its actor holds it, what it was told it spent, and its
        #: soft warnings
        self.task_actors: dict[str, TaskRecord] = {}
        self.task_spent: dict[str, Usage | None] = {}
        self.task_soft: dict[str, Soft | None] = {}
        self.task_stale: dict[str, Stale | None] = {}

    def ctx(self) -> Ctx:
        return Ctx(self.now, self.ids)

    def to_parent(self, told: Notify) -> bool:
        """Did ``told`` reach the parent's sink? A ``wait`` caller's watcher is not journaled:
        its notes go to that caller and go with the old parent."""
        note = told.note
        if not isinstance(note, TaskCompletion):
            return True
        return any(
            isinstance(r, WatcherRecord) and r.watcher_id == note.watcher_id for r in self.journal
        )

    def run(self, effects: list[Effect]) -> list[Effect]:
        """The session's ``effects`` run, then what its tasks' reports led to, then what the
        watchers did with what was handed to them (their timers, their notifications)."""
        ran, by_watchers = self._run(effects)
        check_invariants(self.state, self.watchers)
        # an actor per open task, and per settled one whose worktree changes are being listed
        live = {t for t, r in self.state.tasks.items() if not r.terminal} | self.state.diffing
        assert set(self.task_actors) == live, (sorted(self.task_actors), sorted(live))
        # a call is answered once the tasks it told have reported (actors.session.task_routes)
        answers = [e for e in ran if isinstance(e, Answer | AnswerFromOutput)]
        assert len(answers) <= 1, ran
        return [*(e for e in ran if e not in answers), *answers, *by_watchers]

    def _run(self, effects: list[Effect]) -> tuple[list[Effect], list[Effect]]:
        check_effects(effects)
        ran: list[Effect] = list(effects)
        by_watchers: list[Effect] = []
        reports: list[task_budget.AnyReport] = []  # acted on once this run is over, as the broker
        for e in effects:
            match e:
                case SpawnTask(record=record, usage=usage, soft=soft, stale=stale):
                    assert record.task_id not in self.task_actors, e
                    self.task_actors[record.task_id] = record
                    self.task_spent[record.task_id] = usage
                    self.task_soft[record.task_id] = soft
                    self.task_stale[record.task_id] = stale
                    self._arm(record.task_id)
                case TellTask(task_id=task_id, message=message):
                    record = self.task_actors[task_id]  # routed only to a live task
                    if isinstance(message, task_rules.Spent):
                        self.task_spent[task_id] = message.usage
                    soft = self.task_soft[task_id]
                    record, soft, report = task_budget.told(record, soft, message)
                    self.task_actors[task_id], self.task_soft[task_id] = record, soft
                    self._arm(task_id)
                    if report is not None:
                        reports.append(report)
                case StopTask(task_id=task_id):
                    record = self.task_actors.pop(task_id)
                    del self.task_spent[task_id]
                    del self.task_soft[task_id]
                    del self.task_stale[task_id]
                    assert record.terminal and self.state.tasks[task_id] == record, e
                    assert ("deadline", task_id) not in self.timers, e
                case SpawnWatcher(watcher=watcher):
                    assert watcher.watcher_id not in self.watchers, e
                    self.watchers[watcher.watcher_id] = watcher
                case HandOver(watcher_id=watcher_id, result=result, opened=opened):
                    state = self.watchers[watcher_id]
                    coalesce_s = self.state.settings.coalesce_ms / 1000.0
                    self.watchers[watcher_id], opens = watcher_rules.take(
                        state, result, opened, coalesce_s, self.now
                    )
                    if opens is not None:
                        by_watchers.append(opens)
                        self.timers[opens.event.key] = opens.event
                case Journal(record=record):
                    self.journal.append(record)
                    if isinstance(record, TaskRecord) and record.terminal:
                        assert record.task_id not in self.settled, "a task settled twice"
                        self.settled.add(record.task_id)
                case Notify():
                    self.heard.append(e)
                case StartTimer(event=event):
                    self.timers[event.key] = event
                case CancelTimer(key=key):
                    self.timers.pop(key, None)
                case Deliver(agent_id=agent_id, envelope=env):
                    # a closed or unknown agent is sent nothing
                    assert agent_id in self.state.agents, e
                    assert env.target_id == agent_id, e
                    assert not self.state.agents[agent_id].closed, e
        for report in reports:
            more, watched = self._run(settlement.reported(self.state, report, self.ctx()))
            ran += more
            by_watchers += watched
        return ran, by_watchers

    def _arm(self, task_id: str) -> None:
        """A task's actor arms its timer for its deadline, the end or the soft share of its
        minutes, or its wait's stale point (:func:`protocol.session.task_budget.alarm`), or
        cancels it."""
        record, soft, stale = (
            self.task_actors[task_id],
            self.task_soft[task_id],
            self.task_stale[task_id],
        )
        deadline = task_budget.alarm(record, soft, stale)
        if deadline is None:
            self.timers.pop(("deadline", task_id), None)
        else:
            due = TaskDue(task_id=task_id, at=deadline)
            self.timers[due.key] = due

    def deadline_armed(self, task_id: str) -> float | None:
        """When the task's own timer goes off (None: none armed): its deadline, its minutes'
        end or their soft share, the earliest."""
        due = self.timers.get(("deadline", task_id))
        return due.at if isinstance(due, TaskDue) else None

    def refuses(self, error: type[ShepherdError], rule: Callable[[], object]) -> ShepherdError:
        """``rule()`` raises ``error`` and changes nothing."""
        before = snapshot(self.state)
        with pytest.raises(error) as info:
            rule()
        assert snapshot(self.state) == before
        check_invariants(self.state)
        return info.value

    # --- the parent's operations

    def call(self, args: Any) -> list[Effect]:
        return self.run(calls.call(self.state, args, self.ctx()))

    def call_refused(self, args: Any, error: type[ShepherdError]) -> ShepherdError:
        return self.refuses(error, lambda: calls.call(self.state, args, self.ctx()))

    def spawn(self, name: str) -> str:
        result = answer(self.call(api.SpawnArgs(name=name)))
        return str(result.agent_id)

    def delegate(self, target: str, task: str = "do the thing", **kw: Any) -> str:
        result = answer(self.call(api.DelegateArgs(target=target, task=task, **kw)))
        return str(result.task_id)

    def parent_says(self, target: str, text: str = "hello", **kw: Any) -> list[Effect]:
        return self.call(api.MessageArgs(target=target, message=text, **kw))

    # --- what agents send

    def envelope(self, cls: type[S], sender: str, target: str = PARENT_ID, **fields: Any) -> S:
        message_id = fields.pop("message_id", None) or self.ids.new(IdKind.MESSAGE)
        return cls(
            message_id=message_id,
            session_id=SESSION,
            sender_id=sender,
            target_id=target,
            created_at=fields.pop("created_at", self.now),
            **fields,
        )

    def send(self, env: AnyEnvelope) -> list[Effect]:
        return self.run(inbound.envelope(self.state, env, self.ctx()))

    def send_refused(self, env: AnyEnvelope, code: str) -> AckEnvelope:
        """An agent's envelope refused with a receipt naming ``code``; nothing else changed
        (but when the agent was last heard from)."""
        before = snapshot(self.state, activity=False)
        effects = self.send(env)
        assert snapshot(self.state, activity=False) == before
        ack = receipt(effects)
        assert not ack.accepted and ack.error is not None and ack.error.code == code, ack
        # (an ending the task refused was routed to it: its receipt is all that came of it)
        assert all(isinstance(e, Deliver | Publish | TellTask) for e in effects), effects
        return ack

    def message(self, sender: str, target: str, text: str = "hi", **kw: Any) -> list[Effect]:
        return self.send(self.envelope(MessageEnvelope, sender, target, content=text, **kw))

    def ask(self, sender: str, target: str, question: str = "which file?", **kw: Any) -> str:
        """An agent asks (expects a reply); the request's id."""
        effects = self.message(sender, target, question, expects_reply=True, **kw)
        ack = receipt(effects)
        assert ack.accepted and ack.request_id is not None, ack
        return ack.request_id

    def reply(self, sender: str, request_id: str, text: str = "yes", **kw: Any) -> list[Effect]:
        target = kw.pop("target", None) or self.state.requests[request_id].sender_id
        env = self.envelope(ReplyEnvelope, sender, target, content=text, reply_to=request_id, **kw)
        return self.send(env)

    def done(self, agent_id: str, status: str = "completed", **kw: Any) -> list[Effect]:
        return self.send(self.envelope(TaskDoneEnvelope, agent_id, status=status, **kw))

    def runtime(self, agent_id: str, event: str, **kw: Any) -> list[Effect]:
        return self.send(self.envelope(RuntimeEnvelope, agent_id, event=event, **kw))

    def exit(self, agent_id: str, exit_code: int | None = 0, **kw: Any) -> list[Effect]:
        return self.run(agents.exited(self.state, agent_id, exit_code, self.ctx(), **kw))

    # --- time

    def fired(self, event: TimerEvent | TaskDue) -> list[Effect]:
        """What a timer's event does: a session timer goes through the session's rules; a
        watcher's ``Flush`` through that watcher's (its notification; done: it is gone); a
        task's deadline through its own (what it reports, through the session's)."""
        if isinstance(event, TaskDue):
            return self._due(event)
        if not isinstance(event, Flush):
            return calls.fire(self.state, event, self.ctx())
        state = self.watchers.get(event.watcher_id)
        if state is None:
            return []  # done already: its actor is gone, and its timer with it
        state, note = watcher_rules.flush(state, self.now)
        if watcher_rules.done(state):
            del self.watchers[event.watcher_id]
        else:
            self.watchers[event.watcher_id] = state
        return [] if note is None else [Notify(note=note)]

    def _due(self, event: TaskDue) -> list[Effect]:
        """A task's timer went off: its actor decides, and the session acts on its report,
        unrouted. Gone already (settled, its actor stopped): nothing."""
        task_id = event.task_id
        record = self.task_actors.get(task_id)
        if record is None:
            return []
        spent, soft = self.task_spent[task_id], self.task_soft[task_id]
        record, soft, report = task_budget.rang(record, soft, event.at, self.now, spent)
        if report is None:  # no end, no soft share: its wait may be stale (as the actor)
            self.task_stale[task_id], report = task_stale.rang(
                record, self.task_stale[task_id], event.at, self.now
            )
        self.task_actors[task_id], self.task_soft[task_id] = record, soft
        self._arm(task_id)
        if report is None:
            return []
        return settlement.reported(self.state, report, self.ctx())

    def fire(self, event: TimerEvent | TaskDue) -> list[Effect]:
        return self.run(self.fired(event))

    def ring(self, task_id: str) -> list[Effect]:
        """Time runs to the task's armed timer, and it goes off (whatever it was armed for:
        its deadline, its minutes' end or their soft share)."""
        at = self.deadline_armed(task_id)
        assert at is not None, f"no timer armed for {task_id}"
        self.now = max(self.now, at)
        return self.fire_timer(("deadline", task_id))

    def pass_deadline(self, task_id: str) -> list[Effect]:
        """Time runs to the task's deadline (its own, or its minutes' end, the earlier), its
        timer going off on the way (the soft share of its minutes warns first); none armed
        (the task settled: its actor cancelled it): a timer's mail that crossed that
        arrives."""
        at = self.deadline_armed(task_id)
        if at is None:
            return self.fire(TaskDue(task_id=task_id, at=self.now))
        effects: list[Effect] = []
        while (at := self.deadline_armed(task_id)) is not None:
            end = task_rules.deadline(self.task_actors[task_id])
            effects += self.ring(task_id)
            if end is not None and at >= end:
                break
        return effects

    def fire_timer(self, key: TimerKey) -> list[Effect]:
        """Let the armed timer ``key`` go off at its time."""
        event = self.timers.pop(key)
        return self.fire(event)
