"""Every TCP connection of a session to its cluster of three NATS servers cut at once (the
parent's, the agent's bridge's): the clients reconnect by themselves, and the agent's `done`,
sent after the cut, completes its task once. The session reaches each server through a small
proxy the test can cut; nothing sleeps."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.transports.nats.server import start_cluster
from tests.nats.test_serve import _err, _notifications, _read_until, _spawn
from tests.processes.conftest import Serve, cli

#: real servers and processes, on a machine that may be busy: waits on events, with ceilings
pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]


class CuttableProxy:
    """127.0.0.1:port forwarded to ``target``; :meth:`cut` closes every connection it carries
    (new ones are taken as before)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.connections = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Close every connection carried now; how many there were."""
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return len(sockets) // 2

    def close(self) -> None:
        self._listener.close()
        self.cut()


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


@pytest.fixture
def proxies(tmp_path: Path) -> Iterator[list[CuttableProxy]]:
    """One proxy before each server of a cluster of three; the servers do not advertise their
    own addresses, so every client reconnects through a proxy."""
    cluster = start_cluster(tmp_path / "cluster", advertise=False)
    made = [CuttableProxy(("127.0.0.1", server.port)) for server in cluster]
    try:
        yield made
    finally:
        for proxy in made:
            proxy.close()
        for server in cluster:
            server.kill()


def test_every_connection_cut_mid_task_and_the_done_after_it_completes_once(
    proxies: list[CuttableProxy], tmp_path: Path
) -> None:
    session = tmp_path / "session"
    url = ",".join(f"nats://127.0.0.1:{proxy.port}" for proxy in proxies)
    server = Serve(session, dict(os.environ), "--transport", url)
    try:
        assert server.wait_for(lambda lines: any("session" in x for x in lines)), _err(server)
        _spawn(tmp_path, session, "alpha")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")
        carried = sum(proxy.connections for proxy in proxies)
        assert sum(proxy.cut() for proxy in proxies) >= 2  # the parent's and the bridge's
        with open(fifo, "w"):
            pass  # the agent's `done` goes out through its bridge's broken connection
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        (result,) = waited["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha")
        assert sum(proxy.connections for proxy in proxies) > carried, "nobody reconnected"
        assert server.wait_for(
            lambda lines: any(x.get("kind") == "task_completion" for x in lines), timeout=60
        )
        completed = [
            r["task_id"]
            for n in _notifications(session)
            if n["kind"] == "task_completion"
            for r in n["results"]
        ]
        assert completed == [task["task_id"]]
        lines = _read_until(session, "alpha", "RC done")
        assert any(line.startswith("RC done 0") for line in lines), lines
    finally:
        server.stop()
