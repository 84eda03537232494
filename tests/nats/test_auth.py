"""Identity on the wire (actors/transports/nats/auth.py): with a NATS authority, each child connects
as its own user and the SERVER refuses what its permissions do not name; the victim is undisturbed.
Real ``nats-server`` processes started with the authority's block; nothing sleeps: refusals are
awaited as the server's permissions-violation errors, with a generous ceiling."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.session.parent_transport import resumed_auth
from actors.transports.nats.auth import (
    ACCOUNT_SEED,
    Authority,
    NatsLogin,
    child_inbox_prefix,
    make_authority,
    reply_stream,
    write_private,
)
from actors.transports.nats.replies import NatsReplyInbox
from actors.transports.nats.server import NatsServer, start_cluster, start_server
from actors.transports.nats.transport import NatsTransport, inbox_subject
from protocol.core.errors import InvalidArgument
from protocol.core.ids import PARENT_ID, IdKind, make_id
from tests.nats.test_serve import _read_until, _spawn
from tests.nats.test_transport import CAPABILITY, Collector, message
from tests.processes.conftest import Serve, cli
from tests.reliability.live import session_pids, wait_gone

pytestmark = pytest.mark.processes

ALPHA = make_id(IdKind.AGENT, "a1a1a1a1a1a1a1a1")
BETA = make_id(IdKind.AGENT, "b2b2b2b2b2b2b2b2")
#: how long a refusal may take to come back from the server (an event, awaited up to this)
CEILING_S = 20.0


@pytest.fixture
def authority_dir(tmp_path: Path) -> Path:
    make_authority(tmp_path / "auth")
    return tmp_path / "auth"


@pytest.fixture
def auth_server(tmp_path: Path, authority_dir: Path) -> Iterator[NatsServer]:
    server = start_server(tmp_path / "nats", auth=authority_dir)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def parent(
    auth_server: NatsServer, authority_dir: Path, session_id: str
) -> Iterator[NatsTransport]:
    """The session's creator, as the account's parent user, with two agents' inboxes."""
    login = Authority.load(str(authority_dir)).parent_login()
    made = NatsTransport([auth_server.url], session_id, login=login)
    for inbox in (PARENT_INBOX, ALPHA, BETA):
        made.ensure_inbox(inbox)
    made.admit(ALPHA, session_id, CAPABILITY)
    try:
        yield made
    finally:
        made.close()


def child_creds(tmp_path: Path, authority_dir: Path, session_id: str, agent: str) -> Path:
    path = tmp_path / f"{agent}.creds"
    creds = Authority.load(str(authority_dir)).child_credentials(session_id, agent, PARENT_INBOX)
    write_private(path, creds)
    return path


class Conn:
    """A raw nats-py connection that records the server's asynchronous errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.changed = asyncio.Event()
        self.nc: Any = None

    async def open(self, url: str, **options: Any) -> Conn:
        from nats.aio.client import Client

        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc).lower())
            self.changed.set()

        self.nc = Client()
        try:
            await self.nc.connect(
                url, error_cb=on_error, allow_reconnect=False, connect_timeout=CEILING_S, **options
            )
        except BaseException:
            await self.nc.close()  # a refused connection leaves its socket otherwise
            raise
        return self

    async def violation(self, subject: str) -> str:
        """Wait for the server's permissions violation naming ``subject``."""

        def found() -> str | None:
            wanted = f'"{subject.lower()}"'
            return next(
                (e for e in self.errors if "permissions violation" in e and wanted in e), None
            )

        async def wait() -> str:
            while (hit := found()) is None:
                self.changed.clear()
                await self.changed.wait()
            return hit

        return await asyncio.wait_for(wait(), CEILING_S)


