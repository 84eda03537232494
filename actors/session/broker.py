"""BrokerActor: the session's rules at work.

The rules are :mod:`protocol.session` (sans-IO: a function of the state and an event,
returning effects). This actor owns the session's state and the handles the rules cannot
hold (agent actors, timers, the journal, the sinks), and does three things with each message:
match it, call the rule, run the effects the rule returned, in order.

Rules of the runner:
- **Durable before told, with group commit.** A run's records (its ``Journal`` effects) go to
  the journal's one writer (:mod:`actors.session.journal_writer`); the rest of the run is
  *held* (:mod:`actors.session.held`) until they are durable, then run in the order given.
  Meanwhile this actor goes on deciding: the records of every run decided while a write ran
  go in the next write. While any run is held, every later one is held behind it, records or
  not (nothing overtakes: a ``status`` is answered once what was decided before it is
  durable). The caller of a held run gets its answer later (:meth:`answer_later`). A write
  that fails stops the session (fail-stop, :meth:`BrokerActor._stop_deciding`): no held run
  is run, each caller is told ``session_unavailable``. A batch of inbound envelopes (one
  receiving pass) is one run: each envelope's rule in order, all their records in one write,
  then each one's other effects in order. ``Drain`` is answered once every earlier run ran.
- Each effect's runner is found by its type (one dict lookup). What goes to other actors
  (notes, results to watchers, the watchdog) is gathered over the run: one message per actor.
- A watcher is an actor of its own (``SpawnWatcher``, ``HandOver``): this actor keeps only its
  address until it is done; its pending, buffered and delivered results and its coalescing
  window are its own.
- A task is an actor of its own too (:mod:`actors.session.task_routes`): it decides its
  waiting transitions and its settlement; its reports come back here, where the session's
  rules act on them (``tasks`` is their read model). A cancel is answered once it decided.
- The answer to an operation is its ``Answer`` effect, or a future of it (``read``: the
  agent's actor holds its output); the edge resolves a future.
- Timers, git, checks and node caps hand their event back to this actor; the rules ignore an
  event that no longer applies (a timer cancelled too late, a check of a settled task).
- The transport authenticated and de-duplicated every envelope that reaches this actor.
- After a parent restart (``restore``), the first thing it does is run the effects of
  :func:`protocol.session.restore.resume`: the same effects as a live session, no second path.
"""

from __future__ import annotations

import contextlib
import functools
import os
import typing
from collections.abc import Callable
from typing import Any

import pykka

from actors.child.adapters import check_spawn_options
from actors.records.journal import Journal
from actors.records.notes import TaskNotes
from actors.runtime.log import logger
from actors.runtime.runtime import ShepherdActor, tell_quietly
from actors.runtime.transport import PARENT_INBOX, DeliveryFailed, NotHandled, Refusals, Transport
from actors.session import messages
from actors.session.agent import Launcher
from actors.session.agent_routes import AgentRoutes
from actors.session.checks import CheckRunner
from actors.session.held import HeldRuns
from actors.session.journal_writer import Committed, JournalFailed, JournalWriter
from actors.session.note_writer import NoteWriter
from actors.session.outlets import Outlets
from actors.session.runs import WATCHDOG_EFFECTS, Run, split_records
from actors.session.sinks import GuardedSink
from actors.session.task_actor import TaskReport
from actors.session.task_routes import TaskRoutes
from actors.session.timers import Timers
from actors.session.watcher_routes import WatcherRoutes
from actors.session.worktrees import GitWorker
from protocol.calls import api
from protocol.core.errors import ShepherdError
from protocol.records.notifications import Notice
from protocol.records.settings import Settings
from protocol.session import (
    agents,
    calls,
    inbound,
    settlement,
    status,
    watchers,
    worktrees,
)
from protocol.session import effects as fx
from protocol.session.batch import first_spawn
from protocol.session.restore import Restore, resume
from protocol.session.state import Ctx, SessionState
from protocol.wire.envelopes import AnyEnvelope

