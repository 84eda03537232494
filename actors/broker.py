"""BrokerActor: the session's router and the index of who is who.

It owns: the agents of the session (id, name, capability, active task), the request table
(``protocol.requests``), the settled results, the watch subscriptions, and the duplicate
filter. It keeps *read models* of what other actors own (task snapshots, process states),
pushed to it by those actors, so that ``status`` is one consistent answer.

Flows (seed 002 §4):
- delegate: check the agent's slot → start a TaskActor → publish the task → ``start``.
- message: resolve the target; ``expects_reply`` opens a request and puts the sender's task
  in ``waiting``; a reply closes it (a late reply is delivered as content, changing nothing).
- done: only the owning agent may settle its task; the TaskActor decides, the broker acks.
- settlement: free the slot, cancel the dropped requests, hand the result to each watcher
  subscribed to that task exactly once (the subscription is removed as it is used).
Every envelope from a child gets an honest ``ack`` (accepted, or refused with a typed error).

This module holds the agents, the dispatch, watches and inbound envelopes; the broker's other
parts are mixins, each stating its own rules: tasks (``broker_tasks``), messages and requests
(``broker_routing``), stale waits (``broker_stale``), plus the restart (``broker_restore``) and
status (``broker_status``) steps. The state they share is declared once in ``broker_state``.
"""

from __future__ import annotations

import hmac
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
import pykka
from loguru import logger

from actors.adapters import check_spawn_options
from actors.agent import AgentActor, AgentSpec, Launcher
from actors.broker_restore import restore_session
from actors.broker_routing import RoutingMixin
from actors.broker_rows import AgentEntry
from actors.broker_stale import StaleWaitMixin
from actors.broker_status import status_view
from actors.broker_tasks import TaskMixin
from actors.journal import Journal
from actors.messages import (
    AgentExited,
    AgentStateChanged,
    CloseAgent,
    Deliver,
    DeliveryFailed,
    Done,
    DoneOutcome,
    Inbound,
    ParentCall,
    RequestTimeout,
    StaleDue,
    TaskChanged,
    TurnEnded,
    WatchdogAgent,
    WatchdogRuntime,
    WatcherFinished,
    WatchWith,
)
from actors.notes import TaskNotes
from actors.runtime import ShepherdActor, tell_quietly
from actors.sinks import GuardedSink
from actors.transport import Transport
from actors.watcher import WatcherActor
from protocol import api
from protocol.answers import preview_result
from protocol.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    Envelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    encode_envelope,
)
from protocol.errors import (
    AgentBusy,
    ErrorInfo,
    ForbiddenSender,
    InvalidArgument,
    InvalidHandle,
    LimitExceeded,
    ShepherdError,
)
from protocol.ids import PARENT_ID, IdKind, an_id_of, is_valid_name, kind_of
from protocol.journal import (
    AgentExitRecord,
    AgentRecord,
    Restore,
    WatcherRecord,
)
from protocol.notifications import Notice
from protocol.request_table import RequestTable
from protocol.requests import RequestState
from protocol.settings import Settings
from protocol.tasks import TaskEvent, TaskRecord, TaskResult
from protocol.watching import resolve_watch_ids

__all__ = ["AgentEntry", "BrokerActor"]  # AgentEntry re-exported from broker_rows


