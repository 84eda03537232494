"""The child bridge: one ``shepherd-child run`` process per agent, between the session mailbox
and the agent.

Rules:
- Identity comes only from the ``SHEPHERD_*`` environment the parent set
  (:data:`~actors.child.env.ENV_VARS`); every envelope the bridge publishes carries this
  child's capability and goes to the ``parent`` inbox. The bridge never publishes
  ``task_done`` by itself: a turn ending is a ``turn_end`` runtime event and nothing more
  (idle is not done). Only the agent's explicit ``done`` (a script step, or ``shepherd-child done``
  from the agent's shell) settles a task.
- Its own inbox accepts only what the parent wrote for it
  (:func:`~actors.child.env.envelope_validator` states the checks); anything else is
  quarantined by the mailbox with the reason, and reported to the parent
  (:mod:`actors.child.inbox_reports`).
- What it publishes reaches the parent in order and is never dropped for back-pressure
  (:mod:`actors.child.outbox`).
- One thread owns all state (the *core*): mailbox deliveries, command completions, timers,
  signals and the parent's death are all posted as callables onto one queue that the main
  loop runs in order. Adapters and :class:`~actors.child.scripted.ScriptedDriver` are therefore
  single-threaded by construction.
- The bridge exits on ``control close`` (code 0, ``exit`` as its last word), on SIGTERM /
  SIGINT / SIGHUP (128 + signal), when the parent is gone (code 0: nobody is left to read a
  status, and it is an orderly stop, not a crash), when a scripted ``exit`` step says so
  (that code), or on a fatal start-up error (code 2: bad environment, options or script).
- Nothing it started outlives it (no orphans): at exit the adapter stops the agent, then,
  if the bridge leads its own session (the parent starts it with ``start_new_session``), every
  remaining process of that session — its own process group and the command adapter's
  per-turn groups alike — gets SIGTERM, then SIGKILL after a grace period
  (:func:`~actors.runtime.procs.terminate_session`).

Theory of operation: :func:`run_bridge` parses the environment
(:func:`~actors.child.env.child_env_from`), builds a :class:`Bridge`, and :meth:`Bridge.run`
opens the mailbox, builds the adapter named by ``SHEPHERD_ADAPTER`` (a bad script is reported
as a runtime ``error`` and exits 2), subscribes to the agent's inbox, starts a
:class:`~actors.child.parent_watch.ParentWatch` thread (a pidfd on the parent, polled), publishes
``ready`` with its pid and how its inbox is woken (once the mailbox receiver's first pass is
done; a later change is a runtime ``error`` with the new ``mailbox_wake``), starts the
adapter, and runs the loop until something calls :meth:`Bridge.finish`. Adapters
(:class:`~actors.child.adapters.Adapter`) are looked up in :data:`~actors.child.adapters.ADAPTERS`
by name and imported lazily; adding one (``pi-rpc``) is one class plus one line there.

Layout: this module is the bridge's core loop and lifecycle; the environment is
:mod:`actors.child.env`, the adapter contract and registry :mod:`actors.child.adapters`, the way
to the parent inbox :mod:`actors.child.outbox`, the reports about this child's inbox
:mod:`actors.child.inbox_reports`, the parent watch :mod:`actors.child.parent_watch`, the
adapters :mod:`actors.child.scripted_adapter`, :mod:`actors.child.command` and
:mod:`actors.child.pi.adapter`, and process plumbing :mod:`actors.runtime.procs`.

Log levels (loguru, to stderr, which the parent sends to the agent's log file): INFO
lifecycle (ready, turns, exit), WARNING refused input and failed publishes, ERROR a core
callback that raised (caught; the loop goes on).
"""

from __future__ import annotations

import os
import queue
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from actors import tracing
from actors.child.adapters import Adapter, adapter_class
from actors.child.env import FORWARDED_KINDS, ChildEnv, child_env_from, envelope_validator
from actors.child.inbox_reports import InboxReports
from actors.child.outbox import ParentOutbox
from actors.child.parent_watch import ParentWatch, Reconnect, reconnect_window_s
from actors.child.sandbox import Sandbox, sandbox_for
from actors.runtime.clock import Clock, SystemClock
from actors.runtime.command_socket import CommandServer, Runner
from actors.runtime.command_wire import CHILD_COMMANDS, ENV_COMMAND_SOCKET
from actors.runtime.ids import IdSource
from actors.runtime.log import logger, use_plain_from_env
from actors.runtime.procs import KILL_GRACE_S, terminate_session
from actors.runtime.transport import Subscription
from actors.transports.wire import NATS_OUTAGE_S, SessionTransport
from protocol.core.errors import ShepherdError
from protocol.core.ids import PARENT_ID, IdKind
from protocol.core.tracecontext import ENV_TRACEPARENT
from protocol.records.settings import Settings
from protocol.scripted.script import ScriptError
from protocol.wire.envelopes import AnyEnvelope, ControlEnvelope, RuntimeEnvelope, RuntimeEvent