__all__ = ["BrokerActor"]

#: the reply of the message being handled (the default of :meth:`BrokerActor._run`)
_ASKED: Any = object()

#: the session's timers' events (each handed back to :func:`protocol.session.calls.fire`)
_TIMERS = frozenset(typing.get_args(fx.SessionTimer))
#: what a stopped session answers with ``session_unavailable`` (the rest waits for the next)
_REFUSED_WHEN_STOPPED = (
    messages.ParentCall,
    messages.Inbound,
    messages.InboundBatch,
    messages.WaitFor,
)


class BrokerActor(ShepherdActor):
    def __init__(
        self,
        session_id: str,
        settings: Settings,
        transport: Transport,
        launcher: Launcher,
        sink: GuardedSink,
        journal: Journal,
        tap: Callable[[str], None] | None = None,
        notes: TaskNotes | None = None,
        watchdog_factory: Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]] | None = None,
        restore: Restore | None = None,
        spans: Any = None,
        git: GitWorker | None = None,
        checks: CheckRunner | None = None,
    ) -> None:
        super().__init__()
        #: the session's tracing (actors.tracing.parent.ParentSpans), when it is on: it sees
        #: each effect before it runs and stamps the trace context on what is delivered
        self._spans = spans
        #: the session's state: the one owner of every fact the rules know
        self.state = restore.state if restore is not None else SessionState(session_id, settings)
        self._restore = restore
        self._transport = transport
        self._sink = sink
        self._journal = journal
        self._notes = notes
        log = self._log = logger.bind(session=session_id)
        self._coalesce_s = settings.coalesce_ms / 1000.0
        #: the parent's sink, receipts, notes, the watchdog (it observes; the rules only tell
        #: it what happens), git, the tasks' checks, the story
        watchdog = watchdog_factory(self.actor_ref) if watchdog_factory else None
        outlets = self._outlets = Outlets(
            self.actor_ref, sink, transport, log, tap=tap, watchdog=watchdog, git=git, checks=checks
        )
        #: the agents', the tasks' and the watchers' actors: where their mail goes (and the
        #: parent's calls waiting for their tasks)
        self._agents = AgentRoutes(
            self.runtime, self.actor_ref, launcher, transport, session_id, settings.output_lines
        )
        self._tasks = TaskRoutes(self.runtime, self.actor_ref, log)
        self._watchers = WatcherRoutes(self.runtime, sink, self.state.result_of, log)
        self._timers = Timers(self.clock, functools.partial(tell_quietly, self.actor_ref))
        #: each effect's runner, by the effect's type (a dict lookup, not a chain of matches)
        self._runners: dict[type, Callable[[Any, Run], None]] = {
            fx.Notify: outlets.notify,
            fx.Deliver: self._agents.deliver,
            fx.Forward: self._agents.forward,
            fx.Publish: outlets.publish,
            fx.SpawnAgent: self._agents.spawn,
            fx.StopAgent: self._agents.stop,
            fx.StartTimer: lambda e, _: self._timers.start(e.delay, e.event),
            fx.CancelTimer: lambda e, _: self._timers.cancel(e.key),
            fx.OpenNote: outlets.note,
            fx.AppendNote: outlets.note,
            fx.FinaliseNote: outlets.note,
            fx.SpawnWatcher: lambda e, run: self._watchers.spawn(e, run, self._coalesce_s),
            fx.SpawnTask: self._tasks.spawn,
            fx.TellTask: self._tasks.tell,
            fx.StopTask: self._tasks.stop,
            fx.HandOver: WatcherRoutes.gather,
            fx.Story: outlets.story,
            fx.Log: lambda e, _: self._log.log(e.level.upper(), e.text),
            fx.ProbeWorktree: outlets.probe,
            fx.ProbeMerge: outlets.probe_merge,
            fx.RunCheck: outlets.run_check,
            fx.StopCheck: outlets.stop_check,
            **dict.fromkeys(WATCHDOG_EFFECTS, outlets.watched),
        }
        #: why the session stopped deciding (its journal failed), or None
        self._stopped: str | None = None
        #: the runs decided whose effects wait for their records (or an earlier run's) to be
        #: durable, and the journal's one writer they go to (started with this actor)
        self._held = HeldRuns(self._tell_helpers, self._log, self._tasks.defer)
        #: the replies of ``Drain`` waiting for what was told to tasks to be decided
        self._drains: list[Any] = []

    def on_start(self) -> None:
        self._held.writer = self.runtime.spawn(JournalWriter, self._journal, self.actor_ref)
        if self._notes is not None:
            self._outlets.note_writer = self.runtime.spawn(NoteWriter, self._notes, self._sink)
        if self._restore is not None:
            restore, self._restore = self._restore, None
            self._run(resume(restore, self._ctx()))

    def _ctx(self) -> Ctx:
        return Ctx(self.clock.now(), self.runtime.ids)

    # ------------------------------------------------------------------ match, call the rule

    def on_receive(self, message: Any) -> Any:
        if self._stopped is not None:  # a call or an envelope is told so; the rest waits
            if isinstance(message, _REFUSED_WHEN_STOPPED):
                raise NotHandled(self._stopped)
            return None
        if type(message) is TaskReport:  # the most frequent message at scale: first
            return self._reported(message)
        state = self.state
        match message:
            case Committed(upto=upto):
                return self._held.release(upto)
            case JournalFailed(error=error):
                return self._held.fail(self._stop_deciding(error))
            case messages.Drain():  # answered once everything decided before it was run
                if self._tasks.in_flight:  # and what was told to tasks is decided and run
                    self._drains.append(self.answer_later())
                elif self._held:
                    self._hold([], lambda: None, Run())
                return None
            case messages.ParentCall(args=args):
                return self._call(args)
            case messages.Inbound(envelope=env):
                return self._run(inbound.envelope(state, env, self._ctx()), answering=True)
            case messages.InboundBatch(envelopes=envelopes):
                return self._inbound_batch(envelopes)
            case messages.AgentExited():
                exit_code, why, early = message.exit_code, message.reason, message.before_ready
                effects = agents.exited(
                    state, message.agent_id, exit_code, self._ctx(), reason=why, before_ready=early
                )
                return self._run(effects)
            case messages.DeliveryFailed(envelope=env, error=error):
                return self._run(inbound.delivery_failed(state, env, error, self._ctx()))
            case _ if type(message) in _TIMERS:
                self._timers.fired(message)
                self._run(calls.fire(state, message, self._ctx()))
                return None
            case _ if type(message) in calls.EVENTS:  # a helper's news: its rule decides
                return self._run(calls.EVENTS[type(message)](state, message, self._ctx()))
            case messages.WorktreeOf(agent_id=agent_id):
                return worktrees.worktree_of(state, agent_id)
            case messages.WaitFor(ids=ids):
                effects = watchers.watch(state, ids, self._ctx(), journaled=False)
                return self._run(effects, waiting=message)
            case _:
                return super().on_receive(message)

    def _inbound_batch(self, envelopes: tuple[AnyEnvelope, ...]) -> Refusals | None:
        """Each envelope through the same rule as ``Inbound``, in order, and their effects as
        ONE run: every record of the batch in one journal write (one fsync), before any other
        effect; then each envelope's other effects, in order; one message to each helper actor
        at the end. One that fails is refused alone (the transport quarantines it and tells its
        sender); the others stay handled, so the transport acknowledges them. A journal write
        that fails stops the session: none of the batch is taken (:class:`NotHandled`)."""
        refused: dict[str, ShepherdError] = {}
        records: list[Any] = []
        decided: list[tuple[str, list[fx.Effect]]] = []  # each one's effects but its records
        for env in envelopes:
            try:
                effects = self._seen(inbound.envelope(self.state, env, self._ctx()))
            except Exception as exc:
                refused[env.message_id] = self._failed_on(env.message_id, exc)
                continue
            some, rest = split_records(effects)
            records += some
            decided.append((env.message_id, rest))
        run = Run(answering=True)  # taken once what it told its tasks is decided, and durable

        def work() -> Refusals | None:
            for message_id, effects in decided:
                try:
                    self._effects(effects, run)
                except Exception as exc:
                    refused[message_id] = self._failed_on(message_id, exc)
            return refused or None

        if records or self._held:  # if the write fails, none of the batch is taken (fail-stop)
            self._hold(records, work, run)
            return None
        try:
            answer = work()
        finally:
            self._tell_helpers(run)
        taken: Refusals | None = self._answer(run, answer, _ASKED)
        return taken

    def _failed_on(self, message_id: str, exc: Exception) -> ShepherdError:
        self._log.exception("the session failed on envelope {}", message_id)
        return DeliveryFailed(f"the session failed on it: {exc!r}")

    def _call(self, args: Any) -> Any:
        if isinstance(args, api.StatusArgs):
            wake_mode = getattr(self._transport, "wake_mode", None)  # the mailbox's, if any
            wake = wake_mode(PARENT_INBOX) if callable(wake_mode) else None
            now = self.clock.now()
            view = status.view(self.state, args.agent, now, cursor=args.cursor, parent_wake=wake)
            if not self._held:
                return view
            # what it shows is told once what was decided before it is durable
            self._hold([], lambda: view, Run())
            return None
        if isinstance(args, api.SpawnArgs):
            agents.check_spawn(self.state, args)
        one = first_spawn(args)
        # the child's own checks, run here first: what spawn accepts, the child can run (a
        # spawn_many's options are the same for every name: checked once); a node checks
        # its own
        if one is not None and one.adapter != "simulated" and one.node is None:
            check_spawn_options(one.adapter, agents.options_of(one), os.getcwd())
        return self._run(calls.call(self.state, args, self._ctx()), answering=True)

    def _reported(self, told: TaskReport) -> None:
        """A task's report, decided by the session's rules. The reports a parent's call (or an
        agent's envelope) waits for are run together once the last is in, and answer it (with
        the report's answer, else the call's own)."""
        report, call, last = self._tasks.reported(told)
        effects = [] if report is None else settlement.reported(self.state, report, self._ctx())
        if call is None:
            self._run(effects, reply=None)
        elif not last:
            if call.held is None:  # its place: nothing decided from now on overtakes it
                call.held = self._held.open()
            call.effects += self._seen(effects)
        else:
            effects = call.effects + self._seen(effects)
            if call.reply is not None and not any(type(e) is fx.Answer for e in effects):
                effects.append(fx.Answer(value=call.answer))
            if call.held is None:
                self._run(effects, reply=call.reply, seen=True)
            else:
                records, rest = split_records(effects)
                run = Run()
                work = functools.partial(self._effects, rest, run)
                self._held.close(call.held, records, work, run, call.reply)
        if self._drains and not self._tasks.in_flight:
            drains, self._drains = self._drains, []
            for drain in drains:
                self._run([], reply=drain)

    def capability_of(self, agent_id: str) -> str | None:
        row = self.state.agents.get(agent_id)
        return row.capability if row else None

    # ------------------------------------------------------------------ run the effects

    def _run(
        self,
        effects: list[fx.Effect],
        waiting: messages.WaitFor | None = None,
        reply: Any = _ASKED,
        *,
        answering: bool = False,
        seen: bool = False,
    ) -> Any:
        """Run ``effects`` in order; the answer is the ``Answer`` among them. ``waiting``: the
        ``wait`` whose watcher this run starts (else a watcher's notifications go to the
        parent's sink). ``reply``: where the answer goes (by default, to whoever asked what
        is being handled; None: nobody). ``answering``: a parent's call or an agent's
        envelope, answered (taken) once the tasks it tells have decided and what they
        reported is durable (:mod:`actors.session.task_routes`). A run of consecutive
        ``Journal`` effects is ONE journal write (one fsync): a batch operation's records are
        durable together, before any effect that tells of them. ``seen``: the effects were
        shown to the tracing already."""
        effects = effects if seen else self._seen(effects)
        run = Run(waiting, answering=answering)
        if self._held or any(type(e) is fx.Journal for e in effects):
            records, rest = split_records(effects)
            self._hold(records, lambda: self._effects(rest, run), run, reply)
            return None
        try:
            answer = self._effects(effects, run)
        finally:
            self._tell_helpers(run)
        return self._answer(run, answer, reply)

    def _answer(self, run: Run, answer: Any, reply: Any) -> Any:
        """Answer a run that ran at once: to ``reply`` (``_ASKED``: what is handled), or, if
        it told tasks for a call, once they have reported."""
        if run.later is not None:
            reply = self.answer_later() if reply is _ASKED else reply
            if self._tasks.defer(run.later, reply, answer):
                return None  # answered once the tasks it told have reported
        if reply is _ASKED:
            return answer
        if reply is not None:
            reply.set(answer)
        return None

    def _hold(
        self, records: list[Any], work: Callable[[], Any], run: Run, reply: Any = _ASKED
    ) -> None:
        """``records`` to the writer, ``work`` (which answers) held until they, and every run
        held before, are durable; the caller's answer is what ``work`` returns then."""
        self._held.hold(records, work, run, self.answer_later() if reply is _ASKED else reply)

    def _seen(self, effects: list[fx.Effect]) -> list[fx.Effect]:
        """Each effect stamped with its trace (when tracing is on), before any runs."""
        if self._spans is None:
            return effects
        return [self._spans.seen(effect) for effect in effects]

    def _effects(self, effects: list[fx.Effect], run: Run) -> Any:
        """Run ``effects`` in order into ``run``; the ``Answer`` among them."""
        answer: Any = None
        runners = self._runners
        for effect in effects:
            kind = type(effect)
            if kind is fx.Answer:
                answer = effect.value  # type: ignore[attr-defined]
            elif kind is fx.AnswerFromOutput:
                assert isinstance(effect, fx.AnswerFromOutput)
                answer = self._agents.output(effect)
            elif (runner := runners.get(kind)) is not None:
                runner(effect, run)
            else:  # a new kind of effect: its runner belongs in ``_runners``
                raise TypeError(f"the broker has no runner for {kind.__name__} effects")
        return answer

    def _tell_helpers(self, run: Run) -> None:
        """What a run gathered for the helper actors: one message each (sent even when the run
        stopped: what was decided before a failure is still told)."""
        self._outlets.flush(run)
        self._watchers.hand(run)

    def _stop_deciding(self, exc: Exception) -> NotHandled:
        """Fail-stop: the rules changed the state in memory before the append, so it is ahead
        of the records now. From here on every call and every envelope is refused with
        ``session_unavailable`` (:class:`NotHandled`: the transport leaves the envelopes,
        those of the failed batch too, for the parent started next, which resumes from the
        records); timers and exits wait for it too. The parent is told once: a
        ``session_stopped`` notice if the records take it, the log always."""
        self._stopped = (
            f"the session stopped: its journal could not be written ({exc!r}), so nothing "
            "after its last record was decided or told; start the parent again to resume "
            "from its records (what its agents sent meanwhile waits for it)"
        )
        self._log.error(self._stopped)
        self._tasks.fail(NotHandled(self._stopped))
        with contextlib.suppress(Exception):  # the records may refuse this too
            self._sink(
                Notice(created_at=self.clock.now(), code="session_stopped", text=self._stopped)
            )
        error = NotHandled(self._stopped)
        error.__cause__ = exc
        return error
