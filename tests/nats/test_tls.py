"""TLS to the NATS servers (``--transport tls://... --nats-ca FILE``,
actors/transports/nats/tls.py): real ``nats-server`` processes whose only listener is TLS, with
certificates minted here (a CA, a server certificate for 127.0.0.1 and localhost, a second CA, a
certificate for another host). Nothing sleeps: sessions are driven by CLI round trips and
output lines, with ceilings."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actors.session.parent_transport import resumed_tls
from actors.testing.certs import Minted, mint_ca, mint_leaf
from actors.transports.nats.auth import make_authority
from actors.transports.nats.server import NatsServer, ServerTls, start_cluster, start_server
from actors.transports.nats.tls import client_context, load_ca, load_tls
from actors.transports.wire import open_transport
from protocol.core.errors import InvalidArgument, SessionUnavailable
from protocol.core.transport_url import TlsFiles
from tests.nats.test_serve import _read_until, _spawn
from tests.processes.conftest import Serve, cli
from tests.reliability.live import session_pids, wait_gone

pytestmark = pytest.mark.processes

MIXED = "tls://127.0.0.1:1,nats://127.0.0.1:2"


@dataclass(frozen=True)
class Pki:
    ca: Minted
    server: Minted
    other_ca: Minted
    #: signed by ``ca`` for another address (127.0.0.2): dialled at 127.0.0.1, the name is wrong
    elsewhere: Minted
    #: a client's certificate signed by ``ca`` (mutual TLS)
    client: Minted

    def server_tls(self, leaf: Minted | None = None, *, verify: bool = False) -> ServerTls:
        leaf = leaf or self.server
        return ServerTls(cert=leaf.cert, key=leaf.key, ca=self.ca.cert, verify=verify)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = mint_ca(tmp_path / "pki")
    return Pki(
        ca=ca,
        server=mint_leaf(ca, tmp_path / "pki"),
        other_ca=mint_ca(tmp_path / "pki-other", "another CA"),
        elsewhere=mint_leaf(ca, tmp_path / "pki", "elsewhere", ips=("127.0.0.2",), dns=()),
        client=mint_leaf(ca, tmp_path / "pki", "client"),
    )


@pytest.fixture
def tls_server(tmp_path: Path, pki: Pki) -> Iterator[NatsServer]:
    server = start_server(tmp_path / "nats-tls", tls=pki.server_tls())
    try:
        yield server
    finally:
        server.kill()


def _connz(server: NatsServer) -> list[dict[str, Any]]:
    """The server's own account of its client connections (its monitoring endpoint)."""
    url = f"http://127.0.0.1:{server.http_port}/connz?limit=1024"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return list(json.load(answer).get("connections") or [])


def _nats_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("shepherd-nats")}


# ------------------------------------------------------------------ the client really uses TLS


def test_a_tls_only_server_refuses_clear_text_and_takes_the_verified_tls_client(
    tls_server: NatsServer, pki: Pki, session_id: str
) -> None:
    assert tls_server.url.startswith("tls://")
    # a clear-text client: the server says TLS is required and answers CONNECT with an error
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as raw:
        info = json.loads(raw.recv(4096).decode().split(" ", 1)[1])
        assert info["tls_required"] is True
        raw.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        answer = b""
        while b"\n" not in answer:
            chunk = raw.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert b"PONG" not in answer  # never served in clear text

    files = TlsFiles(ca=str(pki.ca.cert))
    transport = open_transport(tls_server.url, session_id, create=True, tls=files)
    try:
        ours = [c for c in _connz(tls_server) if c.get("name") == f"shepherd {session_id}"]
        assert ours, _connz(tls_server)
        assert all(c.get("tls_version", "").startswith("1.") for c in ours), ours
    finally:
        transport.close()


def test_the_context_verifies_the_chain_and_the_host_name_always() -> None:
    import ssl

    context = client_context(None)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


