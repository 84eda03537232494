"""The child bridge: one ``shepherd-child run`` process per agent, between the session mailbox
and the agent (DESIGN §6 "Child bridge", §10 orphans).

Rules:
- Identity comes only from the ``SHEPHERD_*`` environment the parent set (:data:`ENV_VARS`);
  every envelope the bridge publishes carries this child's capability and goes to the
  ``parent`` inbox. The bridge never publishes ``task_done`` by itself: a turn ending is a
  ``turn_end`` runtime event and nothing more (DESIGN §1.1). Only the agent's explicit
  ``done`` (a script step, or ``shepherd-child done`` from the agent's shell) settles a task.
- Its own inbox accepts only what the parent wrote for it: this session, this target, this
  child's capability (constant-time compare). Parent-only kinds (task, control, notice, ack)
  must come from ``shepherd``; a message or reply keeps its original author as sender (the
  broker forwards it unchanged but stamps the *recipient's* capability, which only the parent
  knows). Anything else is quarantined by the mailbox with the reason.
- One thread owns all state (the *core*): mailbox deliveries, command completions, timers,
  signals and the parent's death are all posted as callables onto one queue that the main
  loop runs in order. Adapters and :class:`~actors.scripted.ScriptedDriver` are therefore
  single-threaded by construction.
- The bridge exits on ``control close`` (code 0, ``exit`` as its last word), on SIGTERM /
  SIGINT / SIGHUP (128 + signal), when the parent is gone (code 0: nobody is left to read a
  status, and it is an orderly stop, not a crash), when a scripted ``exit`` step says so
  (that code), or on a fatal start-up error (code 2: bad environment, options or script).
- Nothing it started outlives it (DESIGN §10): at exit the adapter stops the agent, then,
  if the bridge leads its own session (the parent starts it with ``start_new_session``), every
  remaining process of that session — its own process group and the command adapter's
  per-turn groups alike — gets SIGTERM, then SIGKILL after a grace period.

Theory of operation: :func:`run_bridge` parses the environment, builds a :class:`Bridge`, and
:meth:`Bridge.run` opens the mailbox, builds the adapter named by ``SHEPHERD_ADAPTER`` (a bad
script is reported as a runtime ``error`` and exits 2), subscribes to the agent's inbox,
starts a :class:`ParentWatch` thread (a pidfd on the parent, polled), publishes ``ready`` with
its pid, starts the adapter, and runs the loop until something calls :meth:`Bridge.finish`.
Adapters (:class:`Adapter`) are looked up in :data:`ADAPTERS` by name and imported lazily;
adding one (``pi-rpc``) is one class plus one line there.

Log levels (loguru, to stderr, which the parent sends to the agent's log file): INFO
lifecycle (ready, turns, exit), WARNING refused input and failed publishes, ERROR a core
callback that raised (caught; the loop goes on).
"""

from __future__ import annotations

import contextlib
import hmac
import importlib
import json
import os
import queue
import select
import selectors
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, ClassVar, Protocol

import msgspec
from loguru import logger

from actors.clock import SystemClock
from actors.idsource import IdSource
from actors.mailbox import Mailbox
from actors.scripted import AgentIdentity, ScriptedDriver
from actors.transport import PARENT_INBOX, Subscription
from protocol.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    RuntimeEvent,
    TaskEnvelope,
)
from protocol.errors import (
    ForbiddenSender,
    InvalidArgument,
    InvalidEnvelope,
    SessionUnavailable,
    ShepherdError,
)
from protocol.ids import PARENT_ID, IdKind, kind_of
from protocol.script import ScriptError, ScriptMachine, load_script_text
from protocol.settings import Settings

__all__ = [
    "ADAPTERS",
    "ENV_VARS",
    "OUTPUT_TAIL_BYTES",
    "Adapter",
    "AgentContext",
    "Bridge",
    "ChildEnv",
    "OutputTail",
    "ParentWatch",
    "ScriptedAdapter",
    "ShellRunner",
    "child_env_from",
    "envelope_validator",
    "exit_status",
    "pump_process",
    "run_bridge",
    "session_members",
    "terminate_session",
]

