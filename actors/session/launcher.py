"""Starting agents as real processes: one ``shepherd-child`` bridge per agent.

Each bridge runs in its own session and process group (so closing an agent can kill the
whole tree the agent started), with its identity, capability and session in the environment,
and its output in ``<session>/agents/<agent_id>/output.log`` (0600, like every file of the
session: it may quote what the agent was told). A handle reads the end of that log
(``log_tail``) so that an agent which dies at start, before it could say anything through the
mailbox, is still reported with its reason.

Exits are observed by ONE reaper thread for all children, waiting on pidfds: no thread per
child, no polling. Stopping sends SIGTERM to the group, then SIGKILL after a grace period;
after the bridge's exit is observed, anything still in its group is killed too (no orphans).
The exit is reported exactly once through ``on_exit``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from actors.child.env import (
    ENV_ADAPTER,
    ENV_AGENT_ID,
    ENV_AGENT_NAME,
    ENV_AGENT_OPTIONS,
    ENV_CAPABILITY,
    ENV_MAILBOX,
    ENV_NATS_CREDS,
    ENV_PARENT_PID,
    ENV_SESSION,
    ENV_SESSION_ID,
    ENV_SETTINGS,
    tls_environ,
)
from actors.child.sandbox_host import clearing
from actors.runtime.clock import Clock
from actors.runtime.log import logger
from actors.runtime.procs import (
    pid_alive,
    raise_open_files_limit,
    restore_open_files_limit,
    terminate_session,
)
from actors.runtime.transport import PARENT_INBOX
from actors.session.agent import AgentHandle, AgentSpec
from actors.session.bridge_process import read_log_tail, start_bridge
from actors.session.recovery import clear_leftovers
from protocol.core.errors import ForbiddenSender, InvalidHandle, SessionUnavailable
from protocol.core.transport_url import TlsFiles
from protocol.records.settings import Settings

if TYPE_CHECKING:
    from actors.transports.nats.auth import Authority

__all__ = [
    "ChildProcess",
    "ProcessLauncher",
    "Reaper",
]

STOP_GRACE_S = 3.0


_Watched = tuple["subprocess.Popen[bytes] | int", Callable[[int], None], str | None]


class Reaper:
    """One thread that waits on the pidfds of every child and reports each exit once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, _Watched] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._poll = select.poll()
        self._poll.register(self._wake_r, select.POLLIN)
        self._closed = False
        self._idle = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name="shepherd-reaper", daemon=True)
        self._thread.start()

    def watch(
        self,
        proc: subprocess.Popen[bytes] | int,
        on_exit: Callable[[int], None],
        agent_id: str | None = None,
    ) -> None:
        """Report ``proc``'s exit. An ``int`` is a process that is not our child (adopted
        after a restart): its exit is seen, but its status cannot be read (reported as -1)."""
        fd = os.pidfd_open(proc if isinstance(proc, int) else proc.pid)
        with self._lock:
            self._watched[fd] = (proc, on_exit, agent_id)
            self._poll.register(fd, select.POLLIN)
        os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while True:
            events = self._poll.poll()
            for fd, _ in events:
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    if self._closed:
                        return
                    continue
                with self._lock:  # still watched until reported: wait_all_exited waits for it
                    proc, on_exit, agent_id = self._watched[fd]
                    self._poll.unregister(fd)
                pid = proc if isinstance(proc, int) else proc.pid
                # Whatever the agent left behind, in any process group of the bridge's session
                # (command-adapter turns run in groups of their own). The unreaped bridge keeps
                # its pid, so the session id cannot have been reused yet.
                terminate_session(pid, grace_s=0.0)
                if agent_id is not None:
                    # and what escaped into sessions of its own (Pi runs its tools detached)
                    _kill_tagged(f"{ENV_AGENT_ID}={agent_id}".encode())
                if isinstance(proc, int):
                    code = -1
                else:
                    code = proc.wait()
                    code = 128 - code if code < 0 else code  # killed by a signal: 128 + signum
                try:
                    on_exit(code)
                except Exception:
                    logger.opt(exception=True).error("on_exit callback failed")
                with self._idle:
                    del self._watched[fd]
                    self._idle.notify_all()
                os.close(fd)  # after: its number is the key until then

    @property
    def watching(self) -> int:
        return len(self._watched)

    def wait_all_exited(self, timeout: float) -> bool:
        """Block until every watched child's exit has been reported (or the timeout)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._watched, timeout=timeout)

    def close(self) -> None:
        self._closed = True
        os.write(self._wake_w, b"x")
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for fd in list(self._watched):
            os.close(fd)
        os.close(self._wake_r)
        os.close(self._wake_w)


def _kill_tagged(tag: bytes) -> None:
    """SIGKILL every live process whose environment carries ``tag``."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if tag in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def _kill_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class ChildProcess:
    """The :class:`~actors.session.agent.AgentHandle` of one bridge process (ours or adopted)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes] | int,
        clock: Clock,
        grace_s: float,
        log_path: Path | None = None,
    ) -> None:
        self.proc = proc
        self._clock = clock
        self._grace_s = grace_s
        self.log_path = log_path

    def log_tail(self, lines: int) -> list[str]:
        """The end of the bridge's log (its stderr: where a start-up failure is told)."""
        if self.log_path is None:
            return []
        try:
            return read_log_tail(self.log_path, lines)
        except FileNotFoundError:
            return []

    @property
    def pid(self) -> int:
        return self.proc if isinstance(self.proc, int) else self.proc.pid

    def running(self) -> bool:
        if isinstance(self.proc, int):
            return pid_alive(self.proc)
        return self.proc.poll() is None

    def stop(self) -> None:
        """After a ``close`` envelope: give the bridge a moment to exit on its own (a clean
        exit 0), then SIGTERM its group, then SIGKILL."""
        if not self.running():
            return
        self._clock.call_later(self._grace_s, self.terminate)

    def terminate(self) -> None:
        if not self.running():
            return
        _kill_group(self.pid, signal.SIGTERM)
        self._clock.call_later(self._grace_s, self.kill)

    def kill(self) -> None:
        if self.running():
            _kill_group(self.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> None:
        if isinstance(self.proc, subprocess.Popen):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)