# ------------------------------------------------------------------ refused at connect


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("wrong CA", "certificate verify failed"),
        ("wrong host name", "certificate verify failed"),
        ("system trust store", "certificate verify failed"),
        ("nats:// against TLS", "requires TLS"),
        ("tls:// against clear text", "does not offer TLS"),
        ("no client certificate", "CERTIFICATE_REQUIRED"),
    ],
)
def test_a_server_that_fails_tls_is_session_unavailable_naming_it_and_the_cause(
    tmp_path: Path, pki: Pki, session_id: str, case: str, words: str
) -> None:
    leaf = pki.elsewhere if case == "wrong host name" else pki.server
    verify = case == "no client certificate"
    tls = None if case == "tls:// against clear text" else pki.server_tls(leaf, verify=verify)
    server = start_server(tmp_path / "n", tls=tls)
    try:
        url = server.url.replace("tls://", "nats://") if "nats://" in case else server.url
        url = url.replace("nats://", "tls://") if "tls://" in case else url
        ca = {"wrong CA": str(pki.other_ca.cert), "system trust store": None}.get(
            case, str(pki.ca.cert)
        )
        if url.startswith("nats://"):
            ca = None
        before = _nats_threads()
        with pytest.raises(SessionUnavailable) as refused:
            open_transport(url, session_id, create=True, tls=TlsFiles(ca=ca).given())
        message = refused.value.message
        assert url in message and "TLS" in message and words in message, message
        assert "\n" not in message
        assert _nats_threads() <= before  # no connection thread left behind
    finally:
        server.kill()


# ------------------------------------------------------------------ hostile --nats-ca


def test_hostile_nats_ca_values_are_invalid_argument_naming_the_option(
    tmp_path: Path, pki: Pki
) -> None:
    def refused(raw: str, descriptor: str = "tls://127.0.0.1:4222") -> str:
        with pytest.raises(InvalidArgument) as caught:
            load_ca(raw, descriptor)
        assert "--nats-ca" in caught.value.message
        return caught.value.message

    fake = tmp_path / "fake.pem"
    fake.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    binary = tmp_path / "binary.pem"
    binary.write_bytes(b"\xff\x00" * 100)
    assert "empty" in refused("")
    assert "empty" in refused("   ")
    assert "at most 4096" in refused("x" * 5000)
    assert "NUL" in refused("ca\0.pem")
    assert "cannot be read" in refused(str(tmp_path / "missing.pem"))
    assert "not a file" in refused(str(tmp_path))
    assert "no PEM certificate" in refused(str(pki.ca.key))  # a key, not a certificate
    assert "no PEM certificate" in refused(str(binary))
    assert "not a PEM certificate bundle" in refused(str(fake))
    assert "needs --transport tls://" in refused(str(pki.ca.cert), "nats://127.0.0.1:4222")
    assert "needs --transport tls://" in refused(str(pki.ca.cert), "/run/user/1/mailbox")
    assert load_ca(str(pki.ca.cert), "tls://127.0.0.1:4222") == str(pki.ca.cert)