#: The environment contract between the parent's launcher and this bridge.
ENV_SESSION = "SHEPHERD_SESSION"
ENV_SESSION_ID = "SHEPHERD_SESSION_ID"
ENV_MAILBOX = "SHEPHERD_MAILBOX"
ENV_AGENT_ID = "SHEPHERD_AGENT_ID"
ENV_AGENT_NAME = "SHEPHERD_AGENT_NAME"
ENV_CAPABILITY = "SHEPHERD_CAPABILITY"
ENV_PARENT_PID = "SHEPHERD_PARENT_PID"
ENV_ADAPTER = "SHEPHERD_ADAPTER"
ENV_AGENT_OPTIONS = "SHEPHERD_AGENT_OPTIONS"
ENV_VARS = (
    ENV_SESSION,
    ENV_SESSION_ID,
    ENV_MAILBOX,
    ENV_AGENT_ID,
    ENV_AGENT_NAME,
    ENV_CAPABILITY,
    ENV_PARENT_PID,
    ENV_ADAPTER,
    ENV_AGENT_OPTIONS,
)

#: A tool result keeps the last 8 KiB of a command's output (the watchdog hashes it; `read`
#: shows its tail): enough to see an error, never a whole build log in one envelope.
OUTPUT_TAIL_BYTES = 8 * 1024
#: How long a stopped process gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 2.0
#: After a process exited, how long its pipes may stay open (held by a background child)
#: before the reader gives up on them.
PIPE_LINGER_S = 0.5

#: Adapter name -> "module:Class", imported on first use (a pi-rpc adapter's dependencies
#: are never loaded for a scripted agent).
ADAPTERS: dict[str, str] = {
    "scripted": "actors.child:ScriptedAdapter",
    "command": "actors.command_adapter:CommandAdapter",
    "pi-rpc": "actors.pi_adapter:PiRpcAdapter",
}

# Kinds the parent may put into an agent's inbox, and which of them may carry another sender.
_INBOX_KINDS = (
    TaskEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    NoticeEnvelope,
    AckEnvelope,
    ControlEnvelope,
)
_FORWARDED_KINDS = (MessageEnvelope, ReplyEnvelope)


# ---------------------------------------------------------------------- environment


class ChildEnv(msgspec.Struct, frozen=True, kw_only=True):
    """What the environment says about this child (see :data:`ENV_VARS`)."""

    session_id: str
    mailbox: str
    agent_id: str
    capability: str
    name: str = ""
    session_dir: str | None = None
    parent_pid: int | None = None
    adapter: str = "scripted"
    options: dict[str, Any] = {}

    @property
    def identity(self) -> AgentIdentity:
        return AgentIdentity(
            agent_id=self.agent_id,
            session_id=self.session_id,
            capability=self.capability,
            name=self.name,
        )


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise SessionUnavailable(
            f"{name} is not set: shepherd-child runs only inside an agent started by a "
            "Shepherd session"
        )
    return value


def child_env_from(environ: Mapping[str, str], *, bridge: bool) -> ChildEnv:
    """Parse the ``SHEPHERD_*`` variables; a missing or malformed one is named in the error.

    ``bridge=True`` (``shepherd-child run``) also needs the parent's pid; the adapter
    defaults to ``scripted`` and its options to ``{}``.
    """
    session_id = _required(environ, ENV_SESSION_ID)
    if kind_of(session_id) is not IdKind.SESSION:
        raise InvalidArgument(f"{ENV_SESSION_ID}={session_id!r:.80} is not a session id")
    agent_id = _required(environ, ENV_AGENT_ID)
    if kind_of(agent_id) is not IdKind.AGENT:
        raise InvalidArgument(f"{ENV_AGENT_ID}={agent_id!r:.80} is not an agent id")
    mailbox = _required(environ, ENV_MAILBOX)
    capability = _required(environ, ENV_CAPABILITY)
    parent_pid: int | None = None
    if bridge:
        raw_pid = _required(environ, ENV_PARENT_PID)
        try:
            parent_pid = int(raw_pid)
        except ValueError:
            raise InvalidArgument(f"{ENV_PARENT_PID}={raw_pid!r:.40} is not a pid") from None
        if parent_pid <= 1:
            raise InvalidArgument(f"{ENV_PARENT_PID}={parent_pid} is not a supervisor's pid")
    options: dict[str, Any] = {}
    raw_options = environ.get(ENV_AGENT_OPTIONS, "").strip()
    if raw_options:
        try:
            decoded = json.loads(raw_options)
        except ValueError as exc:
            raise InvalidArgument(f"{ENV_AGENT_OPTIONS} is not valid JSON: {exc}") from None
        if not isinstance(decoded, dict):
            raise InvalidArgument(f"{ENV_AGENT_OPTIONS} must be a JSON object")
        options = decoded
    return ChildEnv(
        session_id=session_id,
        mailbox=mailbox,
        agent_id=agent_id,
        capability=capability,
        name=environ.get(ENV_AGENT_NAME, "").strip(),
        session_dir=environ.get(ENV_SESSION) or None,
        parent_pid=parent_pid,
        adapter=environ.get(ENV_ADAPTER, "").strip() or "scripted",
        options=options,
    )


