"""Fixtures for the NATS transport's tests: real ``nats-server`` processes, started from the
binary the ``nats`` extra installs, on free loopback ports with temporary store dirs, always
killed at the end."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.transports.nats.server import NatsServer, start_cluster, start_server
from protocol.core.ids import IdKind, make_id


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = start_server(tmp_path / "nats")
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[list[NatsServer]]:
    servers = start_cluster(tmp_path / "cluster")
    try:
        yield servers
    finally:
        for server in servers:
            server.kill()


@pytest.fixture(params=["server"])
def nats_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The ``--transport`` of a test's servers: one server, or with
    ``@pytest.mark.parametrize("nats_url", ["cluster"], indirect=True)`` a cluster of three
    (every server named, so the session's streams are replicated on three)."""
    if request.param == "cluster":
        servers = start_cluster(tmp_path / "cluster")
    else:
        servers = [start_server(tmp_path / "nats")]
    try:
        yield ",".join(server.url for server in servers)
    finally:
        for server in servers:
            server.kill()


#: run a test over a real cluster of three servers instead of one
OVER_A_CLUSTER = pytest.mark.parametrize("nats_url", ["cluster"], indirect=True)


@pytest.fixture
def session_id() -> str:
    return make_id(IdKind.SESSION, secrets.token_hex(8))
