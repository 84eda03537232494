"""`shepherd node --max-running N`: a session hands at most N tasks at once to the agents it
placed on that node and queues the rest (a real `nats-server`, `serve --transport`, a real
node and bridges); hostile values refuse the node's start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from actors.transports.nats.server import NatsServer
from tests.nats.nodes import Node, _isolated, serve, spawn_waiting
from tests.processes.conftest import Serve, cli

pytestmark = pytest.mark.processes

__all__ = ["_isolated", "serve"]  # fixtures used here


def _status(tmp_path: Path) -> dict[str, Any]:
    _, status = cli("status", session=tmp_path / "session")
    return status  # type: ignore[no-any-return]


def test_a_nodes_cap_queues_its_agents_tasks_until_a_slot_frees(
    nats_url: str, serve: Serve, tmp_path: Path
) -> None:
    node = Node(nats_url, "n1", tmp_path / "host-n1", "--max-running", "1")
    try:
        assert node.ready is not None and node.ready["max_running"] == 1, node.first
        spawn_waiting(tmp_path, "alpha", "n1")
        spawn_waiting(tmp_path, "beta", "n1")
        session = tmp_path / "session"
        _, first = cli("delegate", "alpha", "one", session=session)
        _, second = cli("delegate", "beta", "two", session=session)
        assert not first.get("queued") and second["queued"] and second["queue_place"] == 1
        summary = _status(tmp_path)["summary"]
        assert summary["node_caps"] == {"n1": 1} and summary["queued"] == 1
        # the first one's end frees the node's slot: the queued one is handed over
        cli("cancel", first["task_id"], session=session)
        deadline = time.monotonic() + 60
        state = None
        while time.monotonic() < deadline:  # each look is a CLI round trip, not a sleep
            (row,) = [a for a in _status(tmp_path)["agents"] if a["name"] == "beta"]
            state = row["task"]["state"]
            if state == "running":
                break
        assert state == "running"
    finally:
        node.stop()


@pytest.mark.parametrize("value", ["0", "-1", "1000001", "lots", "1.5", ""])
def test_a_node_with_a_hostile_cap_refuses_to_start(
    nats_server: NatsServer, tmp_path: Path, value: str
) -> None:
    node = Node(nats_server.url, "n1", tmp_path / "host", "--max-running", value)
    node.proc.communicate(timeout=60)
    assert node.ready is None and node.proc.returncode == 2
    error = node.first["error"]
    assert error["code"] == "invalid_argument" and "--max-running" in error["message"]
    assert not (tmp_path / "host").exists()
