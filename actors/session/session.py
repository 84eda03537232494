"""The session root and the in-process Python API.

A :class:`Session` owns one broker and everything under it. Its methods are the *edge*:
they may block (``ask(...).get(timeout)``), actors never do. One method per operation of the
table (:mod:`protocol.ops`), generated from it: ``protocol.calls.api`` Structs in, Structs out, with
the same checks and typed errors as the CLI and the tools (which reach :meth:`Session.run`).

The runtime, the transport and the launcher are given to it: the supervisor gives real ones
(threads, the mailbox, processes), :class:`actors.testing.SimSession` the seeded simulation's
(the lifecycle tests' and the demo's). This module knows nothing of the simulation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pykka

from actors.records.journal import Journal, MemoryJournal
from actors.records.notes import MemoryTaskNotes, TaskNotes
from actors.runtime.crashpoints import crashpoint
from actors.runtime.runtime import Runtime, tell_quietly
from actors.runtime.transport import (
    PARENT_INBOX,
    BatchTransport,
    DeliveryFailed,
    NotHandled,
    Refusals,
    Subscription,
    Transport,
)
from actors.session import merging
from actors.session import worktrees as wt
from actors.session.agent import Launcher, drain_agents
from actors.session.broker import BrokerActor
from actors.session.checks import CheckRunner
from actors.session.messages import (
    Drain,
    Inbound,
    InboundBatch,
    ParentCall,
    WaitFor,
    WatchdogCall,
    WorktreeOf,
)
from actors.session.sinks import GuardedSink, Sink
from actors.session.watchdog_methods import WatchdogMethods
from actors.session.worktrees import GIT_WAIT_S, GitWorker
from protocol.calls import api, api_batch, api_worktrees
from protocol.calls.watchdog import WatchdogArgs, watchdog_call
from protocol.core.errors import InvalidArgument, SessionUnavailable, ShepherdError
from protocol.core.ids import IdKind
from protocol.ops import Method, batch, parent
from protocol.ops import approvals as approval_ops
from protocol.ops import worktrees as worktree_ops
from protocol.records.settings import Settings, check_settings
from protocol.records.worktrees import WorktreeRef, WorktreeReleased
from protocol.scripted.script import Script
from protocol.session import batch as batch_rules
from protocol.session.restore import Restore
from protocol.wire.envelopes import AnyEnvelope, CallEnvelope, TaskDoneEnvelope

__all__ = ["Session"]

ASK_TIMEOUT_S = 30.0
#: how long past a ``wait``'s own timeout its blocking caller waits for the watcher's answer
WAIT_MARGIN_S = 5.0
#: how long the parent's inbox waits for the broker to take what it received (_hand_over)
INBOUND_CEILING_S = 3600.0
R = TypeVar("R")


class Session(WatchdogMethods):
    def __init__(
        self,
        runtime: Runtime,
        transport: Transport,
        launcher: Launcher,
        *,
        settings: Settings | None = None,
        sink: Sink | None = None,
        journal: Journal | None = None,
        session_id: str | None = None,
        tap: Callable[[str], None] | None = None,
        on_call: Callable[[CallEnvelope], None] | None = None,
        notes: TaskNotes | None = None,
        watchdog: bool = True,
        restore: Restore | None = None,
        sync_inbound: bool = False,
        spans: Any = None,
        worktrees_root: Path | None = None,
    ) -> None:
        self.runtime = runtime
        self.transport = transport
        self.launcher = launcher
        self.settings = check_settings(settings or Settings())
        self.session_id = session_id or runtime.ids.new(IdKind.SESSION)
        self.sink = GuardedSink(sink)
        self.journal = journal if journal is not None else MemoryJournal()
        self.notes = notes if notes is not None else MemoryTaskNotes()
        #: the watchdog actor, started by the broker (it tells the watchdog what happens)
        self.watchdog_ref: pykka.ActorRef[Any] | None = None
        #: where agents' worktrees are made (None: none), and its git thread (.worktrees)
        self.worktrees_root = worktrees_root
        self.git = GitWorker() if worktrees_root is not None else None
        #: the tasks' acceptance checks, each on a thread of its own (actors.session.checks)
        self.checks = CheckRunner(self.session_id)
        self.broker = runtime.spawn(
            BrokerActor,
            self.session_id,
            self.settings,
            transport,
            launcher,
            self.sink,
            self.journal,
            tap,
            self.notes,
            self._watchdog_factory if watchdog else None,
            restore,
            git=self.git,
            checks=self.checks,
            spans=spans,
        )
        #: with a durable transport, the receiver hands an envelope over only once the broker
        #: has handled it, so acknowledging the file can never lose it (crash in between)
        self._sync_inbound = sync_inbound
        self._on_call = on_call
        self._subscription: Subscription
        if sync_inbound and isinstance(transport, BatchTransport):
            # one ask per receiving pass, not per envelope: the batch is acknowledged once the
            # broker has handled every envelope of it
            self._subscription = transport.subscribe_batch(PARENT_INBOX, self._parent_batch)
        else:
            self._subscription = transport.subscribe(PARENT_INBOX, self._parent_inbox)
        self._closed = False

    def _watchdog_factory(self, broker: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
        from actors.session.watchdog import WatchdogActor

        self.watchdog_ref = self.runtime.spawn(
            WatchdogActor, self.settings.watchdog, self.sink, broker, self.transport.publish
        )
        return self.watchdog_ref

    def watchdog(self, op: str, **args: Any) -> Any:
        """Run a watchdog operation (status, config, set, pause, resume, inspect, ...)."""
        if self.watchdog_ref is None:
            raise InvalidArgument("this session runs without a watchdog")
        return self.watchdog_ref.ask(WatchdogCall(op=op, args=args), timeout=ASK_TIMEOUT_S)

    def _parent_inbox(self, env: AnyEnvelope) -> None:
        """Runs on the transport's thread: hand over and return (never block the receiver)."""
        if isinstance(env, CallEnvelope):
            if self._on_call is not None:
                self._on_call(env)
            return
        if self._sync_inbound:
            done = isinstance(env, TaskDoneEnvelope)
            if done:
                crashpoint("done.before_handle")
            # handled (a done decided and journaled) when the ask returns
            self._hand_over(Inbound(envelope=env))
            if done:
                crashpoint("done.after_handle")
        else:
            tell_quietly(self.broker, Inbound(envelope=env))

    def _hand_over(self, message: Inbound | InboundBatch) -> Any:
        """Wait until the broker handled what the parent's inbox received. A slow broker is no
        reason to give up: it may be waiting out an outage of its records or of the servers
        (a minute at most each), and an envelope given up on would be quarantined, a lost
        ``done``. Past :data:`INBOUND_CEILING_S` it is not taken (:class:`NotHandled`): the
        transport keeps it for the parent started next."""
        try:
            return self.broker.ask(message, timeout=INBOUND_CEILING_S)
        except pykka.Timeout:
            raise NotHandled(
                f"the session did not take it within {INBOUND_CEILING_S:g} s"
            ) from None

    def _parent_batch(self, envelopes: Sequence[AnyEnvelope]) -> Refusals | None:
        """Runs on the transport's thread: calls go to ``on_call``, the rest to the broker in
        one ask, which returns once each was handled (a done decided and journaled)."""
        refused: dict[str, ShepherdError] = {}
        inbound: list[AnyEnvelope] = []
        for env in envelopes:
            if not isinstance(env, CallEnvelope):
                inbound.append(env)
            elif self._on_call is not None:
                try:
                    self._on_call(env)
                except Exception as exc:  # refuses this call alone
                    refused[env.message_id] = DeliveryFailed(f"handler raised {exc!r}")
        if inbound:
            done = any(isinstance(env, TaskDoneEnvelope) for env in inbound)
            if done:
                crashpoint("done.before_handle")
            failed = self._hand_over(InboundBatch(envelopes=tuple(inbound)))
            if done:
                crashpoint("done.after_handle")
            if failed:
                assert isinstance(failed, dict)  # the broker's answer: message id -> error
                refused.update(failed)
        return refused or None

    # ------------------------------------------------------------------ construction

    # ------------------------------------------------------------------ operations

    def _ask(self, args: Any) -> Any:
        """The broker's answer: a value, or a future of it (its one way of saying "later")."""
        answer = self.broker.ask(ParentCall(args=args), timeout=ASK_TIMEOUT_S)
        if isinstance(answer, pykka.Future):
            return answer.get(timeout=ASK_TIMEOUT_S)
        return answer

    def run(self, args: api.Arguments[R]) -> R:
        """Run one operation given as its checked Args Struct (:mod:`protocol.ops`): what the
        methods below, the CLI and the tools (through :meth:`Supervisor.call`) reach. Most are
        the broker's; ``wait`` and ``read`` end at the edge, which may block (actors never
        do)."""
        answer: Any
        match args:
            case api.WaitArgs():
                answer = self._wait(args)
            case api.ReadArgs():
                answer = self._read(args)
            case api.SpawnArgs():
                answer = self._spawn(args)
            case api_batch.SpawnManyArgs():
                answer = self._spawn_many(args)
            case api.CloseArgs():
                answer = self._close(args)
            case api_worktrees.WorktreesArgs() | api_worktrees.MergeArgs():
                answer = self._worktrees(args)
            case WatchdogArgs():
                op, fields = watchdog_call(args)
                answer = self.watchdog(op, **fields)
            case _:
                answer = self._ask(args)
        return answer  # type: ignore[no-any-return]

    # One method per operation, generated from the table: the Args fields positionally in
    # field order or by name, checked, then run (``session.delegate("scout", "look")``).
    delegate = Method(parent.DELEGATE)
    #: many delegates in one call (items: ``{"target", "task"}`` mappings or ``DelegateItem``)
    delegate_many = Method(batch.DELEGATE_MANY)
    message = Method(parent.MESSAGE)
    watch = Method(parent.WATCH)
    #: compatibility: the old prompt call, mapped onto a tracked task (its id is an alias of
    #: the task id: ``watch`` and ``wait`` resolve it to that task, and only that)
    prompt = Method(parent.PROMPT)
    #: every id settled, or ``timeout_s`` passed (on the simulation runtime, in virtual time)
    wait = Method(parent.WAIT)
    #: every agent from ``cursor`` on (in-process there is no frame to page for; the CLI's and
    #: the tools' answers are paged by :func:`protocol.calls.answers.fit_answer`)
    status = Method(parent.STATUS)
    #: cancel (130) or fail (1) a task; ``already_settled``: it had ended (nothing changed)
    cancel = Method(parent.CANCEL)
    fail = Method(parent.FAIL)
    result = Method(parent.RESULT)
    close = Method(parent.CLOSE)
    #: up to ``lines`` of the agent's newest output lines (older than line ``before``)
    read = Method(parent.READ)
    #: answer an agent's approval request (its blocked call returns approved or denied)
    approve = Method(approval_ops.APPROVE)
    deny = Method(approval_ops.DENY)

    def spawn(
        self,
        name: str,
        *,
        adapter: str = "scripted",
        script: Script | dict[str, Any] | str | None = None,
        **options: Any,
    ) -> api.SpawnResult:
        """Start an agent: the one operation whose method is written out, since what a
        ``script`` is depends on the launcher (``Launcher.spawn_options``)."""
        adapter, options = self.launcher.spawn_options(name, adapter, script, options)
        return self.run(api.build_args(api.SpawnArgs, name=name, adapter=adapter, **options))

    #: agents' git worktrees, paged (what git says of each: clean or dirty, changed files)
    worktrees = Method(worktree_ops.WORKTREES)

    # ------------------------------------------------------------------ worktrees (the edge
    # runs git, or waits for the git worker: never the broker)

    def _spawn(self, args: api.SpawnArgs) -> api.SpawnResult:
        made, new_branch = self._made(args)
        try:
            return self._ask(made)  # type: ignore[no-any-return]
        except BaseException:
            wt.undo(made, new_branch)
            raise

    def _made(self, args: api.SpawnArgs) -> tuple[api.SpawnArgs, bool]:
        """``args`` ready for the broker: placed on its node, its worktree made (the args
        then say where); and whether a new branch was made (:func:`wt.undo` needs it)."""
        args = self._placed(args)
        if self.worktrees_root is None:
            if args.worktree:
                raise InvalidArgument("spawn: worktree: this session makes no worktrees")
            return args, False
        return wt.prepare(args, self.worktrees_root, self.session_id)

    def _spawn_many(self, args: api_batch.SpawnManyArgs) -> api_batch.SpawnManyResult:
        """Each name made ready as :meth:`_spawn` makes one (its node, its own worktree), then
        all spawned in one broker message; a name refused here is refused by its index and
        the others go on (a worktree made for a name the broker refused is removed)."""
        batch_rules.check_spawn_many(args)
        ready: list[tuple[int, api.SpawnArgs, bool]] = []
        refused: list[api_batch.ItemError] = []
        try:
            for index, name in enumerate(args.names):
                try:
                    ready.append((index, *self._made(args.one(name))))
                except ShepherdError as exc:
                    refused.append(batch_rules.item_error(index, exc))
            done: api_batch.SpawnManyResult = (
                self._ask(batch_rules.SpawnEach(items=tuple(made for _, made, _ in ready)))
                if ready
                else api_batch.SpawnManyResult(agent_ids=())
            )
        except BaseException:
            for _, made, new_branch in ready:
                wt.undo(made, new_branch)
            raise
        # the broker's answer is by the place among the ready ones: back to the call's places
        agent_ids: list[str | None] = [None] * len(args.names)
        for (index, made, new_branch), agent_id in zip(ready, done.agent_ids, strict=True):
            agent_ids[index] = agent_id
            if agent_id is None:
                wt.undo(made, new_branch)
        errors = refused + [
            msgspec.structs.replace(error, index=ready[error.index][0]) for error in done.errors
        ]
        return api_batch.SpawnManyResult(
            agent_ids=tuple(agent_ids), errors=tuple(sorted(errors, key=lambda e: e.index))
        )

    def _placed(self, args: api.SpawnArgs) -> api.SpawnArgs:
        """``node``: a launcher that places agents on other hosts resolves it (``any``), checks
        the node is live and can run the agent; any other launcher refuses it."""
        place = getattr(self.launcher, "place", None)
        if args.node is None or callable(place):
            return place(args) if callable(place) else args
        raise InvalidArgument(
            "spawn: node: agents are placed on nodes only in a session over NATS "
            "(serve --transport nats://...)"
        )

    def _close(self, args: api.CloseArgs) -> api.CloseResult:
        closed: api.CloseResult = self._ask(args)
        if closed.worktree_path is None or self.git is None:
            return closed
        ref = self.broker.ask(WorktreeOf(agent_id=closed.agent_id), timeout=ASK_TIMEOUT_S)
        if not isinstance(ref, WorktreeRef):
            return closed
        # after the git worker has listed the changes of the task the close cancelled
        try:
            released = self.git.release(ref).result(timeout=GIT_WAIT_S)
        except Exception as exc:  # the worker's wait timed out, or it is shutting down
            why = f"git did not answer: {exc or type(exc).__name__}"
            released = WorktreeReleased(
                agent_id=ref.agent_id, path=ref.path, removed=False, why=why
            )
        self.broker.ask(released, timeout=ASK_TIMEOUT_S)  # journaled, or told: kept
        return msgspec.structs.replace(
            closed, worktree_removed=released.removed, worktree_kept_because=released.why
        )

    def _worktrees(self, args: api_worktrees.WorktreesArgs | api_worktrees.MergeArgs) -> Any:
        if isinstance(args, api_worktrees.MergeArgs):  # the broker names the branch, git merges
            if self.git is None:
                raise SessionUnavailable("merge: this session makes no worktrees")
            edge = merging.Edge(self.git, self.broker, self.run, self.runtime.clock.now, GIT_WAIT_S)
            return merging.merge(args, self._ask, edge)
        page: api_worktrees.WorktreesResult = self._ask(args)
        if self.git is None or not page.worktrees:
            return page
        rows = self.git.inspect(page.worktrees).result(timeout=GIT_WAIT_S)
        return msgspec.structs.replace(page, worktrees=rows)

    def spawn_many(
        self,
        names: list[str] | tuple[str, ...],
        *,
        adapter: str = "scripted",
        script: Script | dict[str, Any] | str | None = None,
        **options: Any,
    ) -> api_batch.SpawnManyResult:
        """Start several agents with the same options (one broker message, one journal write);
        written out as :meth:`spawn` is (a ``script`` is the launcher's to read)."""
        if isinstance(names, str):
            names = (names,)
        sent_adapter, sent = adapter, options
        for name in names:
            sent_adapter, sent = self.launcher.spawn_options(name, adapter, script, dict(options))
        fields = {"names": tuple(names), "adapter": sent_adapter, **sent}
        return self.run(api.build_args(api_batch.SpawnManyArgs, **fields))

    def wait_then(self, args: api.WaitArgs, answer: Callable[[api.WaitResult], object]) -> None:
        """Start a ``wait`` that holds no thread: ``answer`` is called once with its
        ``WaitResult``, from the wait's watcher actor when every id is delivered or its
        deadline passed (or from here, at once, when every id has settled already). A wait the
        session refuses raises here, and ``answer`` is never called."""
        wait = WaitFor(ids=args.ids, timeout_s=args.timeout_s, answer=answer)
        watch = self.broker.ask(wait, timeout=ASK_TIMEOUT_S)
        assert isinstance(watch, api.WatchResult)
        if not watch.pending:  # no watcher was started
            w = watch
            answer(api.WaitResult(ids=w.ids, completed=w.completed, pending=(), timed_out=False))

    def _wait(self, args: api.WaitArgs) -> api.WaitResult:
        """A blocking ``wait`` for the caller of this API (its own thread waits; the session
        holds none): the answer of :meth:`wait_then`."""
        got: list[api.WaitResult] = []
        self.wait_then(args, got.append)
        bound = None if args.timeout_s is None else args.timeout_s + WAIT_MARGIN_S
        if not self.runtime.wait_until(lambda: bool(got), bound):
            raise SessionUnavailable(
                f"the wait's watcher did not answer within {args.timeout_s} s and a margin of "
                f"{WAIT_MARGIN_S} s: the session is stopping or overloaded"
            )
        return got[0]

    def _read(self, args: api.ReadArgs) -> api.ReadResult:
        try:
            return self._ask(args)  # type: ignore[no-any-return]
        except pykka.ActorDeadError:  # its actor stopped meanwhile: no output is kept
            return api.ReadResult(agent_id=self.status(args.agent).agents[0].agent_id, lines=())

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._subscription.cancel()
        drain_agents(self.runtime, ASK_TIMEOUT_S)  # their exits reach the broker first
        # what the broker decided is run before it stops (its records durable, its effects done)
        with contextlib.suppress(Exception):
            self.broker.ask(Drain(), timeout=ASK_TIMEOUT_S)
        if self.git is not None:
            self.git.close()
        self.checks.close()
        self.runtime.shutdown()
        self.transport.close()
