"""``shepherd node --transport nats://... --name HOST`` (``tls://... --nats-ca FILE`` for TLS):
one process per host that starts the bridges of agents a session places there (``spawn --node
HOST``), reports their exits and beats (what it says and where: :mod:`protocol.wire.nodes`).

Rules:
- A bridge is started as the parent's own launcher starts one (:mod:`actors.session.launcher`):
  ``python -m actors.child.cli run``, its own session and process group, its output in a 0600
  log, with the ``SHEPHERD_*`` environment the parent sent. The child's private files are
  created here, on the node's host: the log and the agent's directory under
  ``<dir>/<session>/agents/<agent>/`` (0700; ``--dir``, default
  ``~/.local/state/shepherd/nodes/<name>``), which the bridge is told is its session directory.
  Only the ``SHEPHERD_*`` variables and the trace context are taken from a request: nothing
  else of the node's environment can be set from the wire.
- With ``--nats-creds`` (:mod:`actors.transports.nats.node_login`) the node logs in as its own NATS
  user (its rights: :mod:`actors.transports.nats.permissions`); servers that refuse the login end
  the start at once with ``invalid_argument`` naming the option (the client would retry forever). A
  spawn that carries the child's own credentials gets them written 0600 as ``nats.creds`` in
  the agent's directory and named by ``SHEPHERD_NATS_CREDS``; they are never logged.
- The node is the bridge's parent (its ``SHEPHERD_PARENT_PID``), with no reconnect window: a
  node that dies stops its bridges, whose parent hears of it as a lost node.
- Every exit is reported once, on the session's exit subject, with the end of the bridge's log;
  the agent leaves the node's beats only after its report went out, so a parent that missed
  the report still learns of the exit from the next beat.
- A name is one node's: a node that finds another live node answering to its name refuses to
  start. ``any`` is not a name (it is ``spawn --node any``).
- Everything that touches the node's state runs on its event loop (requests, beats, exits), so
  a beat and a spawn's reply never disagree; starting a process runs off the loop.
- SIGTERM or SIGINT: no new spawn, every bridge is stopped as a close stops it (SIGTERM to its
  group, SIGKILL after the grace), their exits reported, then the node exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from actors.child.env import (
    ENV_AGENT_OPTIONS,
    ENV_NATS_CREDS,
    ENV_NATS_TLS,
    ENV_PARENT_PID,
    ENV_SESSION,
    ENV_VARS,
    tls_environ,
)
from actors.child.sandbox_host import clearing
from actors.records.session_lock import DirectoryLock
from actors.runtime.clock import SystemClock
from actors.runtime.log import logger
from actors.session.bridge_process import read_log_tail as read_tail
from actors.session.bridge_process import start_bridge
from actors.session.launcher import STOP_GRACE_S, ChildProcess, Reaper
from actors.transports.nats import setup
from actors.transports.nats.auth import write_private
from actors.transports.nats.loop import LoopThread
from actors.transports.nats.permissions import check_node_name
from protocol.core.errors import (
    InvalidArgument,
    InvalidHandle,
    LimitExceeded,
    SessionUnavailable,
    ShepherdError,
)
from protocol.core.ids import IdKind, is_id_of
from protocol.core.transport_url import TlsFiles
from protocol.wire import nodes

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from actors.transports.nats.auth import NatsLogin

__all__ = ["NodeServer"]

#: variables a spawn request may set besides ``SHEPHERD_*`` (the session's trace context)
_PASSED = frozenset({"TRACEPARENT"})
#: the bridge's own: the node decides them (the TLS files are paths on this host: the node's)
_NODE_SET = frozenset(
    {ENV_SESSION, ENV_PARENT_PID, ENV_NATS_CREDS, "SHEPHERD_RECONNECT_S", *ENV_NATS_TLS}
)


@dataclass
class _Bridge:
    session_id: str
    child: ChildProcess
    log_path: Path


class NodeServer:
    """A running node (see the module rules); :meth:`close` stops it."""

    def __init__(
        self,
        servers: list[str],
        name: str,
        root: Path,
        *,
        timeout_s: float = 5.0,
        python: str = sys.executable,
        grace_s: float = STOP_GRACE_S,
        login: NatsLogin | None = None,
        tls: TlsFiles | None = None,
        max_running: int | None = None,
    ) -> None:
        """``tls``: the TLS files of ``tls://`` servers (``--nats-ca``..., checked), which the
        node's bridges are given too."""
        self.name = check_node_name(name)
        self._login = login
        self._tls = tls
        self.root = root
        self.boot = secrets.token_hex(8)
        self.seq = 0
        #: told in every beat: each session's admission caps its tasks on this node's agents
        self.max_running = max_running
        self.bridges: dict[str, _Bridge] = {}
        self._starting: set[str] = set()
        self._python = python
        self._grace_s = grace_s
        self._timeout = timeout_s
        self._clock = SystemClock()
        self._closing = False
        self._done = threading.Event()
        self.reaper = Reaper()
        self._thread = LoopThread("shepherd-node")
        self._dir_lock: DirectoryLock | None = None
        try:
            # the node's files are its own for its whole life: a second node on them (the same
            # name on this host, or the same --dir) is refused before it touches any
            self._dir_lock = DirectoryLock(root, self._dir_busy)
            self._thread.run(self._start(servers), timeout_s * 3)
        except TimeoutError:  # the client retries forever: the bounded wait ended it
            self.reaper.close()
            self._thread.stop()
            raise SessionUnavailable(
                f"no NATS server answered within {timeout_s * 3:g} s at {', '.join(servers)}"
            ) from None
        except BaseException:
            self.reaper.close()
            self._thread.stop()
            if self._dir_lock is not None:
                self._dir_lock.release()
            raise

    def _dir_busy(self, holder: int | None) -> ShepherdError:
        who = f"pid {holder}" if holder is not None else "another process"
        return InvalidArgument(
            f"--dir: {self.root} is the directory of a live node ({who}): a node named "
            f"{self.name} is already live on this host, or give this one a --dir of its own"
        )

    async def _start(self, servers: list[str]) -> None:
        refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_error(exc: Exception) -> None:
            if "authorization" in str(exc).lower() and not refused.done():
                refused.set_result(str(exc)[:200])

        connecting = asyncio.ensure_future(
            setup.connect(
                servers,
                None,
                None,
                f"node {self.name}",
                self._timeout,
                self._login,
                files=self._tls,
                on_error=on_error,
            )
        )
        either: list[asyncio.Future[Any]] = [connecting, refused]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not connecting.done():  # the servers refused the login: retrying will not help
            connecting.cancel()
            with contextlib.suppress(BaseException):
                await connecting
            given = "these credentials" if self._login is not None else "no credentials"
            raise InvalidArgument(
                f"--nats-creds: the NATS servers refused node {self.name}'s login with {given} "
                f"({refused.result()}): give it the credentials the session's authority mints "
                f"for it (python -m actors.transports.nats.auth DIR --node {self.name})"
            )
        try:
            self._nc, _ = connecting.result()
        except SessionUnavailable:  # refused for TLS: the cause is named already
            raise
        except Exception as exc:
            raise SessionUnavailable(
                f"no NATS server answered at {', '.join(servers)}: {exc!r}"
            ) from exc
        if await self._answered(nodes.node_subject(self.name, "info")):
            await self._nc.close()
            raise InvalidArgument(f"--name: a node named {self.name} is already live")
        handlers = {
            "info": self._on_info,
            "check": self._on_check,
            "spawn": self._on_spawn,
            "stop": self._on_stop,
        }
        for verb, handler in handlers.items():
            await self._nc.subscribe(nodes.node_subject(self.name, verb), cb=handler)  # type: ignore[arg-type]
        await self._nc.subscribe(nodes.NODE_PING, cb=self._on_ping)
        await self._nc.flush()  # ready means its server has the interest (a cluster: soon all)
        self._beats = asyncio.get_running_loop().create_task(self._beat_loop())

    async def _answered(self, subject: str) -> bool:
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout

        try:
            await self._nc.request(subject, b"", timeout=min(self._timeout, 2.0))
        except (NoRespondersError, NatsTimeout, TimeoutError):
            return False
        return True

    # ------------------------------------------------------------------ beats

    def beat(self) -> nodes.Beat:
        return nodes.Beat(
            name=self.name,
            boot=self.boot,
            seq=self.seq,
            agents=tuple(self.bridges),
            max_running=self.max_running,
        )

    async def _beat_loop(self) -> None:
        while True:
            self.seq += 1
            with contextlib.suppress(Exception):  # a server gone: the next beat tries again
                await self._publish_beat()
            await asyncio.sleep(nodes.HEARTBEAT_S)  # the beat's pace, not a wait for an event

    async def _publish_beat(self) -> None:
        data = msgspec.json.encode(self.beat())
        await self._nc.publish(nodes.node_subject(self.name, "beat"), data)

    async def _on_ping(self, _msg: Msg) -> None:
        with contextlib.suppress(Exception):
            await self._publish_beat()

    async def _on_info(self, msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(self.beat()))

    # ------------------------------------------------------------------ requests

    async def _answer(self, msg: Msg, reply: nodes.NodeReply) -> None:
        with contextlib.suppress(Exception):  # the asker gave up: it times out on its side
            await msg.respond(msgspec.json.encode(reply))

    async def _on_check(self, msg: Msg) -> None:
        from actors.child.adapters import check_spawn_options

        try:
            req = _decode(msg.data, nodes.CheckRequest)
            await asyncio.to_thread(check_spawn_options, req.adapter, req.options, os.getcwd())
            reply = nodes.NodeReply()
        except ShepherdError as exc:
            reply = nodes.NodeReply(error=exc.info())
        await self._answer(msg, reply)

    async def _on_spawn(self, msg: Msg) -> None:
        try:
            req = _decode(msg.data, nodes.SpawnRequest)
            self._check_spawn(req)
            self._starting.add(req.agent_id)  # a repeated request meanwhile is refused
            try:
                bridge = await asyncio.to_thread(self._launch, req)
            finally:
                self._starting.discard(req.agent_id)
            self.bridges[req.agent_id] = bridge
            on_exit = clearing(
                _sandboxed(req), req.agent_id, bridge.child.pid, self._exit_callback(req)
            )
            self.reaper.watch(bridge.child.proc, on_exit, req.agent_id)
            reply = nodes.NodeReply(pid=bridge.child.pid, boot=self.boot, seq=self.seq)
            logger.info("node {}: started {} (pid {})", self.name, req.agent_id, bridge.child.pid)
        except ShepherdError as exc:
            reply = nodes.NodeReply(error=exc.info())
        except OSError as exc:  # the working directory is gone, no process could be made
            reply = nodes.NodeReply(error=InvalidArgument(f"cannot start the agent: {exc}").info())
        await self._answer(msg, reply)

    def _check_spawn(self, req: nodes.SpawnRequest) -> None:
        if self._closing:
            raise SessionUnavailable(f"node {self.name} is stopping")
        if not is_id_of(req.session_id, IdKind.SESSION) or not is_id_of(req.agent_id, IdKind.AGENT):
            raise InvalidArgument("a spawn names a session id and an agent id")
        env = req.env
        if env.get("SHEPHERD_SESSION_ID") != req.session_id:
            raise InvalidArgument("the environment is for another session")
        if env.get("SHEPHERD_AGENT_ID") != req.agent_id:
            raise InvalidArgument("the environment is for another agent")
        if req.agent_id in self.bridges or req.agent_id in self._starting:
            raise InvalidArgument(f"agent {req.agent_id} already runs on node {self.name}")
        if len(self.bridges) + len(self._starting) >= nodes.MAX_NODE_AGENTS:
            raise LimitExceeded(
                f"node {self.name} already runs its limit of {nodes.MAX_NODE_AGENTS} agents"
            )

    def _launch(self, req: nodes.SpawnRequest) -> _Bridge:
        session_dir = self.root / req.session_id
        agent_dir = session_dir / "agents" / req.agent_id
        for made in (session_dir, agent_dir.parent, agent_dir):  # each private, not only the last
            made.mkdir(mode=0o700, exist_ok=True)
            os.chmod(made, 0o700)
        passed = {
            k: v
            for k, v in req.env.items()
            if (k in ENV_VARS or k in _PASSED) and k not in _NODE_SET
        }
        env = {
            **os.environ,
            **passed,
            ENV_SESSION: str(session_dir),
            ENV_PARENT_PID: str(os.getpid()),
            "SHEPHERD_RECONNECT_S": "0",  # a dead node is a lost node: nothing comes back
        }
        env.pop("SHEPHERD_SESSION_HINT", None)
        env.pop(ENV_NATS_CREDS, None)
        if req.nats_creds is not None:  # the child's own user, readable only by this user
            creds = agent_dir / "nats.creds"
            creds.unlink(missing_ok=True)  # a bridge of it before had another
            write_private(creds, req.nats_creds)
            env[ENV_NATS_CREDS] = str(creds)
        for variable in ENV_NATS_TLS:
            env.pop(variable, None)
        env.update(tls_environ(self._tls))
        log_path = agent_dir / "output.log"
        proc = start_bridge(self._python, req.cwd or os.getcwd(), env, log_path)
        return _Bridge(req.session_id, ChildProcess(proc, self._clock, self._grace_s), log_path)

    def _exit_callback(self, req: nodes.SpawnRequest) -> Any:
        loop = self._thread.loop

        def exited(code: int) -> None:  # on the reaper's thread
            if not loop.is_closed():
                asyncio.run_coroutine_threadsafe(self._report_exit(req.agent_id, code), loop)

        return exited

    async def _report_exit(self, agent_id: str, code: int) -> None:
        bridge = self.bridges.get(agent_id)
        if bridge is None:
            return
        try:
            tail = tuple(read_tail(bridge.log_path, nodes.EXIT_LOG_LINES))
        except OSError:
            tail = ()
        report = nodes.ExitReport(
            session_id=bridge.session_id,
            agent_id=agent_id,
            node=self.name,
            code=code,
            log_tail=tail,
        )
        subject = nodes.exit_subject(bridge.session_id, self.name)
        with contextlib.suppress(Exception):  # lost: the next beats say the agent is gone
            await self._nc.publish(subject, msgspec.json.encode(report))
        del self.bridges[agent_id]  # only now: a beat never leaves it out before its report
        logger.info("node {}: {} exited with {}", self.name, agent_id, code)

    async def _on_stop(self, msg: Msg) -> None:
        try:
            req = _decode(msg.data, nodes.StopRequest)
            bridge = self.bridges.get(req.agent_id)
            if bridge is None or bridge.session_id != req.session_id:
                raise InvalidHandle(f"agent {req.agent_id[:80]} does not run on node {self.name}")
            (bridge.child.stop if req.how == "stop" else bridge.child.kill)()
            reply = nodes.NodeReply(pid=bridge.child.pid, boot=self.boot, seq=self.seq)
        except ShepherdError as exc:
            reply = nodes.NodeReply(error=exc.info())
        await self._answer(msg, reply)

    # ------------------------------------------------------------------ life

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def close(self) -> None:
        """Stop every bridge (as a close does), report their exits, then disconnect."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(Exception):
            self._thread.run(self._stop_all(), self._timeout)
        self.reaper.wait_all_exited(self._grace_s * 2 + 5)
        with contextlib.suppress(Exception):  # the last exit reports go out first
            self._thread.run(self._reported(), self._timeout)
            self._thread.run(self._nc.flush(), self._timeout)
        with contextlib.suppress(Exception):
            self._thread.run(self._nc.close(), self._timeout)
        self._thread.stop()
        self.reaper.close()
        self._clock.close()
        if self._dir_lock is not None:
            self._dir_lock.release()
        self._done.set()

    async def _reported(self) -> None:
        """Until every exit the reaper saw was reported (they are queued on this loop)."""
        for _ in range(100):
            if not self.bridges:
                return
            await asyncio.sleep(0.01)

    async def _stop_all(self) -> None:
        for bridge in list(self.bridges.values()):
            bridge.child.terminate()


def _decode(data: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(data, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise InvalidArgument(f"a malformed {kind.__name__}: {exc}") from None


def _sandboxed(req: nodes.SpawnRequest) -> bool:
    """Does the agent run in a sandbox (its options, as the parent's launcher wrote them)?"""
    try:
        options = msgspec.json.decode(req.env.get(ENV_AGENT_OPTIONS, "{}"))
    except msgspec.DecodeError:
        return False
    return isinstance(options, dict) and bool(options.get("sandbox"))
