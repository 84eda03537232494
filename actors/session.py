"""The session root and the in-process Python API.

A :class:`Session` owns one broker and everything under it. Its methods are the *edge*:
they may block (``ask(...).get(timeout)``), actors never do. The same methods back the CLI
and the tool schemas (``protocol.api`` Structs in, Structs out), with the same typed errors.

``Session.simulated(seed)`` builds a session on the deterministic simulation runtime with
simulated scripted agents — the form the lifecycle tests and the demo's story use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pykka

from actors.agent import Launcher
from actors.broker import BrokerActor
from actors.crashpoints import crashpoint
from actors.journal import Journal, MemoryJournal
from actors.messages import Inbound, ParentCall, WatchdogCall, WatchWith
from actors.notes import MemoryTaskNotes, TaskNotes
from actors.runtime import Runtime, tell_quietly
from actors.simagent import FakeCommands, SimLauncher
from actors.simulation import Faults, SimRuntime, SimTransport
from actors.sinks import CollectingSink, GuardedSink, Sink
from actors.transport import PARENT_INBOX, Transport
from protocol import api
from protocol.envelopes import AnyEnvelope, CallEnvelope, TaskDoneEnvelope
from protocol.errors import InvalidArgument
from protocol.ids import IdKind
from protocol.notifications import TaskCompletion
from protocol.script import Script, parse_script
from protocol.session.restore import Restore
from protocol.settings import Settings, check_settings
from protocol.tasks import TaskResult

__all__ = ["Session"]

ASK_TIMEOUT_S = 30.0


class Session:
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
        )
        #: with a durable transport, the receiver hands an envelope over only once the broker
        #: has handled it, so acknowledging the file can never lose it (crash in between)
        self._sync_inbound = sync_inbound
        self._on_call = on_call
        self._subscription = transport.subscribe(PARENT_INBOX, self._parent_inbox)
        self._closed = False

    def _watchdog_factory(self, broker: pykka.ActorRef[Any]) -> pykka.ActorRef[Any]:
        from actors.watchdog import WatchdogActor

        self.watchdog_ref = self.runtime.spawn(
            WatchdogActor, self.settings.watchdog, self.sink, broker
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
            self.broker.ask(Inbound(envelope=env), timeout=ASK_TIMEOUT_S)
            if done:
                crashpoint("done.after_handle")
        else:
            tell_quietly(self.broker, Inbound(envelope=env))

    # ------------------------------------------------------------------ construction

    @classmethod
    def simulated(
        cls,
        seed: int,
        *,
        faults: Faults | None = None,
        settings: Settings | None = None,
        sink: Sink | None = None,
        commands: FakeCommands | None = None,
        trace: bool = True,
        tap: Callable[[str], None] | None = None,
    ) -> Session:
        runtime = SimRuntime(seed, faults=faults, trace=trace)
        transport = SimTransport(runtime, settings)
        launcher = (
            SimLauncher(runtime, transport, commands=commands)
            if commands
            else SimLauncher(runtime, transport)
        )
        return cls(runtime, transport, launcher, settings=settings, sink=sink, tap=tap)

    @property
    def sim(self) -> SimRuntime:
        assert isinstance(self.runtime, SimRuntime), "not a simulated session"
        return self.runtime

    @property
    def sim_launcher(self) -> SimLauncher:
        assert isinstance(self.launcher, SimLauncher), "not a simulated session"
        return self.launcher

    # ------------------------------------------------------------------ operations

    def _ask(self, args: Any) -> Any:
        """The broker's answer: a value, or a future of it (its one way of saying "later")."""
        answer = self.broker.ask(ParentCall(args=args), timeout=ASK_TIMEOUT_S)
        if isinstance(answer, pykka.Future):
            return answer.get(timeout=ASK_TIMEOUT_S)
        return answer

    def run(self, args: Any) -> Any:
        """Run one operation given as its checked Args Struct (``protocol.api.OPERATIONS``):
        what the CLI and the tools reach through :meth:`Supervisor.call`."""
        match args:
            case api.ReadArgs():
                return self.read(args.agent, args.lines, before=args.before)
            case api.WaitArgs():
                return self.wait(args.ids, args.timeout_s)
            case _:
                return self._ask(args)

    def spawn(
        self,
        name: str,
        *,
        adapter: str = "scripted",
        script: Script | dict[str, Any] | str | None = None,
        **options: Any,
    ) -> api.SpawnResult:
        """Start an agent. ``script`` is a script (simulation) or a script file path."""
        if script is not None:
            if isinstance(self.launcher, SimLauncher):
                if isinstance(script, str):
                    raise InvalidArgument("a simulated agent takes a script object, not a path")
                self.launcher.scripts[name] = (
                    script if isinstance(script, Script) else parse_script(script)
                )
            else:
                options["script"] = script
        if isinstance(self.launcher, SimLauncher):
            adapter = "simulated"
        return self._ask(api.build_args(api.SpawnArgs, name=name, adapter=adapter, **options))  # type: ignore[no-any-return]

    def delegate(
        self, agent: str, task: str, *, timeout_minutes: float | None = None
    ) -> api.DelegateResult:
        return self._ask(  # type: ignore[no-any-return]
            api.build_args(
                api.DelegateArgs, target=agent, task=task, timeout_minutes=timeout_minutes
            )
        )

    def message(
        self,
        target: str,
        text: str,
        *,
        task_id: str | None = None,
        thread_id: str | None = None,
        reply_to: str | None = None,
        expects_reply: bool = False,
        steer: bool = False,
        reply_timeout_s: float | None = None,
    ) -> api.MessageResult:
        return self._ask(  # type: ignore[no-any-return]
            api.build_args(
                api.MessageArgs,
                target=target,
                message=text,
                task_id=task_id,
                thread_id=thread_id,
                reply_to=reply_to,
                expects_reply=expects_reply,
                steer=steer,
                reply_timeout_s=reply_timeout_s,
            )
        )

    def watch(self, ids: str | Iterable[str]) -> api.WatchResult:
        normalised = (ids,) if isinstance(ids, str) else tuple(ids)
        return self._ask(api.build_args(api.WatchArgs, ids=normalised))  # type: ignore[no-any-return]

    def prompt(
        self, agent: str, text: str, *, timeout_minutes: float | None = None
    ) -> api.PromptResult:
        """Compatibility: the old prompt call, mapped onto a tracked task. The prompt id is an
        alias of the task id: ``watch`` and ``wait`` resolve it to that task, and only that."""
        return self._ask(  # type: ignore[no-any-return]
            api.build_args(
                api.PromptArgs, target=agent, prompt=text, timeout_minutes=timeout_minutes
            )
        )

    def wait(self, ids: str | Iterable[str], timeout_s: float | None = None) -> api.WaitResult:
        """Block until every id has settled (or ``timeout_s`` passes); return the results.

        On the simulation runtime the waiting happens in virtual time.
        """
        normalised = (ids,) if isinstance(ids, str) else tuple(ids)
        args = api.build_args(api.WaitArgs, ids=normalised, timeout_s=timeout_s)
        sink = CollectingSink()
        watch = self.broker.ask(WatchWith(ids=args.ids, sink=sink), timeout=ASK_TIMEOUT_S)
        assert isinstance(watch, api.WatchResult)
        results = {r.task_id: r for r in watch.completed}

        def settled(items: list[Any]) -> bool:
            got = sum(len(n.results) for n in items if isinstance(n, TaskCompletion))
            return got >= len(watch.pending)

        if watch.pending:
            if isinstance(self.runtime, SimRuntime):
                limit = timeout_s if timeout_s is not None else 365 * 86_400.0
                self.runtime.run_until(lambda: settled(sink.items), max_time=limit)
            else:
                sink.wait_for(settled, timeout=timeout_s)
        for note in list(sink.items):
            if isinstance(note, TaskCompletion):
                for r in note.results:
                    results[r.task_id] = r
        pending = tuple(t for t in watch.ids if t not in results)
        return api.WaitResult(
            ids=watch.ids,
            completed=tuple(results[t] for t in watch.ids if t in results),
            pending=pending,
            timed_out=bool(pending),
        )

    def status(self, agent: str | None = None, *, cursor: int = 0) -> api.StatusResult:
        """Every agent from ``cursor`` on (in-process there is no frame to page for; the
        CLI's and the tools' answers are paged by :func:`protocol.answers.fit_answer`)."""
        return self._ask(api.build_args(api.StatusArgs, agent=agent, cursor=cursor))  # type: ignore[no-any-return]

    def cancel(self, task_id: str, reason: str | None = None) -> api.SettleResult:
        """Cancel a task (130); ``already_settled`` says it had ended before (nothing changed)."""
        return self._ask(api.CancelArgs(task_id=task_id, reason=reason))  # type: ignore[no-any-return]

    def fail(self, task_id: str, error: str) -> api.SettleResult:
        """Fail a task (1); ``already_settled`` says it had ended before (nothing changed)."""
        return self._ask(api.FailArgs(task_id=task_id, error=error))  # type: ignore[no-any-return]

    def result(self, task_id: str) -> TaskResult | None:
        return self._ask(api.ResultArgs(task_id=task_id))  # type: ignore[no-any-return]

    def close(self, agent: str) -> api.CloseResult:
        return self._ask(api.CloseArgs(agent=agent))  # type: ignore[no-any-return]

    def read(self, agent: str, lines: int = 50, *, before: int | None = None) -> api.ReadResult:
        """Up to ``lines`` of the agent's newest output lines (older than line ``before``)."""
        args = api.build_args(api.ReadArgs, agent=agent, lines=lines, before=before)
        try:
            return self._ask(args)  # type: ignore[no-any-return]
        except pykka.ActorDeadError:  # its actor stopped meanwhile: no output is kept
            return api.ReadResult(agent_id=self.status(agent).agents[0].agent_id, lines=())

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._subscription.cancel()
        self.runtime.shutdown()
        self.transport.close()