def envelope_validator(
    env: ChildEnv, *, kinds: tuple[type, ...] = _INBOX_KINDS, forwarded: tuple[type, ...] = ()
) -> Callable[[str, AnyEnvelope], None]:
    """The mailbox validator for an inbox of this child (see the module rules).

    ``kinds`` are the envelope kinds accepted; those in ``forwarded`` may carry another
    author than ``shepherd`` (the parent routes them but keeps their sender)."""
    expected = env.capability.encode()

    def validate(inbox: str, envelope: AnyEnvelope) -> None:
        if envelope.session_id != env.session_id:
            raise ForbiddenSender(f"envelope belongs to session {envelope.session_id}")
        if not isinstance(envelope, kinds):
            kind = envelope.__struct_config__.tag
            raise InvalidEnvelope(f"an agent's inbox does not take {kind!r} envelopes")
        if envelope.sender_id != PARENT_ID and not isinstance(envelope, forwarded):
            raise ForbiddenSender(
                f"only {PARENT_ID!r} may send {envelope.__struct_config__.tag!r} envelopes "
                f"here, not {envelope.sender_id!r}"
            )
        if envelope.target_id != env.agent_id:
            raise ForbiddenSender(f"envelope is addressed to {envelope.target_id!r}, not us")
        if not hmac.compare_digest(envelope.capability.encode(), expected):
            raise ForbiddenSender("capability does not match this agent")

    return validate


# ---------------------------------------------------------------------- processes


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _stat_fields(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of ``pid`` from /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        fields = data[data.rindex(b")") + 2 :].split()
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])
    except (ValueError, IndexError):
        return None


def session_members(sid: int, *, pgid: int | None = None) -> list[int]:
    """Live (non-zombie) processes of session ``sid`` (or only of group ``pgid``), never
    this process. Linux /proc; empty elsewhere."""
    me = os.getpid()
    members: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return members
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        fields = _stat_fields(int(name))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if fields[3] == sid and (pgid is None or fields[2] == pgid):
            members.append(int(name))
    return members


def _open_pidfds(pids: list[int]) -> dict[int, int]:
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fds[pid] = os.pidfd_open(pid)
    return fds


def _signal_fds(fds: Mapping[int, int], sig: int) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, sig)


