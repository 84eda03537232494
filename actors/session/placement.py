"""The parent's side of agents placed on other hosts: a launcher that starts an agent on a
``shepherd node`` (``spawn --node HOST``) behind the same ``launch(spec, on_exit)`` seam as the
local one, and everything else where the local one does it (what the node says, and where:
:mod:`protocol.wire.nodes`; the node: :mod:`actors.nodes.node`).

Rules:
- What a node is told is what the local launcher gives its own bridge (the same environment,
  the same working directory); the node makes the child's private files on its host.
- A spawn is placed before it is accepted (:meth:`NodeLauncher.place`, run by the session's
  edge): ``any`` becomes the least-loaded live node (its last beat's agents, with the agents
  this parent placed there since); a node that is not live is ``invalid_handle`` naming it;
  the node runs the adapter's checks on its host (a path that exists only there is fine). So a
  spawn that cannot run is refused, never accepted and then failed.
- ``on_exit`` is called exactly once per placed agent: from the node's exit report (its status,
  and its log's end for ``read``); from a beat that no longer lists it (the node restarted, or
  the report was lost: its status unknown, -1); or when its node is *lost*, silent past the
  session's ``node_lost_s``: status -1 and a reason naming the node (the handle's
  ``exit_reason``, which the agent's actor gives the session before anything else).
- A parent cut off from the servers hears no node: that silence is not counted (it starts
  again when the parent is back).
- An agent the parent counts as gone that a node still lists (a node that was only cut off
  for a while) is killed there: nobody would read what it does.
- A node speaks only for itself: a beat or an exit report is believed only from the subject
  of the node it names, an ``info`` answer only in the name of the node asked. With
  ``--nats-auth`` each agent placed on a node gets its own NATS user, minted here and sent in
  the spawn request to that node only (:mod:`actors.transports.nats.permissions`).
- The node's answers are awaited with a bound (:data:`~actors.transports.wire.NATS_TIMEOUT_S`);
  a stop or kill is sent without waiting: if the node never acts on it, its beats or its
  silence end the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from actors.child.env import ENV_NATS_CREDS, ENV_PARENT_PID, ENV_SESSION
from actors.runtime.log import logger
from actors.runtime.transport import PARENT_INBOX
from actors.session.agent import AgentHandle, AgentSpec
from actors.session.launcher import ProcessLauncher
from actors.session.remote_agent import RemoteAgent
from actors.transports.nats import setup
from actors.transports.nats.loop import LoopThread
from actors.transports.wire import NATS_TIMEOUT_S
from protocol.calls import api
from protocol.core.errors import (
    InvalidArgument,
    InvalidHandle,
    SessionUnavailable,
    ShepherdError,
    error_from_info,
)
from protocol.core.transport_url import parse_transport
from protocol.session.agents import options_of
from protocol.wire import nodes

if TYPE_CHECKING:
    from nats.aio.msg import Msg

__all__ = ["NodeLauncher", "RemoteAgent"]  # RemoteAgent: actors.session.remote_agent

#: a placement not launched within this long (its spawn was refused after it was placed) no
#: longer counts toward its node's load
_RESERVED_S = 30.0
#: a node that has just started may not be heard yet through this parent's server (a cluster
#: tells its servers who listens where within moments): nothing answering is asked again this long
_NEW_NODE_S = 3.0
_ASK_AGAIN_S = 0.1


class _NobodyAnswers(InvalidHandle):
    """Nothing listens to a node's name, as far as this parent's server knows yet."""


class _Heard(msgspec.Struct, kw_only=True):
    beat: nodes.Beat
    at: float
    lost: bool = False


class NodeLauncher(ProcessLauncher):
    """A :class:`ProcessLauncher` that also places agents on nodes (module rules)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._servers = parse_transport(str(self._mailbox_root)).server_urls
        self._lost_after = self._settings.node_lost_s
        self._nodes: dict[str, _Heard] = {}
        self._remote: dict[str, RemoteAgent] = {}
        self._reserved: dict[str, tuple[str, float]] = {}  # agent name -> (node, when)
        self._heard = threading.Condition()
        self._deaf = False  # cut off from the servers (since the last check)
        self._told_cap: Callable[[str, int | None], None] | None = None
        self._loop = LoopThread("shepherd-nodes")
        try:
            self._loop.run(self._connect(), NATS_TIMEOUT_S * 3)
        except TimeoutError:
            self._loop.stop()
            super().close()
            raise SessionUnavailable(
                f"no NATS server answered within {NATS_TIMEOUT_S * 3:g} s at "
                f"{', '.join(self._servers)}"
            ) from None
        except BaseException:
            self._loop.stop()
            super().close()
            raise

    async def _connect(self) -> None:
        try:
            login = self._authority.parent_login() if self._authority is not None else None
            self._nc, _ = await setup.connect(
                self._servers,
                None,
                None,
                f"{self._session_id} nodes",
                NATS_TIMEOUT_S,
                login,
                self._nats_tls,
            )
        except SessionUnavailable:  # refused for TLS: the cause is named already
            raise
        except Exception as exc:
            raise SessionUnavailable(f"no NATS server answered: {exc!r}") from exc
        await self._nc.subscribe(nodes.beats_subject(), cb=self._on_beat)
        await self._nc.subscribe(nodes.exits_subject(self._session_id), cb=self._on_exit_report)
        await self._nc.publish(nodes.NODE_PING, b"")  # the live nodes beat at once
        self._watch = asyncio.get_running_loop().create_task(self._watch_loop())

    # ------------------------------------------------------------------ what nodes say

    async def _on_beat(self, msg: Msg) -> None:
        try:
            beat = msgspec.json.decode(msg.data, type=nodes.Beat)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if nodes.sent_by(msg.subject, beat.name):  # a node speaks only for itself
            self._heard_from(beat)

    def watch_caps(self, told: Callable[[str, int | None], None]) -> None:
        """``told(node, cap)`` with each node's ``--max-running`` as heard, and at each change
        (the session's admission counts it)."""
        with self._heard:  # told under the lock: in the order heard
            self._told_cap = told
            for name, heard in self._nodes.items():
                told(name, heard.beat.max_running)

    def _heard_from(self, beat: nodes.Beat) -> None:
        with self._heard:
            last = self._nodes.get(beat.name)
            self._nodes[beat.name] = _Heard(beat=beat, at=time.monotonic())
            self._heard.notify_all()
            told = self._told_cap
            if told is not None and (last is None or last.beat.max_running != beat.max_running):
                told(beat.name, beat.max_running)
        listed = set(beat.agents)
        for handle in list(self._remote.values()):
            if handle.node != beat.name or handle.boot is None:
                continue
            if handle.done:
                if handle.agent_id in listed:  # counted as gone, still running there
                    handle.kill_once()
                continue
            if nodes.gone_from(beat, handle.agent_id, handle.boot, handle.seq):
                why = "restarted" if beat.boot != handle.boot else "no longer runs it"
                handle.exited(-1, reason=f"node {beat.name} {why}")

    async def _on_exit_report(self, msg: Msg) -> None:
        try:
            report = msgspec.json.decode(msg.data, type=nodes.ExitReport)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        handle = self._remote.get(report.agent_id)
        if (
            handle is not None
            and handle.node == report.node
            and nodes.sent_by(msg.subject, report.node)
        ):
            handle.exited(report.code, report.log_tail[-nodes.EXIT_LOG_LINES :])
            with self._heard:  # a shutdown waits for these
                self._heard.notify_all()

    async def _watch_loop(self) -> None:
        """Each node silent past the bound is lost, with every agent it ran for us."""
        while True:
            await asyncio.sleep(nodes.HEARTBEAT_S / 2)  # the check's pace, not a wait
            self.check_lost(time.monotonic(), self._nc.is_connected)

    def check_lost(self, now: float, connected: bool = True) -> None:
        """Lose each node silent past the bound. While this parent is cut off from the
        servers it hears nobody, which says nothing of the nodes: their silence is counted
        again from when it is back."""
        lost: list[tuple[str, float]] = []
        with self._heard:
            if not connected:
                self._deaf = True
                return
            if self._deaf:
                self._deaf = False
                for heard in self._nodes.values():
                    heard.at = max(heard.at, now)
            for name, heard in self._nodes.items():
                if not heard.lost and now - heard.at > self._lost_after:
                    heard.lost = True
                    lost.append((name, now - heard.at))
        for name, silent in lost:
            logger.warning("node {} lost: not heard from for {:.0f} s", name, silent)
            reason = nodes.lost_reason(name, silent)
            for handle in list(self._remote.values()):
                if handle.node == name:
                    handle.exited(-1, reason=reason)

    # ------------------------------------------------------------------ placing

    def _live(self) -> dict[str, nodes.Beat]:
        now = time.monotonic()
        with self._heard:
            return {
                n: h.beat
                for n, h in self._nodes.items()
                if not h.lost and now - h.at <= self._lost_after
            }

    def _loads(self) -> dict[str, int]:
        now = time.monotonic()
        live = self._live()
        loads: dict[str, set[str]] = {name: set(beat.agents) for name, beat in live.items()}
        launched = set()  # a placement launched meanwhile is counted once, not reserved too
        for handle in list(self._remote.values()):
            if not handle.done and handle.node in loads:
                loads[handle.node].add(handle.agent_id)
                launched.add(handle.name)
        counts = {name: len(agents) for name, agents in loads.items()}
        with self._heard:
            for agent, (node, at) in list(self._reserved.items()):
                if now - at > _RESERVED_S:
                    del self._reserved[agent]
                elif node in counts and agent not in launched:
                    counts[node] += 1
        return counts

    def place(self, args: api.SpawnArgs) -> api.SpawnArgs:
        """``args`` with its node resolved, live and able to run it (module rules)."""
        if args.node is None:
            return args
        if args.worktree:  # it would be made here, on the parent's host
            raise InvalidArgument("spawn: worktree: an agent on a node cannot have one yet")
        if args.node == nodes.ANY_NODE:
            name = nodes.least_loaded(self._loads())
            if name is None:
                name = nodes.least_loaded(self._loads_after_ping())
            if name is None:
                raise InvalidHandle(
                    "spawn: node: no node is live (start one on a host: shepherd node "
                    "--transport nats://... --name HOST)"
                )
        else:
            name = args.node
            if name not in self._live():
                self._ask_info(name)
        check = nodes.CheckRequest(adapter=args.adapter, options=options_of(args))
        self._request(name, "check", check)
        with self._heard:
            self._reserved[args.name] = (name, time.monotonic())
        return msgspec.structs.replace(args, node=name)

    def _loads_after_ping(self) -> dict[str, int]:
        """No node heard yet (this parent just started): ask, and wait for the first beat."""
        self._loop.submit(self._nc.publish(nodes.NODE_PING, b""))
        with self._heard:
            self._heard.wait_for(lambda: bool(self._nodes), timeout=nodes.HEARTBEAT_S * 2)
        return self._loads()

    def _ask_info(self, name: str) -> None:
        """A node not heard yet, asked (:meth:`_info_of_new`); whatever goes wrong is "no live
        node" naming why."""
        try:
            beat = self._info_of_new(name)
        except ShepherdError as exc:
            live = ", ".join(sorted(self._live())) or "none"
            raise InvalidHandle(
                f"spawn: node: no live node named {name!r} (live nodes: {live}; {exc})"
            ) from None
        self._heard_from(beat)

    def _info_of_new(self, name: str) -> nodes.Beat:
        """:meth:`_info`, asked again while nothing answers to the name, up to
        :data:`_NEW_NODE_S` (a node just started may not be heard of by every server yet)."""
        deadline = time.monotonic() + _NEW_NODE_S
        while True:
            try:
                return self._info(name, min(NATS_TIMEOUT_S, 2.0))
            except _NobodyAnswers:
                if time.monotonic() + _ASK_AGAIN_S >= deadline:
                    raise
                time.sleep(_ASK_AGAIN_S)  # a retry's pace, not a wait for an event

    def _info(self, name: str, timeout: float) -> nodes.Beat:
        """Node ``name``'s beat, asked; an answer in another node's name is not believed (with
        credentials only that node may answer, but it may not speak for another)."""
        try:
            beat = msgspec.json.decode(self._call(name, "info", b"", timeout), type=nodes.Beat)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise SessionUnavailable(f"node {name} answered with a malformed beat") from None
        if beat.name != name:
            raise InvalidHandle(f"node {name} answered in another node's name")
        return beat

    def _call(self, node: str, verb: nodes.Verb, data: bytes, timeout: float) -> bytes:
        from nats.errors import NoRespondersError

        subject = nodes.node_subject(node, verb)
        try:
            msg = self._loop.run(self._nc.request(subject, data, timeout=timeout), timeout + 1)
        except NoRespondersError:
            raise _NobodyAnswers(f"node {node} is not live (nothing answers to its name)") from None
        except Exception as exc:
            raise SessionUnavailable(
                f"node {node} did not answer within {timeout:g} s ({type(exc).__name__})"
            ) from None
        return bytes(msg.data)

    def _request(self, node: str, verb: nodes.Verb, payload: msgspec.Struct) -> nodes.NodeReply:
        data = self._call(node, verb, msgspec.json.encode(payload), NATS_TIMEOUT_S)
        reply = msgspec.json.decode(data, type=nodes.NodeReply)
        if reply.error is not None:
            raise error_from_info(reply.error)
        return reply

    # ------------------------------------------------------------------ the seam

    def launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        node = spec.options.get("node")
        if not node:
            return super().launch(spec, on_exit)
        with self._lock:
            if self._closed:
                raise SessionUnavailable("the session is shutting down; no agent is started")
        self._register(spec)
        self._ensure_inbox(spec.agent_id)
        env = self.environment(spec)
        for key in (ENV_SESSION, ENV_PARENT_PID):  # the node's to set: they name its host
            env.pop(key, None)
        handle = RemoteAgent(self, spec, str(node), on_exit)
        self._remote[spec.agent_id] = handle  # before asking: its exit may come first
        with self._heard:
            self._reserved.pop(spec.name, None)
        env.pop(ENV_NATS_CREDS, None)  # a path on this host: the node writes its own
        creds = None
        if self._authority is not None:  # the child's own user, for that node only
            creds = self._authority.child_credentials(spec.session_id, spec.agent_id, PARENT_INBOX)
        request = nodes.SpawnRequest(
            session_id=spec.session_id,
            agent_id=spec.agent_id,
            env=env,
            cwd=spec.options.get("cwd"),
            nats_creds=creds,
        )
        try:
            handle.started(self._request(handle.node, "spawn", request))
        except SessionUnavailable:
            handle.done = True  # launch failed: no exit to report
            handle.kill_once()  # it may have started all the same
            raise
        except ShepherdError:
            del self._remote[spec.agent_id]
            raise
        logger.bind(agent=spec.name).info("started on node {} (pid {})", node, handle.pid)
        return handle

    def adopt(
        self, spec: AgentSpec, pid: int | None, on_exit: Callable[[int], None]
    ) -> AgentHandle:
        """After a parent restart: an agent on a node is adopted if that node still runs it."""
        node = spec.options.get("node")
        if not node:
            return super().adopt(spec, pid, on_exit)
        beat = self._info(str(node), NATS_TIMEOUT_S)
        if spec.agent_id not in beat.agents:
            raise InvalidHandle(f"node {node} no longer runs {spec.name}")
        self._register(spec)
        self._ensure_inbox(spec.agent_id)
        handle = RemoteAgent(self, spec, str(node), on_exit)
        handle.started(nodes.NodeReply(pid=pid, boot=beat.boot, seq=beat.seq))
        self._remote[spec.agent_id] = handle
        self._heard_from(beat)
        return handle

    def send_stop(self, handle: RemoteAgent, how: str) -> None:
        request = nodes.StopRequest(
            session_id=handle.session_id,
            agent_id=handle.agent_id,
            how="kill" if how == "kill" else "stop",
        )
        subject = nodes.node_subject(handle.node, "stop")

        async def send() -> None:
            try:
                await self._nc.request(subject, msgspec.json.encode(request), NATS_TIMEOUT_S)
            except Exception as exc:  # its beats or its silence will end it
                logger.info("node {}: {} unanswered: {!r}", handle.node, how, exc)

        if self._loop.loop.is_running():
            self._loop.submit(send())

    def wait_all_exited(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        local = self.reaper.wait_all_exited(timeout)
        while any(not h.done for h in list(self._remote.values())):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._heard:  # woken by every beat; exits come with reports or beats
                self._heard.wait(min(left, nodes.HEARTBEAT_S))
        return local

    def kill_all(self) -> None:
        super().kill_all()
        for handle in list(self._remote.values()):
            if not handle.done:
                handle.kill()

    def close(self, *, kill: bool = True) -> None:
        already = self._closed
        super().close(kill=kill)  # the local bridges, and remote kills (kill_all)
        if already:
            return
        if kill:
            self.wait_all_exited(NATS_TIMEOUT_S)
            for handle in list(self._remote.values()):  # never reported: the session is ending
                handle.exited(-1, reason=f"node {handle.node} did not report its exit")
        with contextlib.suppress(Exception):
            self._loop.run(self._nc.close(), NATS_TIMEOUT_S)
        self._loop.stop()
