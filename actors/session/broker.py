"""BrokerActor: the session's rules at work.

The rules are :mod:`protocol.session` (sans-IO: a function of the state and an event,
returning effects). This actor owns the session's state and the handles the rules cannot
hold (agent actors, timers, the journal, the sinks), and does three things with each message:
match it, call the rule, run the effects the rule returned, in order.

Rules of the runner:
- Effects run in the order given; a journal append that fails stops the run (what it
  records is not told: durable before anyone hears of it).
- The answer to an operation is its ``Answer`` effect, or a future of it (``read``: the
  agent's actor holds its output). The edge resolves a future; there is no other way of
  saying "the answer comes later".
- A timer hands its event back to this actor; the rules ignore an event that no longer
  applies (a timer cancelled too late, or fired early by the simulation).
- A coalescing window (a ``Flush`` timer) closes on time even behind a backlog: before each
  message, the windows whose time has come are flushed (:mod:`actors.session.windows`, one
  timer for them all). A timer's event waits in this actor's mailbox behind everything that
  arrived before it, and when thousands of ``done`` arrive at once every window would
  otherwise close only after the last of them was handled: each notification paid for the
  whole burst. Only ``Flush`` is brought forward: a deadline's event keeps its place (what
  reached the broker before it is handled first, as part of the task).
- The transport authenticated and de-duplicated every envelope that reaches this actor: it
  trusts them (:mod:`actors.runtime.transport`).
- After a parent restart (``restore``), the first thing it does is run the effects of
  :func:`protocol.session.restore.resume`: the same effects as a live session, no second path.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import pykka

from actors.child.adapters import check_spawn_options
from actors.records.journal import Journal
from actors.records.notes import TaskNotes
from actors.runtime.clock import TimerHandle
from actors.runtime.crashpoints import crashpoint
from actors.runtime.log import logger
from actors.runtime.runtime import ShepherdActor, tell_quietly
from actors.runtime.transport import PARENT_INBOX, DeliveryFailed, Refusals, Transport
from actors.session import messages
from actors.session.agent import AgentActor, AgentSpec, Launcher
from actors.session.sinks import GuardedSink
from actors.session.task import TaskActor
from actors.session.watcher import WatcherActor
from actors.session.windows import Windows, WindowsDue
from protocol import api
from protocol.envelopes import AnyEnvelope
from protocol.errors import ShepherdError
from protocol.notifications import TaskCompletion
from protocol.session import agents, calls, inbound, status, watchers
from protocol.session import effects as fx
from protocol.session.restore import Restore, resume
from protocol.session.state import Ctx, SessionState
from protocol.settings import Settings
from protocol.tasks import TaskRecord

__all__ = ["BrokerActor"]

_WATCHDOG = (fx.WatchdogAgent, fx.WatchdogRuntime, fx.WatchdogInstruction, fx.WatchdogTask)


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
    ) -> None:
        super().__init__()
        #: the session's state: the one owner of every fact the rules know
        self.state = restore.state if restore is not None else SessionState(session_id, settings)
        self._restore = restore
        self._transport = transport
        self._launcher = launcher
        self._sink = sink
        self._journal = journal
        self._notes = notes
        self._tap = tap
        #: the watchdog actor (it observes; the rules only tell it what happens)
        self._watchdog = watchdog_factory(self.actor_ref) if watchdog_factory else None
        self._agents: dict[str, pykka.ActorRef[Any]] = {}  # agent id -> its actor
        self._timers: dict[fx.TimerKey, tuple[fx.TimerEvent, TimerHandle]] = {}
        #: open coalescing windows (closing on the monotonic clock), and their one timer
        self._windows = Windows(self.clock, functools.partial(tell_quietly, self.actor_ref))
        self._tasks: dict[str, pykka.ActorRef[Any]] = {}  # open task id -> its actor
        self._watchers: dict[str, pykka.ActorRef[Any]] = {}  # watcher id -> its actor
        self._log = logger.bind(session=session_id)

    def on_start(self) -> None:
        if self._restore is not None:
            restore, self._restore = self._restore, None
            self._run(resume(restore, self._ctx()))

    def _ctx(self) -> Ctx:
        return Ctx(self.clock.now(), self.runtime.ids)

    # ------------------------------------------------------------------ match, call the rule

    def on_receive(self, message: Any) -> Any:
        if self._windows and self._windows.due(now := self.clock.monotonic()):
            self._close_windows(now)
        state = self.state
        match message:
            case messages.ParentCall(args=args):
                return self._call(args)
            case messages.Inbound(envelope=env):
                return self._run(inbound.envelope(state, env, self._ctx()))
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
            case WindowsDue():
                for event in self._windows.fired(message):
                    self._run(calls.fire(state, event, self._ctx()))
                return None
            case fx.TaskDeadline() | fx.RequestTimeout() | fx.StaleDue():
                entry = self._timers.get(message.key)
                if entry is not None and entry[0] is message:
                    del self._timers[message.key]
                self._run(calls.fire(state, message, self._ctx()))
                return None
            case messages.WatchWith(ids=ids, sink=sink):
                effects = watchers.watch(state, ids, self._ctx(), journaled=False)
                return self._run(effects, caller=GuardedSink(sink))
            case _:
                return super().on_receive(message)

    def _inbound_batch(self, envelopes: tuple[AnyEnvelope, ...]) -> Refusals | None:
        """Each envelope through the same rule as ``Inbound``, in order. One that fails is
        refused alone (the transport quarantines it and tells its sender); the others stay
        handled, so the transport acknowledges them."""
        refused: dict[str, ShepherdError] = {}
        for env in envelopes:
            try:
                self._run(inbound.envelope(self.state, env, self._ctx()))
            except Exception as exc:
                self._log.exception("the session failed on envelope {}", env.message_id)
                refused[env.message_id] = DeliveryFailed(f"the session failed on it: {exc!r}")
        return refused or None

    def _call(self, args: Any) -> Any:
        if isinstance(args, api.StatusArgs):
            wake_mode = getattr(self._transport, "wake_mode", None)  # the mailbox's, if any
            wake = wake_mode(PARENT_INBOX) if callable(wake_mode) else None
            now = self.clock.now()
            return status.view(self.state, args.agent, now, cursor=args.cursor, parent_wake=wake)
        if isinstance(args, api.SpawnArgs):
            agents.check_spawn(self.state, args)
            if args.adapter != "simulated":
                # the child's own checks, run here first: what spawn accepts, the child can run
                check_spawn_options(args.adapter, agents.options_of(args), os.getcwd())
        return self._run(calls.call(self.state, args, self._ctx()))

    def capability_of(self, agent_id: str) -> str | None:
        row = self.state.agents.get(agent_id)
        return row.capability if row else None

    # ------------------------------------------------------------------ run the effects

    def _run(self, effects: list[fx.Effect], caller: GuardedSink | None = None) -> Any:
        """Run ``effects`` in order; the answer is the ``Answer`` among them. ``caller``: where
        a watcher spawned here hands its notifications (a ``wait``'s caller; else the
        parent's sink)."""
        answer: Any = None
        for effect in effects:
            match effect:
                case fx.Journal(record=record):
                    settles = isinstance(record, TaskRecord) and record.terminal
                    if settles:
                        crashpoint("settle.before_journal")
                    self._journal.append(record)
                    if settles:
                        crashpoint("settle.after_journal")
                case fx.Notify(note=TaskCompletion() as note):
                    self._hand(note)
                case fx.Notify(note=note):
                    self._sink(note)
                case fx.Deliver(agent_id=agent_id, envelope=env):
                    self._tell(agent_id, messages.Deliver(envelope=env))
                case fx.Forward(agent_id=agent_id, envelope=env):
                    self._tell(agent_id, env)
                case fx.Publish(inbox=inbox, envelope=env):
                    try:
                        self._transport.publish(inbox, env)
                    except ShepherdError as exc:
                        self._log.warning("receipt to {} undeliverable: {}", inbox, exc.message)
                case fx.SpawnAgent():
                    self._spawn(effect)
                case fx.StopAgent(agent_id=agent_id):
                    self._tell(agent_id, messages.CloseAgent())
                case fx.StartTimer(delay=delay, event=fx.TaskDeadline(task_id=task_id) as event):
                    self._tell_task(task_id, messages.ArmDeadline(delay=delay, event=event))
                case fx.CancelTimer(key=("deadline", task_id)):
                    self._tell_task(task_id, messages.DisarmDeadline())
                case fx.StartTimer(delay=delay, event=event):
                    self._start_timer(delay, event)
                case fx.CancelTimer(key=key):
                    self._cancel(key)
                case fx.OpenNote() | fx.AppendNote() | fx.FinaliseNote() | fx.SpawnWatcher():
                    self._task_or_watcher(effect, caller)
                case fx.Story(text=text):
                    self._story(text)
                case fx.Log(text=text, level=level):
                    self._log.log(level.upper(), text)
                case fx.Answer(value=value):
                    answer = value
                case fx.AnswerFromOutput(agent_id=agent_id, lines=lines, before=before):
                    answer = self._output(agent_id, lines, before)
                case _ if isinstance(effect, _WATCHDOG):
                    if self._watchdog is not None:
                        tell_quietly(self._watchdog, effect)
        return answer

    def _tell(self, agent_id: str, message: Any) -> None:
        ref = self._agents.get(agent_id)
        if ref is not None:
            tell_quietly(ref, message)

    def _spawn(self, effect: fx.SpawnAgent) -> None:
        spec = AgentSpec(
            agent_id=effect.agent_id,
            name=effect.name,
            session_id=self.state.session_id,
            capability=effect.capability,
            adapter=effect.adapter,
            options=effect.options,
        )
        self._agents[effect.agent_id] = self.runtime.spawn(
            AgentActor,
            spec,
            self._launcher,
            self._transport,
            self.actor_ref,
            self.state.settings.output_lines,
            effect.adopt,
            effect.pid,
            effect.exited,
        )

    def _start_timer(self, delay: float, event: fx.TimerEvent) -> None:
        self._cancel(event.key)
        if isinstance(event, fx.Flush):
            self._windows.start(event, delay)
            return
        fire = functools.partial(tell_quietly, self.actor_ref, event)
        self._timers[event.key] = (event, self.clock.call_later(delay, fire))

    def _close_windows(self, now: float) -> None:
        """Flush each coalescing window closed by ``now``, as its own timer would have."""
        for event in self._windows.pop_due(now):
            self._run(calls.fire(self.state, event, self._ctx()))

    def _cancel(self, key: fx.TimerKey) -> None:
        if key[0] == "flush":
            self._windows.cancel(key[1])
            return
        entry = self._timers.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def _task_or_watcher(self, effect: fx.Effect, caller: GuardedSink | None) -> None:
        """The actors of open tasks and of watchers: spawned, told, forgotten at their end."""
        match effect:
            case fx.OpenNote(record=record, restored=restored):
                task = self.runtime.spawn(
                    TaskActor, record, self._notes, self.actor_ref, restored=restored
                )
                self._tasks[record.task_id] = task
            case fx.AppendNote(task_id=task_id, line=line):
                self._tell_task(task_id, messages.NoteLine(line=line))
            case fx.FinaliseNote(record=record):
                if (settled := self._tasks.pop(record.task_id, None)) is not None:
                    tell_quietly(settled, messages.SettleNote(record=record))
            case fx.SpawnWatcher(watcher_id=watcher_id):
                sink = caller if caller is not None else self._sink
                self._watchers[watcher_id] = self.runtime.spawn(WatcherActor, watcher_id, sink)

    def _tell_task(self, task_id: str, message: Any) -> None:
        """Tell an open task's actor (its deadline timer, its note); a task's actor is gone
        only once it settled, and then the message no longer applies."""
        if (task := self._tasks.get(task_id)) is not None:
            tell_quietly(task, message)

    def _hand(self, note: TaskCompletion) -> None:
        """A watcher's notification goes through its actor (which stops when nothing is
        pending); the rules made it exactly once, in order."""
        watcher_id = note.watcher_id
        ref = self._watchers.pop(watcher_id, None) if not note.pending else None
        ref = ref or self._watchers.get(watcher_id)
        if ref is not None:
            tell_quietly(ref, messages.Hand(note=note))
        else:  # never expected: the parent hears of it rather than nobody
            self._log.error("no actor for watcher {}: handed to the parent", watcher_id)
            self._sink(note)

    def _output(self, agent_id: str, lines: int, before: int | None) -> Any:
        ref = self._agents.get(agent_id)
        try:
            if ref is None:
                raise pykka.ActorDeadError(agent_id)
            return ref.ask(messages.ReadOutput(lines=lines, before=before), block=False)
        except pykka.ActorDeadError:  # gone before a restart: nothing of its output is kept
            return api.ReadResult(agent_id=agent_id, lines=())

    def _story(self, text: str) -> None:
        """One human line per lifecycle change, for ``shepherd demo`` and ``serve --verbose``."""
        if self._tap is None:
            return
        try:
            self._tap(text)
        except Exception:
            self._log.opt(exception=True).error("story tap failed")