def _wait_fds(fds: dict[int, int], timeout_s: float, monotonic: Callable[[], float]) -> None:
    """Wait until every pidfd in ``fds`` is readable (its process exited) or the time is up;
    closes and removes the ones that fired."""
    deadline = monotonic() + timeout_s
    while fds:
        remaining = deadline - monotonic()
        if remaining <= 0:
            return
        poller = select.poll()
        by_fd = {fd: pid for pid, fd in fds.items()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll(max(1, int(remaining * 1000))):
            os.close(fd)
            del fds[by_fd[fd]]


def terminate_session(
    sid: int,
    *,
    grace_s: float = KILL_GRACE_S,
    pgid: int | None = None,
    monotonic: Callable[[], float] | None = None,
) -> list[int]:
    """SIGTERM every live process of session ``sid`` (or group ``pgid`` in it), SIGKILL what
    is still there after ``grace_s``; repeated while new members appear (a fork racing the
    scan). Returns the pids signalled. Usable by the parent too: the bridge's pid is its
    session id, and the command adapter's per-turn process groups live in that session."""
    clock = monotonic or SystemClock().monotonic
    signalled: list[int] = []
    for _ in range(5):
        pids = session_members(sid, pgid=pgid)
        if not pids:
            break
        signalled.extend(pids)
        fds = _open_pidfds(pids)
        try:
            _signal_fds(fds, signal.SIGTERM)
            _wait_fds(fds, grace_s, clock)
            _signal_fds(fds, signal.SIGKILL)
            _wait_fds(fds, 1.0, clock)
        finally:
            for fd in fds.values():
                os.close(fd)
    return signalled


def signal_group(pgid: int, sig: int) -> bool:
    """Signal process group ``pgid``; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        logger.warning("not allowed to signal process group {}", pgid)
        return False
    return True


def pump_process(
    proc: subprocess.Popen[bytes],
    on_data: Callable[[IO[bytes], bytes], None],
    *,
    linger_s: float = PIPE_LINGER_S,
    monotonic: Callable[[], float] | None = None,
) -> None:
    """Read ``proc``'s stdout/stderr pipes (whichever exist) until they close, or until the
    process itself has exited and ``linger_s`` passed (a background grandchild may hold a
    pipe forever). Does NOT reap ``proc``: the caller does, so its pid (and process group)
    cannot be reused while the caller may still signal it. Runs on a worker thread."""
    clock = monotonic or SystemClock().monotonic
    streams = [s for s in (proc.stdout, proc.stderr) if s is not None]
    pidfd: int | None = None
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)
    with selectors.DefaultSelector() as sel:
        for stream in streams:
            sel.register(stream, selectors.EVENT_READ, stream)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, None)
        open_streams = len(streams)
        exited_at: float | None = None
        try:
            while open_streams:
                if exited_at is None:
                    timeout = None if pidfd is not None else 0.1
                else:
                    timeout = exited_at + linger_s - clock()
                    if timeout <= 0:
                        return
                ready = sel.select(timeout)
                if pidfd is None and exited_at is None and proc.poll() is not None:
                    exited_at = clock()
                for key, _ in ready:
                    source: IO[bytes] | None = key.data
                    if source is None:  # the pidfd: the process exited
                        sel.unregister(key.fileobj)
                        exited_at = clock()
                        continue
                    data = os.read(source.fileno(), 65536)
                    if data:
                        on_data(source, data)
                    else:
                        sel.unregister(source)
                        open_streams -= 1
        finally:
            if pidfd is not None:
                os.close(pidfd)


class OutputTail:
    """The last ``limit`` bytes written to it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.dropped = False

    def write(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= self._limit:
            self._size -= len(self._chunks.popleft())
            self.dropped = True

    def text(self) -> str:
        data = b"".join(self._chunks)
        if len(data) > self._limit:
            data = data[-self._limit :]
            self.dropped = True
        text = data.decode("utf-8", errors="replace")
        return f"[… earlier output cut …]\n{text}" if self.dropped else text


class ShellRunner:
    """Runs ``bash -c COMMAND`` for scripted ``run`` steps.

    The command starts on the core thread (so a ``close`` processed right after it always
    finds it) in the bridge's OWN process group, so the parent's group kill reaches it; a
    worker thread collects the last :data:`OUTPUT_TAIL_BYTES` of stdout+stderr and the exit
    status and hands them to ``done`` (which posts back to the core)."""

    def __init__(self, cwd: str | None, environ: Mapping[str, str]) -> None:
        self._cwd = cwd
        self._environ = dict(environ)
        self._lock = threading.Lock()
        self._running: dict[subprocess.Popen[bytes], threading.Thread] = {}

    def run(self, command: str, done: Callable[[str, int], None]) -> None:
        try:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=self._cwd,
                env=self._environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            done(f"cannot run command: {exc}", 127)
            return
        thread = threading.Thread(
            target=self._wait, args=(proc, done), name="shepherd-run", daemon=True
        )
        with self._lock:
            self._running[proc] = thread
        thread.start()

    def _wait(self, proc: subprocess.Popen[bytes], done: Callable[[str, int], None]) -> None:
        tail = OutputTail(OUTPUT_TAIL_BYTES)
        try:
            pump_process(proc, lambda _stream, data: tail.write(data))
        finally:
            code = exit_status(proc.wait())
            assert proc.stdout is not None
            proc.stdout.close()
            with self._lock:
                self._running.pop(proc, None)
        done(tail.text(), code)

    def close(self, grace_s: float = KILL_GRACE_S) -> None:
        """Stop every running command (SIGTERM, then SIGKILL after ``grace_s``)."""
        with self._lock:
            running = list(self._running.items())
        for proc, _ in running:
            with contextlib.suppress(OSError):
                proc.terminate()
        for proc, thread in running:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
            thread.join(timeout=grace_s)


class ParentWatch:
    """Calls ``on_gone`` (once, from its own thread) when process ``pid`` exits.

    Uses a pidfd (``os.pidfd_open``: Linux >= 5.3, race-free against pid reuse once open) in
    ``poll`` beside a stop pipe; without pidfd support it checks ``kill(pid, 0)`` every second.
    A parent that is already gone at :meth:`start` fires ``on_gone`` at once."""

    def __init__(self, pid: int, on_gone: Callable[[], None], *, poll_s: float = 1.0) -> None:
        self._pid = pid
        self._on_gone = on_gone
        self._poll_s = poll_s
        self._pidfd: int | None = None
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None

    def start(self) -> ParentWatch:
        try:
            self._pidfd = os.pidfd_open(self._pid)
        except ProcessLookupError:
            self._on_gone()
            return self
        except (OSError, AttributeError):
            self._pidfd = None  # no pidfd support: poll with kill(pid, 0)
        self._thread = threading.Thread(target=self._run, name="shepherd-parent-watch", daemon=True)
        self._thread.start()
        return self

    def _alive(self) -> bool:
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._stop_r, select.POLLIN)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        timeout_ms = None if self._pidfd is not None else int(self._poll_s * 1000)
        while True:
            fds = {fd for fd, _ in poller.poll(timeout_ms)}
            if self._stop_r in fds:
                return
            if (self._pidfd is not None and self._pidfd in fds) or (
                self._pidfd is None and not self._alive()
            ):
                self._on_gone()
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in (self._pidfd, self._stop_r, self._stop_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._pidfd = None


def reconnect_window_s() -> float:
    """How long an orphaned bridge waits for a restarted parent (``SHEPHERD_RECONNECT_S``)."""
    try:
        return float(os.environ.get("SHEPHERD_RECONNECT_S", "30"))
    except ValueError:
        return 30.0


class Reconnect:
    """Waits (on its own thread) for ``session.json`` to name a new, live parent pid.

    A file watch would add a dependency on the directory's watcher for a rare event; reading
    one small file every 100 ms for at most the reconnect window is cheaper and simpler."""

    def __init__(
        self,
        session_file: Path,
        gone_pid: int | None,
        window_s: float,
        *,
        on_back: Callable[[int], None],
        on_timeout: Callable[[], None],
        monotonic: Callable[[], float],
    ) -> None:
        self._monotonic = monotonic
        self._file = session_file
        self._gone = gone_pid
        self._window_s = window_s
        self._on_back = on_back
        self._on_timeout = on_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shepherd-reconnect", daemon=True)

    def start(self) -> Reconnect:
        self._thread.start()
        return self

    def _new_parent(self) -> int | None:
        try:
            pid = json.loads(self._file.read_bytes())["parent_pid"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(pid, int) or pid == self._gone:
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return None
        return pid

    def _run(self) -> None:
        deadline = self._monotonic() + self._window_s
        while not self._stop.is_set():
            pid = self._new_parent()
            if pid is not None:
                self._on_back(pid)
                return
            if self._monotonic() >= deadline:
                self._on_timeout()
                return
            self._stop.wait(0.1)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


# ---------------------------------------------------------------------- adapters


class AgentContext(Protocol):
    """What an adapter may use: everything runs on the core thread unless noted."""

    env: ChildEnv
    clock: SystemClock
    ids: IdSource

    @property
    def cwd(self) -> str: ...

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the core thread (callable from any thread)."""

    def publish(self, envelope: AnyEnvelope) -> None:
        """Publish to the parent inbox (errors are logged, never raised)."""

    def runtime(self, event: RuntimeEvent, **fields: Any) -> None:
        """Publish a runtime event of this agent."""

    def finish(self, code: int) -> None:
        """The agent is gone: the bridge exits with ``code`` after this callback."""

    def child_environ(self) -> dict[str, str]:
        """The environment for processes the agent runs (SHEPHERD_* included)."""


class Adapter(Protocol):
    """How one kind of agent is run. Built with ``cls(ctx, options)``; a bad option raises a
    :class:`~protocol.errors.ShepherdError` (reported as a runtime ``error``, exit 2).

    ``deliver`` gets every accepted inbox envelope except ``control close`` (the bridge
    handles that: it calls ``close`` and exits). ``close`` stops the agent for good and must
    leave no process of its own running; it is called exactly once, at exit."""

    name: ClassVar[str]

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None: ...

    def start(self) -> None: ...

    def deliver(self, envelope: AnyEnvelope) -> None: ...

    def close(self) -> None: ...


def adapter_class(name: str) -> type[Adapter]:
    target = ADAPTERS.get(name)
    if target is None:
        known = ", ".join(sorted(ADAPTERS))
        raise InvalidArgument(f"unknown adapter {name!r} (known: {known})")
    module_name, _, class_name = target.partition(":")
    cls: type[Adapter] = getattr(importlib.import_module(module_name), class_name)
    return cls


class ScriptedAdapter:
    """The built-in scripted agent: a :class:`~protocol.script.ScriptMachine` driven by the
    shared :class:`~actors.scripted.ScriptedDriver`. Options: ``{"script": PATH}`` (JSON, or
    TOML when the name ends in ``.toml``; relative to the agent's cwd). ``control`` cancel /
    abort are only recorded (the driver outputs them); steer is the machine's own queue jump."""

    name: ClassVar[str] = "scripted"

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None:
        path = options.get("script")
        if not isinstance(path, str) or not path:
            raise ScriptError('the scripted adapter needs the option "script" (a file path)')
        try:
            text = Path(ctx.cwd, path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ScriptError(f"cannot read script {path}: {exc}") from None
        script = load_script_text(text, toml=path.endswith(".toml"))
        self._ctx = ctx
        self._runner = ShellRunner(ctx.cwd, ctx.child_environ())
        self.driver = ScriptedDriver(
            ScriptMachine(script),
            ctx.env.identity,
            publish=self._publish,
            clock=ctx.clock,
            ids=ctx.ids,
            run_command=self._runner.run,
            post=ctx.post,
            on_exit=ctx.finish,
        )

    def _publish(self, envelope: AnyEnvelope) -> None:
        if isinstance(envelope, RuntimeEnvelope) and envelope.event == "ready":
            return  # the bridge already said ready, with its pid
        self._ctx.publish(envelope)

    def start(self) -> None:
        self.driver.start()

    def deliver(self, envelope: AnyEnvelope) -> None:
        self.driver.on_envelope(envelope)

    def close(self) -> None:
        if self.driver.exited is None:
            self.driver.exited = 0  # late completions are ignored; the bridge says "exit"
        self._runner.close()


# ---------------------------------------------------------------------- the bridge


@dataclass(slots=True)
class _Exit:
    code: int
    reason: str


class Bridge:
    """One agent's bridge process (see the module docstring). Implements
    :class:`AgentContext` for its adapter."""

    def __init__(
        self,
        env: ChildEnv,
        *,
        settings: Settings | None = None,
        clock: SystemClock | None = None,
        ids: IdSource | None = None,
    ) -> None:
        self.env = env
        self.settings = settings or Settings()
        self.clock = clock or SystemClock()
        self.ids = ids or IdSource()
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._mailbox: Mailbox | None = None
        self._subscription: Subscription | None = None
        self._adapter: Adapter | None = None
        self._watch: ParentWatch | None = None
        self._reconnect: Reconnect | None = None
        self._parent_pid: int | None = None
        self._exit: _Exit | None = None
        self._exit_published = False
        self._signalled: tuple[int, str] | None = None
        self._cwd = os.getcwd()
        self._log = logger.bind(agent=env.name or env.agent_id)

    # ------------------------------------------------------------------ AgentContext

    @property
    def cwd(self) -> str:
        return self._cwd

    def post(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)  # SimpleQueue.put is reentrant: safe from a signal handler

    def publish(self, envelope: AnyEnvelope) -> None:
        if isinstance(envelope, RuntimeEnvelope) and envelope.event == "exit":
            self._exit_published = True
        if self._mailbox is None:
            return
        try:
            self._mailbox.publish(PARENT_INBOX, envelope)
        except ShepherdError as exc:
            self._log.warning(
                "cannot publish {} to the parent: {} ({})",
                envelope.__struct_config__.tag,
                exc.message,
                exc.code,
            )

    def runtime(self, event: RuntimeEvent, **fields: Any) -> None:
        self.publish(
            RuntimeEnvelope(
                message_id=self.ids.new(IdKind.MESSAGE),
                session_id=self.env.session_id,
                sender_id=self.env.agent_id,
                target_id=PARENT_ID,
                created_at=self.clock.now(),
                capability=self.env.capability,
                event=event,
                **fields,
            )
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
        return environ

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until close, parent death, a signal or the agent's exit; return the exit code."""
        try:
            self._mailbox = Mailbox.open(
                self.env.mailbox,
                self.env.session_id,
                self.settings,
                validate=envelope_validator(self.env, forwarded=_FORWARDED_KINDS),
                on_reject=self._rejected,
            )
        except (ShepherdError, OSError) as exc:
            self._log.error("cannot open the session mailbox {}: {}", self.env.mailbox, exc)
            return 2
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
        try:
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
        self.runtime("ready", pid=os.getpid())
        self._log.info(
            "ready: pid {} adapter {} session {}",
            os.getpid(),
            self.env.adapter,
            self.env.session_id,
        )
        self._call(self._adapter.start)
        return None

    def _mailbox_or_fail(self) -> Mailbox:
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
        if os.getsid(0) == os.getpid():  # we lead our session: nothing of it may outlive us
            left = terminate_session(
                os.getpid(), grace_s=KILL_GRACE_S, monotonic=self.clock.monotonic
            )
            if left:
                self._log.info("stopped {} leftover process(es): {}", len(left), left)
        if self._exit is not None and not self._exit_published:
            self.runtime("exit", exit_code=self._exit.code, text=reason)
        self._log.info("exit {} ({})", self._exit.code if self._exit else 2, reason)
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
        self._adapter.deliver(envelope)

    def _rejected(self, inbox: str, envelope: AnyEnvelope | None, error: ShepherdError) -> None:
        who = envelope.sender_id if envelope is not None else "unknown sender"
        self._log.warning("refused an envelope from {} in {}: {}", who, inbox, error.message)

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
        self.runtime("ready", pid=os.getpid())  # the new parent learns this bridge is alive

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


def configure_logging(level: str | None = None) -> None:
    """loguru to stderr (the parent points it at the agent's log file)."""
    logger.remove()
    logger.add(
        sys.stderr,
        level=(level or os.environ.get("SHEPHERD_LOG_LEVEL") or "INFO").upper(),
        format="{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} {extra[agent]} | {message}",
    )
    logger.configure(extra={"agent": "-"})
    logger.enable("actors")


def run_bridge(environ: Mapping[str, str] | None = None) -> int:
    """``shepherd-child run``: parse the environment, run the bridge, return its exit code."""
    configure_logging()
    try:
        env = child_env_from(os.environ if environ is None else environ, bridge=True)
    except ShepherdError as exc:
        print(f"shepherd-child run: {exc.message}", file=sys.stderr)
        return 2
    return Bridge(env).run()
