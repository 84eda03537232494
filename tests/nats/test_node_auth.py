"""Nodes with NATS credentials (actors/transports/nats/node_login.py,
actors/transports/nats/permissions.py): a session with an authority places agents on a `shepherd
node --nats-creds`; the node's user may only serve its own requests, and the SERVER refuses the
rest, the victim undisturbed. Real `nats-server` processes started with the authority's block, real
`serve` and `node` processes; nothing sleeps (refusals are awaited as the server's
permissions-violation errors)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from actors.nodes.node import NodeServer
from actors.runtime.transport import PARENT_INBOX
from actors.transports.nats.auth import Authority, make_authority, write_private
from actors.transports.nats.node_login import load_node_login
from actors.transports.nats.permissions import child_permissions
from actors.transports.nats.server import NatsServer
from actors.transports.nats.transport import NatsTransport, inbox_subject
from protocol.core.errors import InvalidArgument
from protocol.core.ids import PARENT_ID
from protocol.wire import nodes
from tests.nats.nodes import Node, spawn_command
from tests.nats.test_auth import (
    ALPHA,
    BETA,
    CEILING_S,
    Conn,
    _as_parent,
    auth_server,
    authority_dir,
    parent,
)
from tests.nats.test_serve import _read_until, _spawn
from tests.nats.test_transport import message
from tests.processes.conftest import Serve, cli
from tests.reliability.live import session_pids, wait_gone

pytestmark = pytest.mark.processes

__all__ = ["auth_server", "authority_dir", "parent"]  # fixtures used here


def mint_node(authority: Path, name: str) -> Path:
    """The README's command: ``python -m actors.transports.nats.auth DIR --node NAME``."""
    done = subprocess.run(
        [sys.executable, "-m", "actors.transports.nats.auth", str(authority), "--node", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    path = Path(done.stdout.strip())
    assert path == authority / "nodes" / f"{name}.creds"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path


def _claims(creds: str) -> dict[str, Any]:
    jwt = creds.split("-----BEGIN NATS USER JWT-----\n")[1].split("\n", maxsplit=1)[0]
    payload = jwt.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


def _seed(creds: str) -> str:
    return creds.split("-----BEGIN USER NKEY SEED-----\n")[1].split("\n", maxsplit=1)[0]


@pytest.mark.timeout(240)
def test_a_node_with_its_own_user_runs_the_canonical_flow_of_a_session_with_an_authority(
    isolated_state: Path,
    auth_server: NatsServer,
    authority_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHEPHERD_LOG_LEVEL", "DEBUG")  # every log line is searched for secrets
    session, url, auth = tmp_path / "session", auth_server.url, str(authority_dir)
    serve = Serve(session, dict(os.environ), "--transport", url, "--nats-auth", auth)
    creds_arg = ("--nats-creds", str(mint_node(authority_dir, "n1")))
    node = Node(url, "n1", tmp_path / "host-n1", *creds_arg)
    try:
        assert node.ready is not None, node.first
        assert serve.wait_for(lambda lines: any("session" in x for x in lines))
        sid = json.loads((session / "session.json").read_text())["session_id"]
        alpha = spawn_command(tmp_path, "alpha", "n1")  # on the node, as its own user
        beta = _spawn(tmp_path, session, "beta")  # on the parent's host
        _, t_alpha = cli("delegate", "alpha", "TELL-BETA MARK-DONE", session=session)
        _, t_beta = cli("delegate", "beta", "MARK-DONE", session=session)
        ids = [t_alpha["task_id"], t_beta["task_id"]]
        _, waited = cli("wait", *ids, "--timeout", "90", session=session)
        assert waited["pending"] == [] and not waited["timed_out"], waited
        results = {r["agent_name"]: r["text"] for r in waited["completed"]}
        assert results == {"alpha": "done by alpha", "beta": "done by beta"}
        # alpha's `shepherd-child message` (from the node) reached beta, and the parent
        _read_until(session, "beta", "hello beta from alpha")
        assert serve.wait_for(
            lambda lines: any(x.get("content") == "progress from alpha" for x in lines)
        )
        _, status = cli("status", session=session)
        assert {a["name"]: a["node"] for a in status["agents"]}["alpha"] == "n1"

        # the node's agent has a child's user, written 0600 on the node's host, not the parent's
        creds_path = node.root / sid / "agents" / alpha["agent_id"] / "nats.creds"
        assert stat.S_IMODE(creds_path.stat().st_mode) == 0o600
        creds = creds_path.read_text()
        claims = _claims(creds)
        assert claims["name"] == f"shepherd-child {alpha['agent_id']}"
        wanted = child_permissions(sid, alpha["agent_id"], PARENT_INBOX)
        assert (claims["nats"]["pub"], claims["nats"]["sub"]) == (wanted["pub"], wanted["sub"])
        assert not (session / "agents" / alpha["agent_id"]).exists()
        seed = _seed(creds)
        assert seed not in json.dumps(status)
        for agent in (alpha, beta):
            cli("close", agent["agent_id"], session=session)
        assert wait_gone(lambda: session_pids(sid), timeout=60)
        rc, _ = cli("shutdown", session=session)
        assert rc == 0 and serve.proc.wait(timeout=60) == 0
        assert serve.proc.stderr is not None
        serve_err = serve.proc.stderr.read().decode(errors="replace")
    finally:
        serve.stop()
        node_err = node.stop()
    # its secret is in no answer, no output and no file but its own
    assert "node n1: started" in node_err and "session at" in serve_err  # the logs are searched
    assert seed not in json.dumps(serve.lines) + serve_err + node_err
    for where in (session, node.root):
        for path in where.rglob("*"):
            if path.is_file() and path != creds_path:
                assert seed not in path.read_text(errors="replace"), path


def test_a_node_user_is_refused_by_the_server_everything_but_its_own_requests(
    parent: NatsTransport,
    auth_server: NatsServer,
    authority_dir: Path,
    session_id: str,
    tmp_path: Path,
) -> None:
    """Node n1's user: into the parent's or a child's inbox, a consumer's pull, another node's
    requests or subjects, the stream's deletion - each a permissions violation; what it is for
    (its own requests, its beats, its exit reports) goes through."""
    parent.publish(BETA, message(session_id, "for beta only", sender_id=PARENT_ID, target_id=BETA))
    creds = tmp_path / "n1.creds"
    write_private(creds, Authority.load(str(authority_dir)).node_credentials("n1"))
    login = load_node_login(str(creds), "n1")
    stream = session_id

    async def attack() -> None:
        from nats.errors import TimeoutError as NatsTimeout

        n1 = await Conn().open(auth_server.url, **login.connect_options())
        nc = n1.nc
        try:
            # its own: requests to it, its beat, its exit reports; no violation comes back
            for verb in ("info", "check", "spawn", "stop"):
                await nc.subscribe(nodes.node_subject("n1", verb))
            await nc.subscribe(nodes.NODE_PING)
            await nc.publish(nodes.node_subject("n1", "beat"), b"{}")
            await nc.publish(nodes.exit_subject(session_id, "n1"), b"{}")
            await nc.flush(CEILING_S)
            assert n1.errors == []
            # anyone's inbox: the parent's, a child's
            for subject in (
                inbox_subject(session_id, PARENT_INBOX),
                inbox_subject(session_id, BETA),
            ):
                await nc.publish(subject, b"forged")
                await n1.violation(subject)
            # a consumer, the stream, the JetStream API at all
            for subject in (
                f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{BETA}",
                f"$JS.API.CONSUMER.INFO.{stream}.{BETA}",
                f"$JS.ACK.{stream}.{BETA}.1.1.1.1.0",
                f"$JS.API.STREAM.DELETE.{stream}",
                f"$JS.API.STREAM.PURGE.{stream}",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.thief",
            ):
                with pytest.raises(NatsTimeout):  # refused: no answer ever comes
                    await nc.request(subject, b"{}", timeout=0.5)
                await n1.violation(subject)
            # another node's requests (a spawn carries a child's credentials), everyone's replies
            for subject in (
                nodes.node_subject("n2", "spawn"),
                "shepherd.nodes.*.spawn",
                "shepherd.nodes.>",
                "_INBOX.>",
                ">",
            ):
                await nc.subscribe(subject)
                await n1.violation(subject)
            # speak for another node: its beat, its exit report, a request to it
            for subject in (
                nodes.node_subject("n2", "beat"),
                nodes.exit_subject(session_id, "n2"),
                nodes.node_subject("n2", "spawn"),
            ):
                await nc.publish(subject, b"{}")
                await n1.violation(subject)
        finally:
            await nc.close()

    asyncio.run(attack())

    async def victim(js: Any) -> tuple[Any, Any]:
        return await js.consumer_info(stream, BETA), await js.stream_info(stream)

    consumer, info = _as_parent(auth_server.url, authority_dir, victim)
    assert consumer.num_pending == 1 and consumer.num_ack_pending == 0
    assert consumer.delivered.stream_seq == 0  # nobody pulled beta's envelope
    assert info.state.messages == 1  # nothing forged was stored, nothing deleted


def test_a_second_nodes_user_never_sees_the_requests_to_the_first(
    auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    """A spawn request to n1 (with a child's credentials in it), sent by the parent user, is
    delivered to n1 and to nothing n2's user holds."""
    authority = Authority.load(str(authority_dir))
    logins = {}
    for name in ("n1", "n2"):
        path = tmp_path / f"{name}.creds"
        write_private(path, authority.node_credentials(name))
        logins[name] = load_node_login(str(path), name)

    async def run() -> tuple[list[bytes], list[bytes], list[str]]:
        n1 = await Conn().open(auth_server.url, **logins["n1"].connect_options())
        n2 = await Conn().open(auth_server.url, **logins["n2"].connect_options())
        boss = await Conn().open(auth_server.url, **authority.parent_login().connect_options())
        got1: list[bytes] = []
        got2: list[bytes] = []

        async def answer(msg: Any) -> None:
            got1.append(msg.data)
            await msg.respond(b"ok")  # its response permission: the reply to what it got

        async def overheard(msg: Any) -> None:
            got2.append(msg.data)

        try:
            await n1.nc.subscribe(nodes.node_subject("n1", "spawn"), cb=answer)
            for subject in (nodes.node_subject("n1", "spawn"), "shepherd.nodes.n1.*"):
                await n2.nc.subscribe(subject, cb=overheard)
                await n2.violation(subject)
            await n1.nc.flush(CEILING_S)
            reply = await boss.nc.request(nodes.node_subject("n1", "spawn"), b"SECRET", CEILING_S)
            assert reply.data == b"ok"
            await n2.nc.flush(CEILING_S)
            return got1, got2, n1.errors
        finally:
            for conn in (n1, n2, boss):
                await conn.nc.close()

    got1, got2, errors = asyncio.run(run())
    assert (got1, got2, errors) == ([b"SECRET"], [], [])


def _no_node_thread() -> bool:
    return not any(t.name == "shepherd-node" for t in threading.enumerate())


@pytest.mark.parametrize("creds", ["none", "other-authority"])
def test_a_node_refused_by_the_servers_is_a_typed_error_naming_the_option(
    auth_server: NatsServer, tmp_path: Path, creds: str
) -> None:
    """Without credentials, or with a node user another authority signed: refused at connect,
    at once (the client would retry forever), ``invalid_argument`` naming ``--nats-creds``,
    no thread left behind; the command prints the same error and exits 2."""
    extra: tuple[str, ...] = ()
    login = None
    if creds == "other-authority":
        make_authority(tmp_path / "other")
        path = mint_node(tmp_path / "other", "n1")
        login = load_node_login(str(path), "n1")
        extra = ("--nats-creds", str(path))
    with pytest.raises(InvalidArgument, match="--nats-creds: the NATS servers refused") as caught:
        NodeServer([auth_server.url], "n1", tmp_path / "host", timeout_s=CEILING_S, login=login)
    assert "thorization" in caught.value.message
    assert _no_node_thread()

    node = Node(auth_server.url, "n1", tmp_path / "host-cli", *extra)
    try:
        assert node.ready is None
        assert node.first["error"]["code"] == "invalid_argument", node.first
        assert "--nats-creds" in node.first["error"]["message"]
        assert node.proc.wait(timeout=60) == 2
    finally:
        node.stop()


@pytest.mark.timeout(240)
def test_a_node_cannot_speak_for_another_on_its_own_subjects(
    isolated_state: Path, auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    """Node n2's user may publish beats and exit reports, but only on subjects naming n2: a
    beat there naming n1 (restarted, running nothing) and an exit report naming n1 for n1's
    agent are ignored by the parent; the agent on n1 runs on and finishes its task."""
    session, url, auth = tmp_path / "session", auth_server.url, str(authority_dir)
    serve = Serve(session, dict(os.environ), "--transport", url, "--nats-auth", auth)
    node = Node(
        url, "n1", tmp_path / "host-n1", "--nats-creds", str(mint_node(authority_dir, "n1"))
    )
    try:
        assert node.ready is not None, node.first
        assert serve.wait_for(lambda lines: any("session" in x for x in lines))
        sid = json.loads((session / "session.json").read_text())["session_id"]
        alpha = spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
        _read_until(session, "alpha", "BLOCKED")

        login = load_node_login(str(mint_node(authority_dir, "n2")), "n2")
        forged_beat = nodes.Beat(name="n1", boot="forged", seq=10**6, agents=())
        forged_exit = nodes.ExitReport(
            session_id=sid, agent_id=alpha["agent_id"], node="n1", code=3
        )

        async def forge() -> list[str]:
            import msgspec

            n2 = await Conn().open(url, **login.connect_options())
            try:
                await n2.nc.publish(
                    nodes.node_subject("n2", "beat"), msgspec.json.encode(forged_beat)
                )
                await n2.nc.publish(nodes.exit_subject(sid, "n2"), msgspec.json.encode(forged_exit))
                await n2.nc.flush(CEILING_S)
                return n2.errors
            finally:
                await n2.nc.close()

        assert asyncio.run(forge()) == []  # its own subjects: the server let them through
        with open(fifo, "w"):
            pass  # alpha's `done`, after the forgeries reached the parent
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        (result,) = waited["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha"), result
        _, status = cli("status", session=session)
        (row,) = status["agents"]
        assert row["node"] == "n1" and row["process_state"] != "exited", row  # alive
    finally:
        serve.stop()
        node.stop()


def test_a_child_user_can_neither_ask_a_node_nor_listen_to_one(
    auth_server: NatsServer, authority_dir: Path, session_id: str, tmp_path: Path
) -> None:
    """Only the account's parent users may ask a node to run something: a child's user is
    refused a spawn request to a node, reading one, and speaking as a node."""
    authority = Authority.load(str(authority_dir))
    creds = tmp_path / "alpha.creds"
    write_private(creds, authority.child_credentials(session_id, ALPHA, PARENT_INBOX))

    async def attack() -> None:
        alpha = await Conn().open(auth_server.url, user_credentials=str(creds))
        try:
            for subject in (
                nodes.node_subject("n1", "spawn"),
                nodes.node_subject("n1", "beat"),
                nodes.exit_subject(session_id, "n1"),
                nodes.NODE_PING,
            ):
                await alpha.nc.publish(subject, b"{}")
                await alpha.violation(subject)
            for subject in (nodes.node_subject("n1", "spawn"), nodes.beats_subject()):
                await alpha.nc.subscribe(subject)
                await alpha.violation(subject)
        finally:
            await alpha.nc.close()

    asyncio.run(attack())


def test_a_second_node_with_the_same_user_finds_the_first_live_and_does_not_start(
    auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    """The node's one request (is a node of its name live?) needs its own reply prefix and the
    first node's response permission: both work, so the second is refused."""
    creds = str(mint_node(authority_dir, "n1"))
    first = Node(auth_server.url, "n1", tmp_path / "host-1", "--nats-creds", creds)
    try:
        assert first.ready is not None, first.first
        second = Node(auth_server.url, "n1", tmp_path / "host-2", "--nats-creds", creds)
        try:
            assert second.first["error"]["code"] == "invalid_argument", second.first
            assert "already live" in second.first["error"]["message"]
        finally:
            second.stop()
    finally:
        first.stop()