class BrokerActor(RoutingMixin, StaleWaitMixin, TaskMixin, ShepherdActor):
    def __init__(
        self,
        session_id: str,
        settings: Settings,
        transport: Transport,
        launcher: Launcher,
        sink: GuardedSink,
        journal: Journal,
        check_capability: bool = True,
        tap: Callable[[str], None] | None = None,
        notes: TaskNotes | None = None,
        watchdog_factory: Callable[[pykka.ActorRef[Any]], pykka.ActorRef[Any]] | None = None,
        restore: Restore | None = None,
    ) -> None:
        super().__init__()
        self._restore = restore
        self._agent_records: dict[str, AgentRecord] = {}
        self._notes = notes
        #: the watchdog actor (it observes; the broker only tells it what happens)
        self.watchdog = watchdog_factory(self.actor_ref) if watchdog_factory else None
        self.prompts: dict[str, str] = {}  # prompt id -> task id (compatibility aliases)
        self._stale_timers: dict[str, Any] = {}
        self._stale_notified: dict[str, float] = {}  # task id -> waiting_since of the episode
        #: damaged lines of the journal and notifications file found at restart
        self.journal_problems = 0
        self.session_id = session_id
        #: False when the transport already verified each sender's capability (the mailbox
        #: validator does, and strips the secret before delivery)
        self._check_capability = check_capability
        self._tap = tap
        self.settings = settings
        self._transport = transport
        self._launcher = launcher
        self._sink = sink
        self._journal = journal
        self.agents: dict[str, AgentEntry] = {}
        self.names: dict[str, str] = {}
        self.tasks: dict[str, TaskRecord] = {}
        self._task_refs: dict[str, pykka.ActorRef[Any]] = {}
        self.results: dict[str, TaskResult] = {}
        self.requests = RequestTable(settings.closed_requests_kept)
        self._request_timers: dict[str, Any] = {}
        self._subscriptions: dict[str, list[pykka.ActorRef[Any]]] = {}
        self._watchers: dict[str, pykka.ActorRef[Any]] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._done_waiters: dict[str, pykka.Future[Any]] = {}
        #: per task: dones handed to its task actor and not decided yet
        self._dones_in_flight: dict[str, int] = {}
        #: per task: a turn end waiting for the decision on a done in flight
        self._turns_held: dict[str, TurnEnded] = {}
        #: per open task: turns ended without done (count, last end, its exit status)
        self._turn_stats: dict[str, tuple[int, float | None, int | None]] = {}
        self.duplicates = 0
        self.refused = 0
        self._log = logger.bind(session=session_id)

    def _story(self, text: str) -> None:
        """One human line per lifecycle change, for ``shepherd demo`` and ``serve --verbose``."""
        if self._tap is None:
            return
        try:
            self._tap(text)
        except Exception:
            self._log.opt(exception=True).error("story tap failed")

    def _observe(self, message: Any) -> None:
        if self.watchdog is not None:
            tell_quietly(self.watchdog, message)

    # ------------------------------------------------------------------ restart

    def on_start(self) -> None:
        if self._restore is not None:
            restore, self._restore = self._restore, None
            self._restore_from(restore)

    def _restore_from(self, restore: Restore) -> None:
        restore_session(self, restore)

    # ------------------------------------------------------------------ dispatch

    def on_receive(self, message: Any) -> Any:
        match message:
            case ParentCall(args=args):
                return self._call(args)
            case Inbound(envelope=env):
                return self._inbound(env)
            case TaskChanged():
                self._task_changed(message)
            case DoneOutcome():
                self._done_outcome(message)
            case AgentStateChanged():
                self._agent_state(message)
            case AgentExited():
                self._agent_exited(message)
            case TurnEnded():
                self._turn_ended(message)
            case DeliveryFailed():
                self._delivery_failed(message)
            case RequestTimeout(request_id=request_id):
                self._close_request(request_id, RequestState.TIMED_OUT, notify_sender=True)
            case StaleDue(task_id=task_id, waiting_since=since):
                self._stale_due(task_id, since)
            case WatchWith(ids=ids, sink=sink):
                return self._watch(ids, sink)
            case WatcherFinished(watcher_id=watcher_id):
                self._watchers.pop(watcher_id, None)
            case "snapshot":
                return self._status(None)
            case "watchdog":
                return self.watchdog
            case _:
                return super().on_receive(message)
        return None

    def _call(self, args: Any) -> Any:
        match args:
            case api.SpawnArgs():
                return self._spawn(args)
            case api.DelegateArgs():
                return self._delegate(args)
            case api.MessageArgs():
                return self._parent_message(args)
            case api.WatchArgs():
                return self._watch(args.ids)
            case api.PromptArgs():
                return self._prompt(args)
            case api.StatusArgs():
                return self._status(args.agent, args.cursor)
            case api.CloseArgs():
                return self._close_agent(args.agent)
            case api.CancelArgs():
                return self._settle_from_parent(args.task_id, TaskEvent.CANCEL, args.reason)
            case api.FailArgs():
                return self._settle_from_parent(args.task_id, TaskEvent.FAIL, args.error)
            case api.ReadArgs():
                return self._agent(args.agent).ref  # the edge asks the agent actor directly
            case api.ResultArgs():
                return self.results.get(args.task_id)
            case _:
                raise InvalidArgument(f"unknown operation {type(args).__name__}")

    # ------------------------------------------------------------------ agents

    def _agent(self, handle: str, *, live: bool = False) -> AgentEntry:
        agent_id = handle if handle in self.agents else self.names.get(handle)
        if agent_id is None:
            kind = kind_of(handle)
            if kind is not None and kind is not IdKind.AGENT:
                raise InvalidHandle(f"{handle} is {an_id_of(kind)}, not an agent")
            raise InvalidHandle(f"no agent {handle!r} in this session")
        entry = self.agents[agent_id]
        if live and entry.closed:
            raise InvalidHandle(f"agent {entry.name} ({agent_id}) is closed")
        return entry

    def _spawn(self, args: api.SpawnArgs) -> api.SpawnResult:
        if not is_valid_name(args.name):
            raise InvalidArgument(
                f"agent name {args.name!r} must be 1-32 lowercase letters, digits, '-' or '_', "
                "starting with a letter (and not 'shepherd')"
            )
        previous = self.agents.get(self.names.get(args.name, ""))
        if previous is not None and not previous.closed:
            raise InvalidArgument(f"an agent named {args.name!r} already exists")
        if previous is not None and previous.process_state != "exited":
            # the name (and the work it stood for) is free only once the old process is gone
            raise AgentBusy(
                f"agent {args.name!r} ({previous.agent_id}) is still stopping; "
                "its name is free once its process has exited"
            )
        options = {k: v for k, v in msgspec.structs.asdict(args).items() if v is not None}
        if args.adapter != "simulated":
            # the child's own checks, run here first: what spawn accepts, the child can run
            check_spawn_options(args.adapter, options, os.getcwd())
        agent_id = self.runtime.ids.new(IdKind.AGENT)
        spec = AgentSpec(
            agent_id=agent_id,
            name=args.name,
            session_id=self.session_id,
            capability=self.runtime.ids.secret(),
            adapter=args.adapter,
            options=options,
        )
        ref = self.runtime.spawn(
            AgentActor,
            spec,
            self._launcher,
            self._transport,
            self.actor_ref,
            self.settings.output_lines,
        )
        entry = AgentEntry(agent_id, args.name, args.adapter, spec.capability, ref)
        entry.last_active_at = self.clock.now()
        self.agents[agent_id] = entry
        self.names[args.name] = agent_id
        agent_record = AgentRecord(
            agent_id=agent_id,
            name=args.name,
            adapter=args.adapter,
            capability=spec.capability,
            created_at=self.clock.now(),
            options=spec.options,
        )
        self._agent_records[agent_id] = agent_record
        self._journal.append(agent_record)
        self._log.info("spawned {name} ({agent_id})", name=args.name, agent_id=agent_id)
        self._observe(
            WatchdogAgent(
                agent_id=agent_id,
                name=args.name,
                description=args.description,
                at=self.clock.now(),
                adapter=args.adapter,
            )
        )
        return api.SpawnResult(
            agent_id=agent_id, name=args.name, adapter=args.adapter, process_state="starting"
        )

    def _remember_pid(self, agent_id: str, pid: int) -> None:
        record = self._agent_records.get(agent_id)
        if record is not None and record.pid != pid:
            record = msgspec.structs.replace(record, pid=pid)
            self._agent_records[agent_id] = record
            self._journal.append(record)

    def capability_of(self, agent_id: str) -> str | None:
        entry = self.agents.get(agent_id)
        return entry.capability if entry else None

    def _agent_state(self, msg: AgentStateChanged) -> None:
        entry = self.agents.get(msg.agent_id)
        if entry is None:
            return
        if entry.process_state != msg.process_state:
            self._story(f"{entry.name}: process {msg.process_state}")
        entry.process_state = msg.process_state
        entry.last_active_at = msg.at
        self._observe(
            WatchdogAgent(
                agent_id=entry.agent_id,
                name=entry.name,
                process_state=msg.process_state,
                at=msg.at,
            )
        )
        if msg.exit_code is not None:
            entry.exit_code = msg.exit_code

    def _agent_exited(self, msg: AgentExited) -> None:
        entry = self.agents.get(msg.agent_id)
        if entry is None:
            return
        entry.process_state = "exited"
        entry.exit_code = msg.exit_code
        self._journal.append(
            AgentExitRecord(
                agent_id=entry.agent_id,
                exit_code=msg.exit_code,
                at=self.clock.now(),
                closed=entry.closed,
            )
        )
        if not entry.closed:
            entry.closed = True
            task_id = entry.active_task
            because = f": {msg.reason}" if msg.reason else ""
            status = "" if msg.exit_code is None else f" with status {msg.exit_code}"
            self._release_agent(
                entry,
                TaskEvent.FAIL,
                f"agent process exited{status} without calling done" + because,
            )
            # an exit nobody asked for is always told, task or not (read shows the log's end)
            when = "before it was ready" if msg.before_ready else "without being closed"
            self._sink(
                Notice(
                    created_at=self.clock.now(),
                    code="agent_exited",
                    text=f"agent {entry.name} exited{status} {when}"
                    + because
                    + (f"; its task {task_id} failed" if task_id else "")
                    + f". Read {entry.name}'s output for its last words.",
                    agent_id=entry.agent_id,
                    task_id=task_id,
                )
            )
        self._log.info("agent {name} exited ({code})", name=entry.name, code=msg.exit_code)

    def _close_agent(self, handle: str) -> api.CloseResult:
        entry = self._agent(handle)
        if entry.closed:
            return api.CloseResult(agent_id=entry.agent_id, closed=True)
        entry.closed = True
        cancelled = self._release_agent(entry, TaskEvent.CANCEL, "agent closed by the parent")
        tell_quietly(entry.ref, CloseAgent())
        return api.CloseResult(agent_id=entry.agent_id, closed=True, cancelled_task_id=cancelled)

    def _release_agent(self, entry: AgentEntry, event: TaskEvent, why: str) -> str | None:
        """The agent is gone or going: settle its task, cancel requests to and from it."""
        task_id = entry.active_task
        if task_id is not None:
            self._settle_task_now(task_id, event, why)
        for req in self.requests.pending():
            if entry.agent_id in (req.sender_id, req.target_id):
                self._close_request(
                    req.request_id,
                    RequestState.CANCELLED,
                    notify_sender=req.sender_id != entry.agent_id,
                    why=f"{entry.name} is no longer running ({why})",
                )
        return task_id

    # ------------------------------------------------------------------ watch

    def _watch(self, raw_ids: tuple[str, ...], sink: Any = None) -> api.WatchResult:
        ids = list(resolve_watch_ids(raw_ids, self.tasks, self.prompts))
        watcher_id = self.runtime.ids.new(IdKind.WATCHER)
        completed = tuple(self.results[t] for t in ids if t in self.results)
        pending = tuple(t for t in ids if t not in self.results)
        if pending:
            ref = self.runtime.spawn(
                WatcherActor,
                watcher_id,
                tuple(ids),
                pending,
                GuardedSink(sink) if sink is not None else self._sink,
                self.actor_ref,
                self.settings.coalesce_ms / 1000.0,
            )
            self._watchers[watcher_id] = ref
            if sink is None:  # `wait` watchers live only as long as their caller
                # journaled before the answer goes out: the results it carries are delivered
                self._journal.append(
                    WatcherRecord(
                        watcher_id=watcher_id,
                        ids=tuple(ids),
                        created_at=self.clock.now(),
                        inline=tuple(r.task_id for r in completed),
                    )
                )
            for task_id in pending:
                self._subscriptions.setdefault(task_id, []).append(ref)
        return api.WatchResult(
            watcher_id=watcher_id, ids=tuple(ids), pending=pending, completed=completed
        )

    # ------------------------------------------------------------------ inbound envelopes

    def _inbound(self, env: AnyEnvelope) -> pykka.Future[Any] | None:
        if env.message_id in self._seen:
            self.duplicates += 1
            return None
        self._seen[env.message_id] = None
        if len(self._seen) > self.settings.dedup_window:
            self._seen.popitem(last=False)
        try:
            self._check_sender(env)
        except ShepherdError as exc:
            # A forged or foreign envelope has nobody trustworthy to answer: log it (the mailbox
            # layer quarantines such files with a reason before they get here).
            self._log.warning("refused envelope {id}: {err}", id=env.message_id, err=exc.message)
            self.refused += 1
            return None
        entry = self.agents[env.sender_id]
        entry.last_active_at = self.clock.now()
        try:
            match env:
                case RuntimeEnvelope():
                    if env.event == "ready" and env.pid is not None:
                        self._remember_pid(entry.agent_id, env.pid)
                    if env.mailbox_wake is not None:
                        entry.mailbox_wake = env.mailbox_wake
                    tell_quietly(entry.ref, env)
                    self._observe(
                        WatchdogRuntime(agent_id=entry.agent_id, envelope=env, at=self.clock.now())
                    )
                case MessageEnvelope() | ReplyEnvelope():
                    receipt = self._route(entry.agent_id, env)
                    self._ack(env, request_id=receipt.request_id)
                case TaskDoneEnvelope():
                    return self._done(entry, env)
                case _:
                    raise InvalidArgument(f"an agent cannot send {type(env).__name__}")
        except ShepherdError as exc:
            self._ack(env, error=exc.info())
        return None

    def _check_sender(self, env: Envelope) -> None:
        if env.session_id != self.session_id:
            raise ForbiddenSender(f"envelope belongs to session {env.session_id}, not this one")
        entry = self.agents.get(env.sender_id)
        if entry is None:
            raise ForbiddenSender(f"unknown sender {env.sender_id!r}")
        if self._check_capability and not hmac.compare_digest(
            env.capability.encode(), entry.capability.encode()
        ):
            raise ForbiddenSender(f"capability does not match sender {env.sender_id}")

    def _ack(
        self,
        env: Envelope,
        *,
        error: ErrorInfo | None = None,
        request_id: str | None = None,
        result: TaskResult | None = None,
    ) -> None:
        entry = self.agents.get(env.sender_id)
        if entry is None:
            return
        ack = AckEnvelope(
            message_id=self.runtime.ids.new(IdKind.MESSAGE),
            session_id=self.session_id,
            sender_id=PARENT_ID,
            target_id=entry.agent_id,
            created_at=self.clock.now(),
            ack_for=env.message_id,
            accepted=error is None,
            error=error,
            request_id=request_id,
            task_id=getattr(env, "task_id", None),
            # a receipt names the task; it never echoes the task's text or a long summary back
            # (a text that fit on its way in could make the receipt too big on its way out)
            result=preview_result(result) if result is not None else None,
        )
        if env.reply_inbox is not None:
            # a one-shot sender (a child's shell command) waits for its receipt there
            stamped = msgspec.structs.replace(ack, capability=entry.capability)
            try:
                self._transport.publish(env.reply_inbox, stamped)
            except ShepherdError as exc:
                self._log.warning(
                    "receipt for {id} undeliverable: {err}", id=env.message_id, err=exc.message
                )
        elif not entry.closed:
            tell_quietly(entry.ref, Deliver(envelope=ack))

    def _check_fits(self, env: Envelope, what: str) -> None:
        """Refuse (``limit_exceeded``) an envelope that, stamped for its target, would not fit
        the mailbox: checked before the operation is accepted, so nothing accepted can fail
        to be delivered for its size."""
        entry = self.agents.get(env.target_id)
        stamped = msgspec.structs.replace(
            env,
            session_id=self.session_id,
            capability=entry.capability if entry is not None else "",
        )
        size = len(encode_envelope(stamped))
        limit = self.settings.max_envelope_bytes
        if size > limit:
            raise LimitExceeded(
                f"{what} does not fit one envelope: {size} bytes encoded, over the "
                f"{limit}-byte limit (max_envelope_bytes); send a shorter text, or a path to "
                "a file holding it"
            )

    def _send_notice(self, agent_id: str, code: str, text: str, ref_id: str | None) -> None:
        entry = self.agents.get(agent_id)
        if entry is None or entry.closed:
            return
        notice = NoticeEnvelope(
            message_id=self.runtime.ids.new(IdKind.MESSAGE),
            session_id=self.session_id,
            sender_id=PARENT_ID,
            target_id=agent_id,
            created_at=self.clock.now(),
            code=code,
            text=text,
            ref_id=ref_id,
        )
        tell_quietly(entry.ref, Deliver(envelope=notice))

    # ------------------------------------------------------------------ done

    def _done(self, entry: AgentEntry, env: TaskDoneEnvelope) -> pykka.Future[Any] | None:
        """Hand a ``done`` to its task. Returns a future that completes once the task actor
        has decided (and journaled): a durable transport acknowledges the envelope only then,
        so a crash in between re-delivers it instead of losing it."""
        if env.task_id is None:
            if entry.active_task is None:
                raise InvalidHandle(f"agent {entry.name} has no active task to finish")
            env = msgspec.structs.replace(env, task_id=entry.active_task)
        assert env.task_id is not None
        record = self.tasks.get(env.task_id)
        if record is None:
            raise InvalidHandle(f"no task {env.task_id} in this session")
        if record.agent_id != entry.agent_id:
            raise ForbiddenSender(f"task {env.task_id} belongs to another agent")
        if env.task_id in self.results:
            self._ack(env, result=self.results[env.task_id])
            return None
        ref = self._task_refs.get(env.task_id)
        if ref is None or not tell_quietly(ref, Done(envelope=env)):
            raise InvalidHandle(f"task {env.task_id} is no longer active")
        decided = self.runtime.new_future()
        self._done_waiters[env.message_id] = decided
        self._dones_in_flight[env.task_id] = self._dones_in_flight.get(env.task_id, 0) + 1
        return decided

    def _done_outcome(self, msg: DoneOutcome) -> None:
        self._ack(msg.envelope, error=msg.error, result=msg.result)
        self._done_decided(msg)
        waiter = self._done_waiters.pop(msg.envelope.message_id, None)
        if waiter is not None:
            waiter.set(None)

    # ------------------------------------------------------------------ status

    def _status(self, handle: str | None, cursor: int = 0) -> api.StatusResult:
        return status_view(self, handle, cursor)

    def read_ref(self, handle: str) -> pykka.ActorRef[Any]:
        return self._agent(handle).ref
