"""Starting real ``nats-server`` processes: ports that differ, and a port taken between its choice
and the server's start (another process on a busy machine) costs a retry, not the test run."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from actors.transports.nats import server as server_module
from actors.transports.nats.server import free_ports, start_cluster, start_server


def test_ports_chosen_together_all_differ() -> None:
    for _ in range(20):
        ports = free_ports(9)
        assert len(set(ports)) == 9


@contextmanager
def _listening() -> Iterator[int]:
    """A port some other process is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _first_choice_taken(monkeypatch: pytest.MonkeyPatch, taken: int) -> list[list[int]]:
    """The first choice of ports includes ``taken``; later choices are honest."""
    honest = server_module.free_ports
    choices: list[list[int]] = []

    def choose(count: int) -> list[int]:
        ports = honest(count)
        if not choices:
            ports[-1] = taken  # the route port of a cluster's last server, a server's http port
        choices.append(ports)
        return ports

    monkeypatch.setattr(server_module, "free_ports", choose)
    return choices


def test_a_server_whose_port_was_taken_is_started_again_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _listening() as taken:
        choices = _first_choice_taken(monkeypatch, taken)
        server = start_server(tmp_path / "nats")
        try:
            assert len(choices) == 2, "the first start must have failed on the taken port"
            assert taken not in (server.port, server.http_port)
            assert server.healthy()
        finally:
            server.kill()


def test_a_cluster_whose_port_was_taken_is_started_again_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _listening() as taken:
        choices = _first_choice_taken(monkeypatch, taken)
        servers = start_cluster(tmp_path / "cluster")
        try:
            assert len(choices) == 2, "the first start must have failed on the taken port"
            ports = {p for s in servers for p in (s.port, s.http_port, s.cluster_port)}
            assert len(ports) == 9 and taken not in ports
            assert all(s.healthy() for s in servers)
        finally:
            for server in servers:
                server.kill()


def test_another_servers_health_on_a_taken_monitoring_port_is_not_taken_for_this_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A monitoring port chosen free, then taken by another process's healthy server: its
    health answers for this server, which meanwhile exits on the port. The start must see that
    the answer is not its own and start again on new ports, never return a dead server."""
    other = start_server(tmp_path / "other")
    try:
        choices = _first_choice_taken(monkeypatch, other.http_port)
        server = start_server(tmp_path / "nats")
        try:
            assert len(choices) == 2, "the first start must have failed on the taken port"
            assert server.http_port != other.http_port
            assert server.process is not None and server.process.poll() is None
            assert server.serves_its_port() and other.serves_its_port()
        finally:
            server.kill()
    finally:
        other.kill()