def test_a_child_is_refused_by_the_server_everything_but_its_own_and_the_victim_is_undisturbed(
    parent: NatsTransport,
    auth_server: NatsServer,
    authority_dir: Path,
    session_id: str,
    tmp_path: Path,
) -> None:
    parent.publish(BETA, message(session_id, "for beta only", sender_id=PARENT_ID, target_id=BETA))
    creds = child_creds(tmp_path, authority_dir, session_id, ALPHA)
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    stream = session_id

    async def attack() -> None:
        from nats.errors import TimeoutError as NatsTimeout

        alpha = await Conn().open(
            auth_server.url,
            user_credentials=str(creds),
            inbox_prefix=child_inbox_prefix(ALPHA),
        )
        nc = alpha.nc
        try:
            # publish into another child's inbox
            await nc.publish(inbox_subject(session_id, BETA), b"forged")
            await alpha.violation(inbox_subject(session_id, BETA))
            # pull from / ack / delete another child's consumer; make one of its own on the stream
            for subject in (
                f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{BETA}",
                f"$JS.ACK.{stream}.{BETA}.1.1.1.1.0",
                f"$JS.API.CONSUMER.DELETE.{stream}.{BETA}",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.thief",
                f"$JS.API.CONSUMER.CREATE.{stream}.thief.{inbox_subject(session_id, BETA)}",
                f"$JS.API.STREAM.DELETE.{stream}",
                f"$JS.API.STREAM.PURGE.{stream}",
                f"$JS.API.STREAM.DELETE.{reply_stream(session_id, ALPHA)}",
                f"$JS.API.STREAM.INFO.{stream}",
            ):
                with pytest.raises(NatsTimeout):  # refused: no answer ever comes
                    await nc.request(subject, b"{}", timeout=0.5)
                await alpha.violation(subject)
            # the JetStream client's own calls fail the same way
            js = nc.jetstream(timeout=0.5)
            sub = await js.pull_subscribe_bind(durable=BETA, stream=stream)
            with pytest.raises((NatsTimeout, TimeoutError)):
                await sub.fetch(1, timeout=0.5)
            # listen to other subjects: the session's, everyone's replies, the parent's inbox
            for subject in (f"shepherd.{session_id}.>", "_INBOX.>", ">"):
                await nc.subscribe(subject)
                await alpha.violation(subject)
        finally:
            await nc.close()

    asyncio.run(attack())

    async def victim() -> tuple[Any, Any]:
        login = Authority.load(str(authority_dir)).parent_login()
        check = await Conn().open(auth_server.url, **login.connect_options())
        try:
            js = check.nc.jetstream()
            return await js.consumer_info(stream, BETA), await js.stream_info(stream)
        finally:
            await check.nc.close()

    consumer, info = asyncio.run(victim())
    assert consumer.num_pending == 1 and consumer.num_ack_pending == 0
    assert consumer.delivered.stream_seq == 0  # nobody pulled beta's envelope
    assert info.state.messages == 1  # the forged publish was never stored
    got = Collector()
    parent.subscribe(BETA, got)
    (envelope,) = got.wait_for(1)
    assert envelope.content == "for beta only"  # type: ignore[union-attr]


def test_a_child_with_its_own_credentials_reads_its_inbox_writes_to_the_parent_and_gets_answers(
    parent: NatsTransport,
    auth_server: NatsServer,
    authority_dir: Path,
    session_id: str,
    tmp_path: Path,
) -> None:
    """Everything a child needs is allowed: its inbox, the parent's inbox, its one-shot reply
    inboxes (on its own stream), its quarantine records."""
    creds = child_creds(tmp_path, authority_dir, session_id, ALPHA)
    login = NatsLogin(str(creds), owner=ALPHA)
    child = NatsTransport(
        [auth_server.url],
        session_id,
        create=False,
        login=login,
        validate=lambda inbox, envelope: None,
    )
    try:
        inbox = Collector()
        child.subscribe(ALPHA, inbox)
        parent.publish(ALPHA, message(session_id, "task", sender_id=PARENT_ID, target_id=ALPHA))
        assert inbox.wait_for(1)[0].content == "task"  # type: ignore[union-attr]
        assert _settled(auth_server.url, authority_dir, session_id, ALPHA)  # its ack was allowed

        at_parent = Collector()
        parent.subscribe(PARENT_INBOX, at_parent)
        child.publish(PARENT_INBOX, message(session_id, "from alpha", sender_id=ALPHA))
        assert at_parent.wait_for(1)[0].content == "from alpha"  # type: ignore[union-attr]

        call = make_id(IdKind.MESSAGE, "c0c0c0c0c0c0c0c0")
        box = NatsReplyInbox(child, call)
        answers = Collector()
        child.subscribe(call, answers)
        parent.publish(call, message(session_id, "receipt", sender_id=PARENT_ID, target_id=ALPHA))
        assert answers.wait_for(1)[0].content == "receipt"  # type: ignore[union-attr]
        box.remove()
        assert not child.has_inbox(call)
    finally:
        child.close()


def test_a_user_signed_by_another_key_is_refused_at_connect(
    auth_server: NatsServer, tmp_path: Path, session_id: str
) -> None:
    """A forged identity: a well-formed user JWT, signed by an account the servers do not
    trust (another authority's), is refused before it can do anything."""
    other = tmp_path / "other"
    make_authority(other)
    forged = child_creds(tmp_path, other, session_id, ALPHA)

    async def connect(**options: Any) -> None:
        conn = await Conn().open(auth_server.url, **options)
        await conn.nc.close()

    with pytest.raises(Exception, match=r"(?i)authorization"):
        asyncio.run(connect(user_credentials=str(forged)))
    with pytest.raises(Exception, match=r"(?i)authorization"):
        asyncio.run(connect())  # no credentials at all