def test_hostile_client_certificates_and_keys_are_invalid_argument_naming_the_option(
    tmp_path: Path, pki: Pki
) -> None:
    def refused(cert: str | None, key: str | None, option: str) -> str:
        with pytest.raises(InvalidArgument) as caught:
            load_tls("tls://127.0.0.1:4222", None, cert, key)
        assert option in caught.value.message, caught.value.message
        return caught.value.message

    cert, key = str(pki.client.cert), str(pki.client.key)
    loose = tmp_path / "loose.key"
    loose.write_bytes(pki.client.key.read_bytes())
    loose.chmod(0o644)
    assert "go together" in refused(cert, None, "--nats-key")
    assert "go together" in refused(None, key, "--nats-cert")
    assert "empty" in refused("", key, "--nats-cert")
    assert "NUL" in refused(cert, "k\0", "--nats-key")
    assert "at most 4096" in refused("c" * 5000, key, "--nats-cert")
    assert "cannot be read" in refused(cert, str(tmp_path / "missing.key"), "--nats-key")
    assert "not a file" in refused(str(tmp_path), key, "--nats-cert")
    assert "no PEM certificate" in refused(key, key, "--nats-cert")
    private_cert = tmp_path / "cert-as-key.pem"
    private_cert.write_bytes(pki.client.cert.read_bytes())
    private_cert.chmod(0o600)
    assert "no PEM private key" in refused(cert, str(private_cert), "--nats-key")
    assert "readable by others" in refused(cert, str(loose), "--nats-key")
    # another certificate's key: the pair does not load
    assert "not a certificate and its key" in refused(str(pki.server.cert), key, "--nats-cert")
    # a key with a passphrase: refused, never a prompt on a terminal nobody watches
    from cryptography.hazmat.primitives import serialization

    locked = tmp_path / "locked.key"
    locked.write_bytes(
        pki.client._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    locked.chmod(0o600)
    assert "encrypted key" in refused(cert, str(locked), "--nats-cert")
    with pytest.raises(InvalidArgument, match="need --transport tls://"):
        load_tls("nats://127.0.0.1:4222", None, cert, key)
    files = load_tls("tls://127.0.0.1:4222", str(pki.ca.cert), cert, key)
    assert files == TlsFiles(ca=str(pki.ca.cert), cert=cert, key=key)


def test_serve_and_node_refuse_a_bad_nats_ca_before_making_anything(
    isolated_state: Path, tmp_path: Path, pki: Pki
) -> None:
    session = tmp_path / "session"
    cases = [
        ["--transport", "tls://127.0.0.1:4222", "--nats-ca", ""],
        ["--transport", "tls://127.0.0.1:4222", "--nats-ca", str(tmp_path / "missing.pem")],
        ["--transport", "tls://127.0.0.1:4222", "--nats-ca", str(tmp_path)],
        ["--transport", "tls://127.0.0.1:4222", "--nats-ca", str(pki.ca.key)],
        ["--transport", "nats://127.0.0.1:4222", "--nats-ca", str(pki.ca.cert)],
        ["--nats-ca", str(pki.ca.cert)],  # the file mailbox has no server to verify
        ["--transport", "tls://127.0.0.1:4222", "--nats-cert", str(pki.client.cert)],
        ["--transport", "tls://127.0.0.1:4222", "--nats-key", str(pki.client.key)],
    ]
    base = [sys.executable, "-m", "actors.surfaces.entry"]
    for extra in cases:
        for argv in (
            [*base, "serve", "--json", "--session-dir", str(session), *extra],
            [*base, "node", "--name", "n1", "--dir", str(tmp_path / "node"), "--json", *extra]
            if "--transport" in extra
            else None,
        ):
            if argv is None:
                continue
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 2, (extra, done.stdout, done.stderr)
            error = json.loads(done.stdout)["error"]
            assert error["code"] == "invalid_argument", error
            assert "--nats-" in error["message"], error
    assert not session.exists() or not (session / "session.json").exists()
    assert not (tmp_path / "node").exists()
    mixed = subprocess.run(  # mixing schemes: TLS for some servers only
        [*base, "serve", "--json", "--session-dir", str(session), "--transport", MIXED],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    error = json.loads(mixed.stdout)["error"]
    assert (mixed.returncode, error["code"]) == (2, "invalid_argument")
    assert "--transport" in error["message"] and "mixes schemes" in error["message"]


def test_a_resumed_session_keeps_its_tls_files() -> None:
    kept = TlsFiles(ca="/ca.pem", cert="/c.pem", key="/c.key")
    assert resumed_tls(kept, None) == kept
    assert resumed_tls(None, None) is None
    assert resumed_tls(kept, TlsFiles(ca="/ca.pem")) == kept
    assert resumed_tls(kept, kept) == kept
    for recorded, given, option in (
        (kept, TlsFiles(ca="/other.pem"), "--nats-ca"),
        (None, TlsFiles(ca="/ca.pem"), "--nats-ca"),
        (TlsFiles(ca="/ca.pem"), TlsFiles(cert="/c.pem", key="/c.key"), "--nats-cert"),
        (kept, TlsFiles(key="/other.key"), "--nats-key"),
    ):
        with pytest.raises(InvalidArgument, match=option):
            resumed_tls(recorded, given)


# ------------------------------------------------------------------ whole sessions over TLS


def _bridge_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _canonical_flow(
    tmp_path: Path, serve: Serve, servers: list[NatsServer], ca: str, client: Minted | None = None
) -> None:
    """Two command agents: delegate, a message from one to the other and to the parent, done;
    status from the CLI (through serve's socket and in a process of its own, which connects
    over TLS itself), every connection the servers hold is TLS; shutdown."""
    session = tmp_path / "session"
    assert serve.wait_for(lambda lines: any("session" in x for x in lines)), serve.proc.poll()
    info = json.loads((session / "session.json").read_text())
    assert info["mailbox"].startswith("tls://") and info["nats_tls"]["ca"] == ca
    sid = info["session_id"]
    alpha = _spawn(tmp_path, session, "alpha")
    beta = _spawn(tmp_path, session, "beta")
    _, t_alpha = cli("delegate", "alpha", "TELL-BETA MARK-DONE", session=session)
    _, t_beta = cli("delegate", "beta", "MARK-DONE", session=session)
    ids = [t_alpha["task_id"], t_beta["task_id"]]
    _, waited = cli("wait", *ids, "--timeout", "90", session=session)
    assert waited["pending"] == [] and not waited["timed_out"], waited
    results = {r["agent_name"]: r for r in waited["completed"]}
    assert (results["alpha"]["text"], results["beta"]["text"]) == ("done by alpha", "done by beta")
    _read_until(session, "beta", "hello beta from alpha")
    alpha_lines = _read_until(session, "alpha", "RC done")
    assert [line.split()[2] for line in alpha_lines if line.startswith("RC ")] == ["0"] * 3
    assert serve.wait_for(
        lambda lines: any(x.get("content") == "progress from alpha" for x in lines)
    )
    # the CLI in a process of its own (no command socket): session.json's CA verifies for it
    dir_ = str(session)
    direct = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", "status", "--json", "--session", dir_],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert direct.returncode == 0, direct.stderr
    status = json.loads(direct.stdout)
    rows = {a["name"]: a for a in status["agents"]}
    assert rows["alpha"]["task"]["state"] == rows["beta"]["task"]["state"] == "completed"
    for row in rows.values():  # each agent's bridge was given the CA beside the transport
        env = _bridge_env(row["pid"])
        assert env["SHEPHERD_MAILBOX"] == info["mailbox"] and env["SHEPHERD_NATS_CA"] == ca
        if client is not None:
            assert env["SHEPHERD_NATS_CERT"] == str(client.cert)
            assert env["SHEPHERD_NATS_KEY"] == str(client.key)
    held = [c for server in servers for c in _connz(server)]
    assert held and all(c.get("tls_version", "").startswith("1.") for c in held), held
    for agent in (alpha, beta):
        cli("close", agent["agent_id"], session=session)
    assert wait_gone(lambda: session_pids(sid), timeout=60)
    rc, _ = cli("shutdown", session=session)  # runs here, over its own TLS connection
    assert rc == 0 and serve.proc.wait(timeout=60) == 0


def test_a_session_over_tls_with_its_journal_on_the_servers_runs_the_canonical_flow(
    isolated_state: Path, tls_server: NatsServer, pki: Pki, tmp_path: Path
) -> None:
    ca = str(pki.ca.cert)
    serve = Serve(
        tmp_path / "session",
        dict(os.environ),
        *("--transport", tls_server.url, "--nats-ca", ca, "--journal", "nats"),
    )
    try:
        _canonical_flow(tmp_path, serve, [tls_server], ca)
    finally:
        serve.stop()


def test_tls_and_per_agent_credentials_together_run_the_canonical_flow(
    isolated_state: Path, pki: Pki, tmp_path: Path
) -> None:
    authority = tmp_path / "auth"
    make_authority(authority)
    server = start_server(tmp_path / "nats-auth-tls", auth=authority, tls=pki.server_tls())
    ca = str(pki.ca.cert)
    serve = Serve(
        tmp_path / "session",
        dict(os.environ),
        *("--transport", server.url, "--nats-ca", ca, "--nats-auth", str(authority)),
    )
    try:
        _canonical_flow(tmp_path, serve, [server], ca)
    finally:
        serve.stop()
        server.kill()


def test_a_server_that_verifies_its_clients_runs_a_session_with_the_client_certificate(
    isolated_state: Path, pki: Pki, tmp_path: Path
) -> None:
    """Mutual TLS: the server refuses a client without a certificate of its CA (above); every
    process of the session shows the one given to serve."""
    server = start_server(tmp_path / "nats-mtls", tls=pki.server_tls(verify=True))
    ca, cert, key = str(pki.ca.cert), str(pki.client.cert), str(pki.client.key)
    serve = Serve(
        tmp_path / "session",
        dict(os.environ),
        *("--transport", server.url, "--nats-ca", ca, "--nats-cert", cert, "--nats-key", key),
    )
    try:
        _canonical_flow(tmp_path, serve, [server], ca, pki.client)
    finally:
        serve.stop()
        server.kill()


def test_a_cluster_of_three_tls_servers_with_tls_routes_runs_a_session(
    isolated_state: Path, pki: Pki, tmp_path: Path
) -> None:
    servers = start_cluster(tmp_path / "cluster", tls=pki.server_tls())
    ca = str(pki.ca.cert)
    try:
        for server in servers:  # the routes are TLS too (the cluster formed over them)
            text = (server.store_dir / f"{server.name}.conf").read_text()
            assert text.count("tls {") == 2, text
        url = "tls://" + ",".join(s.url.removeprefix("tls://") for s in servers)
        serve = Serve(tmp_path / "session", dict(os.environ), "--transport", url, "--nats-ca", ca)
        try:
            _canonical_flow(tmp_path, serve, servers, ca)
        finally:
            serve.stop()
    finally:
        for server in servers:
            server.kill()


def test_an_agent_on_a_node_over_tls_uses_the_nodes_own_ca_bundle(
    isolated_state: Path, tls_server: NatsServer, pki: Pki, tmp_path: Path
) -> None:
    """Host B has its own copy of the CA: the node connects with it and gives it to the bridges
    it starts (the parent's path means nothing on another host)."""
    from tests.nats.nodes import Node, spawn_command

    ca = str(pki.ca.cert)
    host_b = tmp_path / "host-b-etc"
    host_b.mkdir()
    node_ca = host_b / "ca.pem"
    node_ca.write_bytes(pki.ca.cert.read_bytes())
    serve = Serve(
        tmp_path / "session", dict(os.environ), "--transport", tls_server.url, "--nats-ca", ca
    )
    node = Node(tls_server.url, "n1", tmp_path / "host-n1", "--nats-ca", str(node_ca))
    try:
        assert node.ready is not None, node.first
        assert serve.wait_for(lambda lines: any("session" in x for x in lines))
        session = tmp_path / "session"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        spawn_command(tmp_path, "alpha", "n1")
        _, task = cli("delegate", "alpha", "MARK-DONE", session=session)
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        assert [r["text"] for r in waited["completed"]] == ["done by alpha"], waited
        _, status = cli("status", session=session)
        row = {a["name"]: a for a in status["agents"]}["alpha"]
        assert row["node"] == "n1"
        assert _bridge_env(row["pid"])["SHEPHERD_NATS_CA"] == str(node_ca)
        assert all(c.get("tls_version", "").startswith("1.") for c in _connz(tls_server))
        rc, _ = cli("shutdown", session=session)
        assert rc == 0 and serve.proc.wait(timeout=60) == 0
        assert wait_gone(lambda: session_pids(sid), timeout=60)
    finally:
        serve.stop()
        node.stop()


def test_tls_credentials_and_a_node_together_run_an_agent_on_the_node(
    isolated_state: Path, pki: Pki, tmp_path: Path
) -> None:
    """Everything at once: TLS servers that require credentials of the session's authority, a
    node with its own user and its own copy of the CA; the agent it starts has both its own
    user (sent by the parent) and the node's CA, and every connection is TLS."""
    from tests.nats.nodes import Node, spawn_command
    from tests.nats.test_node_auth import mint_node

    authority = tmp_path / "auth"
    make_authority(authority)
    server = start_server(tmp_path / "nats-all", auth=authority, tls=pki.server_tls())
    node_ca = tmp_path / "host-b-etc" / "ca.pem"
    node_ca.parent.mkdir()
    node_ca.write_bytes(pki.ca.cert.read_bytes())
    argv = ("--transport", server.url, "--nats-ca", str(pki.ca.cert))
    serve = Serve(tmp_path / "session", dict(os.environ), *argv, "--nats-auth", str(authority))
    node = Node(
        server.url,
        "n1",
        tmp_path / "host-n1",
        *("--nats-ca", str(node_ca), "--nats-creds", str(mint_node(authority, "n1"))),
    )
    try:
        assert node.ready is not None, node.first
        assert serve.wait_for(lambda lines: any("session" in x for x in lines))
        session = tmp_path / "session"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        alpha = spawn_command(tmp_path, "alpha", "n1")
        _, task = cli("delegate", "alpha", "MARK-DONE", session=session)
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        assert [r["text"] for r in waited["completed"]] == ["done by alpha"], waited
        _, status = cli("status", session=session)
        row = {a["name"]: a for a in status["agents"]}["alpha"]
        env = _bridge_env(row["pid"])
        assert env["SHEPHERD_NATS_CA"] == str(node_ca)
        creds = tmp_path / "host-n1" / sid / "agents" / alpha["agent_id"] / "nats.creds"
        assert env["SHEPHERD_NATS_CREDS"] == str(creds)
        assert stat.S_IMODE(creds.stat().st_mode) == 0o600
        assert all(c.get("tls_version", "").startswith("1.") for c in _connz(server))
        rc, _ = cli("shutdown", session=session)
        assert rc == 0 and serve.proc.wait(timeout=60) == 0
        assert wait_gone(lambda: session_pids(sid), timeout=60)
    finally:
        serve.stop()
        node.stop()
        server.kill()


def test_a_node_whose_ca_does_not_verify_the_servers_does_not_start(
    isolated_state: Path, tls_server: NatsServer, pki: Pki, tmp_path: Path
) -> None:
    from tests.nats.nodes import Node

    node = Node(tls_server.url, "n1", tmp_path / "host-n1", "--nats-ca", str(pki.other_ca.cert))
    try:
        assert node.ready is None
        error = node.first["error"]
        assert error["code"] == "session_unavailable", error
        assert tls_server.url in error["message"] and "TLS" in error["message"], error
    finally:
        node.stop()


def test_serve_against_a_server_it_cannot_verify_is_session_unavailable_naming_tls(
    isolated_state: Path, tls_server: NatsServer, pki: Pki, tmp_path: Path
) -> None:
    """From the command line: another CA, and clear text against the TLS server, each end
    `serve` with the typed error naming the servers and the TLS cause."""
    plain_url = tls_server.url.replace("tls://", "nats://")
    serve = [sys.executable, "-m", "actors.surfaces.entry", "serve", "--json"]
    for extra in (
        ["--transport", tls_server.url, "--nats-ca", str(pki.other_ca.cert)],
        ["--transport", plain_url],
    ):
        done = subprocess.run(
            [*serve, "--session-dir", str(tmp_path / "session"), *extra],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (extra, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "session_unavailable", error
        assert extra[1] in error["message"] and "TLS" in error["message"], error
