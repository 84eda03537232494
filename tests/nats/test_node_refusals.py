"""`shepherd node` refusals: unknown, absent and hostile nodes and names, hostile requests on
a node's subjects, servers that do not answer, the file mailbox, the Python API (the same real
processes as test_node.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.transports.nats.server import NatsServer
from tests.nats.nodes import (
    WAIT_ANY,
    Node,
    _isolated,
    rows,
    serve,
    serve_session,
    start_node,
)
from tests.processes.conftest import Serve, cli
from tests.reliability.live import session_pids

pytestmark = pytest.mark.processes

__all__ = ["_isolated", "serve", "start_node"]  # fixtures used here


def test_spawn_on_an_unknown_or_hostile_node_is_refused_and_nothing_is_spawned(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    script = tmp_path / "wait.json"
    script.write_text(WAIT_ANY)

    def spawn(node: str) -> tuple[int, Any]:
        return cli(
            "spawn", "a", "--script", str(script), "--node", node, session=session, check=False
        )

    rc, out = spawn("any")  # no node is live yet
    assert rc == 2 and out["error"]["code"] == "invalid_handle", out
    start_node("n1")
    rc, out = spawn("nope")
    assert rc == 2 and out["error"]["code"] == "invalid_handle", out
    assert "'nope'" in out["error"]["message"] and "n1" in out["error"]["message"]
    for hostile in ("N1", "n1.x", "*", ">", "a b", "", "x" * 64, "../n1", "n1\n"):
        rc, out = spawn(hostile)
        assert rc == 2 and out["error"]["code"] == "invalid_argument", (hostile, out)
        assert "node" in out["error"]["message"]
    # a path that the node cannot run is refused by the node's own check, before acceptance
    rc, out = cli(
        "spawn", "a", "--script", str(tmp_path / "missing.json"), "--node", "n1",
        session=session, check=False,
    )  # fmt: skip
    assert rc == 2 and out["error"]["code"] == "invalid_argument", out
    rc, out = cli(
        "spawn", "a", "--script", str(script), "--node", "n1", "--worktree",
        session=session, check=False,
    )  # fmt: skip
    assert rc == 2 and out["error"]["code"] == "invalid_argument", out
    assert "worktree" in out["error"]["message"]
    assert rows(tmp_path) == {}


def test_node_on_a_session_over_the_file_mailbox_is_refused(tmp_path: Path) -> None:
    serve = serve_session(tmp_path, None)
    try:
        script = tmp_path / "wait.json"
        script.write_text(WAIT_ANY)
        rc, out = cli(
            "spawn", "a", "--script", str(script), "--node", "n1",
            session=tmp_path / "session", check=False,
        )  # fmt: skip
        assert rc == 2 and out["error"]["code"] == "invalid_argument", out
        assert "node" in out["error"]["message"] and "NATS" in out["error"]["message"]
        assert rows(tmp_path) == {}
    finally:
        serve.stop()


@pytest.mark.parametrize("name", ["any", "N1", "n1.x", "*", ">", "", "a b", "x" * 64, "n1\n"])
def test_a_node_with_a_hostile_name_refuses_to_start(
    nats_server: NatsServer, tmp_path: Path, name: str
) -> None:
    node = Node(nats_server.url, name, tmp_path / "host")
    node.proc.communicate(timeout=60)
    assert node.ready is None and node.proc.returncode == 2
    error = node.first["error"]
    assert error["code"] == "invalid_argument" and "--name" in error["message"]
    assert not (tmp_path / "host").exists()


def test_a_second_node_with_a_live_nodes_name_refuses_to_start(
    nats_url: str, start_node: Any, tmp_path: Path
) -> None:
    start_node("n1")
    again = Node(nats_url, "n1", tmp_path / "other")
    again.proc.communicate(timeout=60)
    assert again.ready is None and again.proc.returncode == 2
    assert "already live" in again.first["error"]["message"]


@pytest.mark.parametrize("transport", ["http://127.0.0.1:4222", "nats://u:p@127.0.0.1:4222", ""])
def test_a_node_with_a_hostile_transport_refuses_to_start(tmp_path: Path, transport: str) -> None:
    node = Node(transport, "n1", tmp_path / "host")
    node.proc.communicate(timeout=60)
    assert node.ready is None and node.proc.returncode == 2
    assert node.first["error"]["code"] == "invalid_argument"


def test_the_python_api_refuses_a_node_without_nats_and_the_tool_publishes_the_bound(
    tmp_path: Path,
) -> None:
    from actors.session.supervisor import Supervisor
    from protocol.core.errors import InvalidArgument
    from protocol.core.limits import MAX_NODE_NAME_CHARS, NODE_NAME_PATTERN
    from protocol.ops.tools import parent_tools

    script = tmp_path / "wait.json"
    script.write_text(WAIT_ANY)
    sup = Supervisor(tmp_path / "session")
    try:
        with pytest.raises(InvalidArgument, match="node"):
            sup.call("spawn", {"name": "a", "script": str(script), "node": "n1"})
        with pytest.raises(InvalidArgument, match="node"):
            sup.session.spawn("a", script=str(script), node="n1")
        with pytest.raises(InvalidArgument, match="node"):
            sup.call("spawn", {"name": "a", "script": str(script), "node": "n1.>"})
        assert sup.session.status().agents == ()
    finally:
        sup.shutdown(keep=False)
    (spawn,) = [t for t in parent_tools() if t.name == "shepherd_spawn"]
    node = spawn.parameters["properties"]["node"]
    assert (node["maxLength"], node["pattern"]) == (MAX_NODE_NAME_CHARS, NODE_NAME_PATTERN)


def test_a_node_whose_servers_do_not_answer_says_so_within_its_bound(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    node = Node(f"nats://127.0.0.1:{port}", "n1", tmp_path / "host")
    _, err = node.proc.communicate(timeout=90)
    assert node.ready is None and node.proc.returncode == 2, err
    assert node.first["error"]["code"] == "session_unavailable"
    assert f"127.0.0.1:{port}" in node.first["error"]["message"]


def test_hostile_requests_on_a_nodes_subjects_get_typed_errors_and_start_nothing(
    nats_url: str, start_node: Any, tmp_path: Path
) -> None:
    """What any client of the servers may send a node: malformed, for another session's or
    agent's environment, with ids that would be paths, a stop of what it does not run."""
    import asyncio

    import msgspec

    from protocol.wire import nodes

    node = start_node("n1")
    sid, aid = "shepherd-session-" + "a" * 16, "shepherd-agent-" + "b" * 16
    env = {"SHEPHERD_SESSION_ID": sid, "SHEPHERD_AGENT_ID": aid}
    spawn = nodes.node_subject("n1", "spawn")
    stop = nodes.node_subject("n1", "stop")
    check = nodes.node_subject("n1", "check")
    requests = [
        (spawn, b"not json"),
        (spawn, b"[]"),
        (spawn, b'{"session_id": 1}'),
        (spawn, b"{" * 10_000),
        (spawn, msgspec.json.encode({"session_id": "../../x", "agent_id": aid, "env": env})),
        (spawn, msgspec.json.encode({"session_id": sid, "agent_id": "../y", "env": env})),
        (spawn, msgspec.json.encode({"session_id": sid, "agent_id": aid, "env": {}})),
        (
            spawn,
            msgspec.json.encode(
                {"session_id": sid, "agent_id": aid, "env": {**env, "SHEPHERD_AGENT_ID": "x"}}
            ),
        ),
        (stop, msgspec.json.encode({"session_id": sid, "agent_id": aid})),
        (stop, msgspec.json.encode({"session_id": sid, "agent_id": aid, "how": "explode"})),
        (check, msgspec.json.encode({"adapter": "nope"})),
        (check, msgspec.json.encode({"adapter": "scripted", "options": {"script": "/no/such"}})),
    ]

    async def ask() -> list[nodes.NodeReply]:
        import nats

        nc = await nats.connect(nats_url)
        try:
            out = []
            for subject, data in requests:
                msg = await nc.request(subject, data, timeout=30)
                out.append(msgspec.json.decode(msg.data, type=nodes.NodeReply))
            return out
        finally:
            await nc.close()

    replies = asyncio.run(ask())
    for (subject, data), reply in zip(requests, replies, strict=True):
        assert reply.error is not None, (subject, data[:80])
        assert reply.error.code in ("invalid_argument", "invalid_handle"), reply
    assert node.proc.poll() is None  # still serving
    assert not any(node.root.iterdir()) and session_pids(sid) == []