def test_a_child_that_widens_its_own_rights_in_its_jwt_is_refused_at_connect(
    auth_server: NatsServer, authority_dir: Path, tmp_path: Path, session_id: str
) -> None:
    """The child edits its JWT's permissions to everything (the signature stays the account's
    over the old claims): the server checks the signature and refuses it."""
    creds = child_creds(tmp_path, authority_dir, session_id, ALPHA)
    text = creds.read_text()
    jwt = text.split("-----BEGIN NATS USER JWT-----\n")[1].split("\n")[0]
    header, payload, signature = jwt.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["nats"]["pub"] = {"allow": [">"]}
    claims["nats"]["sub"] = {"allow": [">"]}
    widened = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    forged = tmp_path / "widened.creds"
    write_private(forged, text.replace(jwt, f"{header}.{widened}.{signature}"))

    async def connect() -> None:
        conn = await Conn().open(auth_server.url, user_credentials=str(forged))
        await conn.nc.close()

    with pytest.raises(Exception, match=r"(?i)authorization"):
        asyncio.run(connect())


def test_a_cluster_started_with_the_authority_serves_a_child_through_another_server(
    tmp_path: Path, authority_dir: Path, session_id: str
) -> None:
    """Every server of a cluster trusts the same authority: a child connected to the second
    server reaches a parent connected to the first, on replicated (R3) streams."""
    servers = start_cluster(tmp_path / "cluster", auth=authority_dir)
    try:
        login = Authority.load(str(authority_dir)).parent_login()
        parent = NatsTransport([servers[0].url], session_id, replicas=3, login=login)
        creds = child_creds(tmp_path, authority_dir, session_id, ALPHA)
        try:
            for inbox in (PARENT_INBOX, ALPHA):
                parent.ensure_inbox(inbox)
            parent.admit(ALPHA, session_id, CAPABILITY)
            got = Collector()
            parent.subscribe(PARENT_INBOX, got)
            # the replicated stream answers through the second server only once its leader is
            # elected and known there (a busy machine's election outlasts a first publish)
            assert _stream_served(servers[1].url, authority_dir, session_id)
            child = NatsTransport(
                [servers[1].url],
                session_id,
                create=False,
                login=NatsLogin(str(creds), owner=ALPHA),
            )
            try:
                child.publish(PARENT_INBOX, message(session_id, "via n2", sender_id=ALPHA))
            finally:
                child.close()
            assert got.wait_for(1)[0].content == "via n2"  # type: ignore[union-attr]
        finally:
            parent.close()
    finally:
        for server in servers:
            server.kill()


# ------------------------------------------------------------------ hostile values


def _refused(raw: str) -> str:
    with pytest.raises(InvalidArgument) as caught:
        Authority.load(raw)
    assert "--nats-auth" in caught.value.message
    return caught.value.message


def test_hostile_authority_directories_are_refused_naming_the_option(
    authority_dir: Path, tmp_path: Path
) -> None:
    assert "empty" in _refused("")
    assert "empty" in _refused("   ")
    assert "longer" in _refused("x" * 5000)
    assert "NUL" in _refused("a\0b")
    assert "does not exist" in _refused(str(tmp_path / "missing"))
    seed = authority_dir / ACCOUNT_SEED
    assert "not a directory" in _refused(str(seed))
    os.chmod(authority_dir, 0o755)
    assert "readable by others" in _refused(str(authority_dir))
    os.chmod(authority_dir, 0o700)
    os.chmod(seed, 0o644)
    assert "readable by others" in _refused(str(authority_dir))
    os.chmod(seed, 0o600)
    good = seed.read_text()
    for garbage in (
        "",
        "garbage\n",
        "SAAAAAAAAAAAAAAAAAAAAAAA\n",
        "\xff" * 100,
        good.replace("SA", "SU", 1),
    ):
        seed.write_text(garbage)
        assert "seed" in _refused(str(authority_dir))
    seed.unlink()
    seed.symlink_to(tmp_path / "elsewhere")
    assert "symbolic link" in _refused(str(authority_dir))