class ProcessLauncher:
    """Starts ``python -m actors.child.cli run`` for each agent of a session."""

    def __init__(
        self,
        *,
        session_dir: Path,
        session_id: str,
        mailbox_root: Path | str,
        ensure_inbox: Callable[[str], object],
        register: Callable[[AgentSpec], None],
        clock: Clock,
        settings: Settings | None = None,
        parent_pid: int | None = None,
        grace_s: float = STOP_GRACE_S,
        python: str = sys.executable,
        extra_env: Mapping[str, str] | None = None,
        authority: Authority | None = None,
        set_aside: Callable[[str, Path], int] | None = None,
        nats_tls: TlsFiles | None = None,
    ) -> None:
        self._session_dir = session_dir
        #: the transport's: what an agent's inbox holds unread, moved aside (serve --recover)
        self._set_aside = set_aside
        self._session_id = session_id
        self._mailbox_root = mailbox_root
        self._ensure_inbox = ensure_inbox
        self._register = register
        self._clock = clock
        self._settings = settings or Settings()
        self._parent_pid = parent_pid or os.getpid()
        self._grace_s = grace_s
        self._python = python
        #: more for every bridge's environment (the session's trace context)
        self._extra_env = dict(extra_env or {})
        #: mints each child's own NATS user (``serve --nats-auth``:
        #: :mod:`actors.transports.nats.auth`)
        self._authority = authority
        #: the TLS files of the session's ``tls://`` servers (``serve --nats-ca``...)
        self._nats_tls = nats_tls
        # one pidfd per agent: 1,000 agents pass the usual soft limit of 1,024 descriptors
        self._open_files_soft = raise_open_files_limit()
        self.reaper = Reaper()
        self.children: dict[str, ChildProcess] = {}
        #: held while a bridge is started and while the launcher closes: a launch that comes
        #: after :meth:`close` (an agent spawned just before shutdown, whose actor starts late)
        #: is refused instead of leaving a bridge nobody kills or reaps
        self._lock = threading.Lock()
        self._closed = False

    def environment(self, spec: AgentSpec) -> dict[str, str]:
        options: dict[str, Any] = {
            k: v for k, v in spec.options.items() if k not in ("name", "adapter")
        }
        return {
            ENV_SESSION: str(self._session_dir),
            ENV_SESSION_ID: self._session_id,
            ENV_MAILBOX: str(self._mailbox_root),
            ENV_AGENT_ID: spec.agent_id,
            ENV_AGENT_NAME: spec.name,
            ENV_CAPABILITY: spec.capability,
            ENV_PARENT_PID: str(self._parent_pid),
            ENV_ADAPTER: spec.adapter,
            ENV_AGENT_OPTIONS: json.dumps(options),
            ENV_SETTINGS: msgspec.json.encode(self._settings).decode(),
            **self._extra_env,
            **({ENV_NATS_CREDS: str(self._creds_path(spec))} if self._authority else {}),
            **tls_environ(self._nats_tls),
        }

    def _creds_path(self, spec: AgentSpec) -> Path:
        return self._session_dir / "agents" / spec.agent_id / "nats.creds"

    def spawn_options(
        self, name: str, adapter: str, script: Any, options: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """A script is the path of a script file the scripted adapter reads (checked with the
        other arguments)."""
        if script is None:
            return adapter, options
        return adapter, {**options, "script": script}

    def launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        with self._lock:
            if self._closed:
                raise SessionUnavailable("the session is shutting down; no agent is started")
            return self._launch(spec, on_exit)

    def _launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        self._register(spec)  # the mailbox validator must know the capability first
        self._ensure_inbox(spec.agent_id)
        agent_dir = self._session_dir / "agents" / spec.agent_id
        agent_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        incarnation = spec.options.get("recovered")
        if isinstance(incarnation, int) and self._set_aside is not None:  # serve --recover
            aside = functools.partial(self._set_aside, spec.agent_id)
            clear_leftovers(self._session_id, spec.agent_id, aside, agent_dir, incarnation)
        if self._authority is not None:  # a new NATS user for this bridge (a restarted one too)
            path, agent = self._creds_path(spec), spec.agent_id
            self._authority.write_child(path, self._session_id, agent, PARENT_INBOX)
        cwd = spec.options.get("cwd") or os.getcwd()
        env = {**os.environ, **self.environment(spec)}
        env.pop("SHEPHERD_SESSION_HINT", None)
        log_path = agent_dir / "output.log"
        proc = start_bridge(self._python, cwd, env, log_path)
        restore_open_files_limit(proc.pid, self._open_files_soft)
        child = ChildProcess(proc, self._clock, self._grace_s, log_path)
        self.children[spec.agent_id] = child
        sandboxed = bool(spec.options.get("sandbox"))
        self.reaper.watch(
            proc, clearing(sandboxed, spec.agent_id, proc.pid, on_exit), spec.agent_id
        )
        logger.bind(agent=spec.name).info("started bridge pid {pid}", pid=proc.pid)
        return child

    def _is_bridge_of(self, pid: int, spec: AgentSpec) -> bool:
        """Is ``pid`` the live bridge of ``spec`` in this session (by its environment)?"""
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            leads_session = os.getsid(pid) == pid  # the bridge leads its own session
        except OSError:
            return False
        if stat[stat.rindex(b")") + 2 :].startswith(b"Z"):
            return False
        env = dict(
            item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
        )
        return (
            leads_session
            and env.get(ENV_AGENT_ID) == spec.agent_id
            and env.get(ENV_SESSION_ID) == self._session_id
        )

    def find_bridge(self, spec: AgentSpec) -> int | None:
        """The live bridge of ``spec`` in this session, found by its environment."""
        for entry in os.listdir("/proc"):
            if entry.isdigit() and self._is_bridge_of(int(entry), spec):
                return int(entry)
        return None

    def adopt(
        self, spec: AgentSpec, pid: int | None, on_exit: Callable[[int], None]
    ) -> AgentHandle:
        """Take over a bridge that outlived the previous parent. It must really be *this*
        agent's bridge of *this* session (read from its environment): a restarted parent
        never claims another session's agents. With no recorded pid (the parent died before
        the bridge said ready) the bridge is looked for by its environment."""
        if pid is None:
            pid = self.find_bridge(spec)
            if pid is None:
                raise InvalidHandle(f"no bridge of {spec.name} is running any more")
        elif not self._is_bridge_of(pid, spec):
            raise ForbiddenSender(
                f"pid {pid} is not the bridge of {spec.name} in this session; not adopting it"
            )
        with self._lock:
            if self._closed:
                raise SessionUnavailable("the session is shutting down; no agent is adopted")
            return self._adopt(spec, pid, on_exit)

    def _adopt(self, spec: AgentSpec, pid: int, on_exit: Callable[[int], None]) -> AgentHandle:
        self._register(spec)
        self._ensure_inbox(spec.agent_id)
        log_path = self._session_dir / "agents" / spec.agent_id / "output.log"
        child = ChildProcess(pid, self._clock, self._grace_s, log_path)
        self.children[spec.agent_id] = child
        sandboxed = bool(spec.options.get("sandbox"))
        self.reaper.watch(pid, clearing(sandboxed, spec.agent_id, pid, on_exit), spec.agent_id)
        logger.bind(agent=spec.name).info("adopted bridge pid {pid}", pid=pid)
        return child

    def wait_all_exited(self, timeout: float) -> bool:
        """Block until every started agent's exit has been reported (or the timeout)."""
        return self.reaper.wait_all_exited(timeout)

    def kill_all(self) -> None:
        for child in self.children.values():
            child.kill()

    def close(self, *, kill: bool = True) -> None:
        """Kill every bridge and wait for it; ``kill=False`` leaves them running for the parent
        started next (they wait for one, then exit by themselves), as a parent's SIGKILL does."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if kill:
            self.kill_all()
            for child in self.children.values():
                child.wait(timeout=5)
        self.reaper.close()