__all__ = ["Bridge", "run_bridge"]


@dataclass(slots=True)
class _Exit:
    code: int
    reason: str


class Bridge:
    """One agent's bridge process (see the module docstring). Implements
    :class:`~actors.child.adapters.AgentContext` for its adapter."""

    def __init__(
        self,
        env: ChildEnv,
        *,
        settings: Settings | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        commands: Runner | None = None,
    ) -> None:
        self.env = env
        self._run_command = commands
        self.settings = settings or env.settings
        self.clock: Clock = clock or SystemClock()
        self.ids = ids or IdSource()
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._mailbox: SessionTransport | None = None
        self._outbox: ParentOutbox | None = None  # once the mailbox is open
        self._subscription: Subscription | None = None
        self._adapter: Adapter | None = None
        self._watch: ParentWatch | None = None
        self._reconnect: Reconnect | None = None
        self._parent_pid: int | None = None
        self._exit: _Exit | None = None
        self._exit_published = False
        self._in_turn = False  # between a turn_start and its turn_end
        self._signalled: tuple[int, str] | None = None
        self._cwd = os.getcwd()
        self._log = logger.bind(agent=env.name or env.agent_id)
        self._inbox = InboxReports(self, self.settings.fallback_poll_s, self._log)
        #: the agent's spans (actors.tracing.child.ChildSpans), when tracing is on
        self._spans: Any = None
        #: runs the agent's `shepherd-child` calls (actors.runtime.command_socket)
        self._commands: CommandServer | None = None
        #: the agent's sandbox (``spawn --sandbox``), made before its adapter starts
        self.sandbox: Sandbox | None = None

    # ------------------------------------------------------------------ AgentContext

    @property
    def cwd(self) -> str:
        return self._cwd

    def post(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)  # SimpleQueue.put is reentrant: safe from a signal handler

    def publish(self, envelope: AnyEnvelope) -> None:
        """Publish to the parent, in order, through :class:`ParentOutbox` (its rules)."""
        if self._spans is not None:
            envelope = self._traced(self._spans.published, envelope) or envelope
        if isinstance(envelope, RuntimeEnvelope):
            if envelope.event == "exit":
                self._exit_published = True
            elif envelope.event in ("turn_start", "turn_end"):
                self._in_turn = envelope.event == "turn_start"  # re-announced on reconnect
        if self._outbox is not None:
            self._outbox.publish(envelope)

    def _not_sent(self, text: str) -> RuntimeEnvelope:
        """The report of what the outbox gave up (it publishes it itself, first in line)."""
        return self._runtime_envelope("not_sent", text=text, is_error=True)

    def runtime(self, event: RuntimeEvent, **fields: Any) -> None:
        if event == "ready":  # with its model provider, when its adapter names one
            fields.setdefault("provider", getattr(self._adapter, "provider", None))
        self.publish(self._runtime_envelope(event, **fields))

    def _runtime_envelope(self, event: RuntimeEvent, **fields: Any) -> RuntimeEnvelope:
        return RuntimeEnvelope(
            message_id=self.ids.new(IdKind.MESSAGE),
            session_id=self.env.session_id,
            sender_id=self.env.agent_id,
            target_id=PARENT_ID,
            created_at=self.clock.now(),
            capability=self.env.capability,
            event=event,
            **fields,
        )

    def finish(self, code: int, reason: str = "the agent exited") -> None:
        if self._exit is None:
            self._exit = _Exit(code, reason)

    def child_environ(self) -> dict[str, str]:
        environ = dict(os.environ)
        # `shepherd-child message|done` must resolve from the agent's shell even when the
        # installation's bin directory is not on PATH: append it (never shadow the user's).
        bin_dir = os.path.dirname(sys.executable)
        path = environ.get("PATH", "")
        if bin_dir not in path.split(os.pathsep):
            environ["PATH"] = f"{path}{os.pathsep}{bin_dir}" if path else bin_dir
        child_bin = os.path.join(bin_dir, "shepherd-child")
        if "SHEPHERD_CHILD_BIN" not in environ and os.access(child_bin, os.X_OK):
            environ["SHEPHERD_CHILD_BIN"] = child_bin
        if self._commands is not None:
            environ[ENV_COMMAND_SOCKET] = self._commands.address
        if self._spans is not None:  # the session's context is the bridge's, not the agent's:
            environ.pop(ENV_TRACEPARENT, None)  # a command turn gets its task's (trace_environ)
        return environ

    def sandboxed(
        self, argv: Sequence[str], env: Mapping[str, str], rw: Sequence[str] = ()
    ) -> tuple[list[str], dict[str, str]]:
        if self.sandbox is None:
            return list(argv), dict(env)
        return self.sandbox.wrap(argv, env, rw=rw)

    def trace_environ(self) -> dict[str, str]:
        if self._spans is None:
            return {}
        return self._traced(self._spans.environ) or {}

    def _traced(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A tracing hook: what it returns, or None if it raised (never the agent's loss)."""
        try:
            return fn(*args)
        except Exception:
            self._log.opt(exception=True).warning("tracing failed")
            return None

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until close, parent death, a signal or the agent's exit; return the exit code."""
        try:
            self._mailbox = self.env.open_transport(
                self.settings,
                validate=envelope_validator(self.env, forwarded=FORWARDED_KINDS),
                on_reject=self._inbox.rejected,
                on_wake_mode=self._inbox.wake_changed,
            )
        except (ShepherdError, OSError) as exc:
            self._log.error("cannot open the session mailbox {}: {}", self.env.mailbox, exc)
            return 2
        self._inbox.attach(self._mailbox)
        self._spans = tracing.child_spans(
            os.environ,
            session_id=self.env.session_id,
            agent_id=self.env.agent_id,
            agent_name=self.env.name,
        )
        self._outbox = ParentOutbox(
            self._mailbox,
            self.clock,
            self.post,
            self._log,
            give_up_s=NATS_OUTAGE_S,
            report=self._not_sent,
        )
        try:
            if self._run_command is not None:
                self._commands = CommandServer(
                    self._run_command, CHILD_COMMANDS, program="shepherd-child"
                )
        except OSError as exc:  # the agent's calls then run the whole command line each
            self._log.warning("no command socket: {}", exc)
        try:
            code = self._start()
            if code is None:
                self._loop()
                assert self._exit is not None
                code = self._exit.code
            return code
        finally:
            self._shutdown()

    def _start(self) -> int | None:
        """Everything before the loop; an exit code means a fatal start-up error."""
        try:  # never the agent without the sandbox it asked for (rule 1 of actors.child.sandbox)
            self.sandbox = sandbox_for(self.env, self._run_command)
            self._adapter = adapter_class(self.env.adapter)(self, self.env.options)
        except ShepherdError as exc:
            self._fatal(
                f"{exc.code}: {exc.message}" if not isinstance(exc, ScriptError) else exc.message
            )
            return 2
        except Exception as exc:
            self._log.opt(exception=True).error("adapter {} failed to start", self.env.adapter)
            self._fatal(f"adapter {self.env.adapter!r} failed to start: {exc!r}")
            return 2
        try:
            self._subscription = self._mailbox_or_fail().subscribe(
                self.env.agent_id, self._on_envelope
            )
        except ShepherdError as exc:
            self._fatal(f"cannot read this agent's inbox: {exc.message}")
            return 2
        if self.env.parent_pid is not None:
            self._parent_pid = self.env.parent_pid
            self._watch = ParentWatch(
                self.env.parent_pid, lambda: self.post(self._parent_gone)
            ).start()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # logged before the parent is told: whoever saw "ready" finds the line in the log
        env = self.env
        self._log.info(
            "ready: pid {} adapter {} session {}", os.getpid(), env.adapter, env.session_id
        )
        self.runtime("ready", pid=os.getpid(), mailbox_wake=self._inbox.first_ready_wake())
        self._call(self._adapter.start)
        return None

    def _mailbox_or_fail(self) -> SessionTransport:
        assert self._mailbox is not None
        return self._mailbox

    def _fatal(self, text: str) -> None:
        self._log.error("fatal: {}", text)
        self.runtime("error", text=text, is_error=True)

    def _loop(self) -> None:
        while self._exit is None:
            fn = self._queue.get()
            if self._signalled is not None:
                # a signal outranks work queued before it: a group-wide SIGTERM also killed
                # the script's running command, whose completion must not advance the script
                self.finish(*self._signalled)
                return
            self._call(fn)

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            self._log.opt(exception=True).error("core callback failed")
            self.runtime("error", text=f"bridge error: {exc!r}", is_error=True)

    def _shutdown(self) -> None:
        reason = self._exit.reason if self._exit else "start-up failed"
        if self._subscription is not None:
            self._subscription.cancel()  # later envelopes stay in new/, not half-delivered
        if self._watch is not None:
            self._watch.close()
        if self._reconnect is not None:
            self._reconnect.close()
        if self._adapter is not None:
            try:
                self._adapter.close()
            except Exception:
                self._log.opt(exception=True).error("stopping the agent failed")
        if self._commands is not None:
            self._commands.close()
        if self.sandbox is not None:
            self.sandbox.close()
        if os.getsid(0) == os.getpid():  # we lead our session: nothing of it may outlive us
            left = terminate_session(
                os.getpid(), grace_s=KILL_GRACE_S, monotonic=self.clock.monotonic
            )
            if left:
                self._log.info("stopped {} leftover process(es): {}", len(left), left)
        if self._exit is not None and not self._exit_published:
            self.runtime("exit", exit_code=self._exit.code, text=reason)
        self._log.info("exit {} ({})", self._exit.code if self._exit else 2, reason)
        if self._spans is not None:
            self._traced(self._spans.close)
        if self._outbox is not None:
            self._outbox.close()  # what waits is tried again for a while (an outage at exit)
        if self._mailbox is not None:
            self._mailbox.close()
        self.clock.close()

    # ------------------------------------------------------------------ inputs

    def _on_envelope(self, envelope: AnyEnvelope) -> None:
        self.post(lambda: self._inbound(envelope))  # mailbox receiver thread: hand over only

    def _inbound(self, envelope: AnyEnvelope) -> None:
        if self._exit is not None:
            return
        self._log.debug(
            "delivered {} {} from {}",
            envelope.__struct_config__.tag,
            envelope.message_id,
            envelope.sender_id,
        )
        if isinstance(envelope, ControlEnvelope) and envelope.action == "close":
            self.finish(
                0, f"closed by the parent{': ' + envelope.reason if envelope.reason else ''}"
            )
            return
        assert self._adapter is not None
        if self._spans is not None:
            self._traced(self._spans.delivered, envelope)
        self._adapter.deliver(envelope)

    def _parent_gone(self) -> None:
        """The parent died. A restarted parent resumes the session and rewrites
        ``session.json`` with its pid: wait up to the reconnect window for that, keep the agent
        running meanwhile (what it publishes waits in the parent inbox), then either reattach
        or stop."""
        gone = self._parent_pid
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        window = reconnect_window_s()
        if self.env.session_dir is None or window <= 0:
            self._log.warning("the parent (pid {}) is gone; stopping", gone)
            self.finish(0, f"the parent (pid {gone}) is gone")
            return
        self._log.warning(
            "the parent (pid {}) is gone; waiting up to {}s for it to come back", gone, window
        )
        self._reconnect = Reconnect(
            Path(self.env.session_dir) / "session.json",
            gone,
            window,
            on_back=lambda pid: self.post(lambda: self._parent_back(pid)),
            on_timeout=lambda: self.post(self._parent_lost),
            monotonic=self.clock.monotonic,
        ).start()

    def _parent_back(self, pid: int) -> None:
        if self._exit is not None:
            return
        self._log.info("a restarted parent (pid {}) resumed the session; reconnecting", pid)
        self._parent_pid = pid
        self._reconnect = None
        self._watch = ParentWatch(pid, lambda: self.post(self._parent_gone)).start()
        # the new parent learns this bridge is alive, whether a turn of it still runs, and how
        # its inbox is woken
        wake = self._inbox.ready_wake()
        self.runtime("ready", pid=os.getpid(), in_turn=self._in_turn, mailbox_wake=wake)

    def _parent_lost(self) -> None:
        if self._exit is None:
            self.finish(0, f"the parent (pid {self._parent_pid}) is gone and did not come back")

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Runs on the main (core) thread between two bytecodes: only set a flag and wake the
        # loop, which stops before running anything else.
        if self._signalled is None:
            self._signalled = (128 + signum, f"stopped by {signal.Signals(signum).name}")
        self.post(lambda: None)


# ---------------------------------------------------------------------- entry point


def run_bridge(environ: Mapping[str, str] | None = None, commands: Runner | None = None) -> int:
    """``shepherd-child run``: parse the environment, run the bridge, return its exit code.
    ``commands`` runs the agent's ``shepherd-child`` calls (a command socket:
    :mod:`actors.runtime.command_socket`)."""
    use_plain_from_env()
    try:
        env = child_env_from(os.environ if environ is None else environ, bridge=True)
    except ShepherdError as exc:
        print(f"shepherd-child run: {exc.message}", file=sys.stderr)
        return 2
    return Bridge(env, commands=commands).run()