def test_the_module_makes_a_private_authority_whose_server_block_names_no_secret(
    tmp_path: Path,
) -> None:
    target = tmp_path / "new"
    done = subprocess.run(
        [sys.executable, "-m", "actors.transports.nats.auth", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == str(target / "server.conf")
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert sorted(path.name for path in target.iterdir()) == [ACCOUNT_SEED, "server.conf"]
    seed = (target / ACCOUNT_SEED).read_text().strip()
    assert seed.startswith("SA") and seed not in (target / "server.conf").read_text()
    assert "resolver: MEMORY" in (target / "server.conf").read_text()
    assert Authority.load(str(target)).account in (target / "server.conf").read_text()


def test_a_resumed_session_keeps_its_authority() -> None:
    assert resumed_auth("/auth", None) == "/auth"
    assert resumed_auth(None, None) is None
    assert resumed_auth("/auth", "/auth") == "/auth"
    for recorded, given in (("/auth", "/other"), (None, "/auth")):
        with pytest.raises(InvalidArgument, match="--nats-auth"):
            resumed_auth(recorded, given)


def test_making_an_authority_never_overwrites_one(authority_dir: Path) -> None:
    conf = (authority_dir / "server.conf").read_text()
    with pytest.raises(InvalidArgument, match="not an empty directory"):
        make_authority(authority_dir)
    assert (authority_dir / "server.conf").read_text() == conf
    done = subprocess.run(
        [sys.executable, "-m", "actors.transports.nats.auth", str(authority_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "not an empty directory" in done.stderr
    assert stat.S_IMODE(authority_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((authority_dir / ACCOUNT_SEED).stat().st_mode) == 0o600


def test_serve_refuses_a_bad_nats_auth_before_making_anything(
    isolated_state: Path, authority_dir: Path, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    env = dict(os.environ)
    cases = [
        ["--transport", "nats://127.0.0.1:4222", "--nats-auth", ""],
        ["--transport", "nats://127.0.0.1:4222", "--nats-auth", str(tmp_path / "missing")],
        ["--nats-auth", str(authority_dir)],  # the file mailbox takes no credentials
    ]
    for extra in cases:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "actors.surfaces.entry",
                "serve",
                "--json",
                "--session-dir",
                str(session),
                *extra,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (extra, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "invalid_argument" and "--nats-auth" in error["message"], error
        assert not (session / "session.json").exists()


# ------------------------------------------------------------------ a real session


def _as_parent(url: str, authority_dir: Path, ask: Any) -> Any:
    async def run() -> Any:
        login = Authority.load(str(authority_dir)).parent_login()
        conn = await Conn().open(url, **login.connect_options())
        try:
            return await ask(conn.nc.jetstream())
        finally:
            await conn.nc.close()

    return asyncio.run(run())


def _settled(url: str, authority_dir: Path, stream: str, consumer: str) -> bool:
    """Has ``consumer`` nothing pending and nothing waiting for an ack? Asked until it has
    (each check a round trip to the server), up to a ceiling."""

    async def ask(js: Any) -> bool:
        info = await js.consumer_info(stream, consumer)
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    return any(_as_parent(url, authority_dir, ask) for _ in range(500))


def _stream_served(url: str, authority_dir: Path, stream: str) -> bool:
    """Does ``stream`` answer through the server at ``url`` with a leader and every replica
    current? Asked until it does (each check a round trip to the server), up to a ceiling."""

    async def ask(js: Any) -> bool:
        import nats.errors

        try:
            info = await js.stream_info(stream)
        except nats.errors.Error:
            return False
        cluster = info.cluster
        return bool(cluster and cluster.leader and all(r.current for r in cluster.replicas or []))

    return any(_as_parent(url, authority_dir, ask) for _ in range(500))


async def _stream_names(js: Any) -> list[str]:
    return [info.config.name for info in await js.streams_info()]


def test_serve_with_nats_auth_runs_the_canonical_flow_with_one_user_per_agent(
    isolated_state: Path, auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    serve = Serve(
        session,
        dict(os.environ),
        "--transport",
        auth_server.url,
        "--nats-auth",
        str(authority_dir),
    )
    try:
        assert serve.wait_for(lambda lines: any("session" in x for x in lines))
        info = json.loads((session / "session.json").read_text())
        assert info["nats_auth"] == str(authority_dir)
        sid = info["session_id"]
        alpha = _spawn(tmp_path, session, "alpha")
        beta = _spawn(tmp_path, session, "beta")
        _, t_alpha = cli("delegate", "alpha", "TELL-BETA MARK-DONE", session=session)
        _, t_beta = cli("delegate", "beta", "MARK-DONE", session=session)
        ids = [t_alpha["task_id"], t_beta["task_id"]]
        _, waited = cli("wait", *ids, "--timeout", "90", session=session)
        assert waited["pending"] == [] and not waited["timed_out"], waited
        results = {r["agent_name"]: r for r in waited["completed"]}
        for agent in (
            alpha,
            beta,
        ):  # each bridge (started by now) has its own user, readable only by us
            creds = session / "agents" / agent["agent_id"] / "nats.creds"
            assert stat.S_IMODE(creds.stat().st_mode) == 0o600
            assert "BEGIN NATS USER JWT" in creds.read_text()
        assert results["alpha"]["status"] == results["beta"]["status"] == "completed"
        assert results["alpha"]["text"] == "done by alpha"
        # alpha's `shepherd-child message` reached beta through the parent, and the parent
        _read_until(session, "beta", "hello beta from alpha")
        alpha_lines = _read_until(session, "alpha", "RC done")
        assert [line.split()[2] for line in alpha_lines if line.startswith("RC ")] == ["0"] * 3
        assert serve.wait_for(
            lambda lines: any(x.get("content") == "progress from alpha" for x in lines)
        )
        names = _as_parent(auth_server.url, authority_dir, _stream_names)
        assert reply_stream(sid, alpha["agent_id"]) in names  # its one-shot inboxes' own stream
        for agent in (alpha, beta):
            cli("close", agent["agent_id"], session=session)
        assert wait_gone(lambda: session_pids(sid), timeout=60)
        rc, _ = cli("shutdown", session=session)
        assert rc == 0 and serve.proc.wait(timeout=60) == 0
        names = _as_parent(auth_server.url, authority_dir, _stream_names)
        assert not [name for name in names if name.startswith(sid)], names
    finally:
        serve.stop()


def test_a_parent_killed_and_served_again_keeps_its_authority_and_its_agents(
    isolated_state: Path, auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    """The restarted parent logs in with the recorded authority (no option needed); the running
    agent's user still works, so its `done` reaches the new parent; another authority is
    refused."""
    session = tmp_path / "session"
    first = Serve(
        session, dict(os.environ), "--transport", auth_server.url, "--nats-auth", str(authority_dir)
    )
    try:
        assert first.wait_for(lambda lines: any("session" in x for x in lines))
        _spawn(tmp_path, session, "alpha")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
        _read_until(session, "alpha", "BLOCKED")
    finally:
        first.stop(signal.SIGKILL)

    other = tmp_path / "other"
    make_authority(other)
    argv = [sys.executable, "-m", "actors.surfaces.cli", "serve", "--session-dir", str(session)]
    moved = subprocess.run(
        [*argv, "--nats-auth", str(other), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    error = json.loads(moved.stdout)["error"]
    assert (moved.returncode, error["code"]) == (2, "invalid_argument")
    assert "--nats-auth" in error["message"]

    second = Serve(session, dict(os.environ))  # session.json names the servers and authority
    try:
        assert second.wait_for(lambda lines: any("session" in x for x in lines))
        with open(fifo, "w"):
            pass  # the agent's `done`, as its own user, to the resumed parent
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        (result,) = waited["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha")
    finally:
        second.stop()


@pytest.mark.timeout(300)
def test_records_on_the_servers_and_a_resume_on_another_host_work_with_the_authority(
    isolated_state: Path, auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    """`--journal nats` writes the records as the parent user; a parent SIGKILLed on host A is
    resumed on host B (its own state, naming the authority again) and gets the agent's `done`."""
    url, auth = auth_server.url, str(authority_dir)
    session_a = tmp_path / "host-a" / "session"
    first = Serve(
        session_a, dict(os.environ), "--transport", url, "--journal", "nats", "--nats-auth", auth
    )
    try:
        assert first.wait_for(lambda lines: any("session" in x for x in lines))
        session_id = json.loads((session_a / "session.json").read_text())["session_id"]
        _spawn(tmp_path, session_a, "alpha")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session_a)
        _read_until(session_a, "alpha", "BLOCKED")
    finally:
        first.stop(signal.SIGKILL)

    host_b = tmp_path / "host-b"
    env_b = dict(os.environ, XDG_STATE_HOME=str(host_b / "state"))
    argv = ["--transport", url, "--journal", "nats", "--resume", session_id, "--nats-auth", auth]
    second = Serve(host_b / "session", env_b, *argv)
    try:
        assert second.wait_for(lambda lines: any("session" in x for x in lines))
        with open(fifo, "w"):
            pass  # the agent's `done`, as its own user, to the parent resumed on host B
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=host_b / "session")
        (result,) = waited["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha")
    finally:
        second.stop()
