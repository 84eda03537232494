"""`shepherd node` end to end: a real `nats-server`, a real `serve --transport`, real `shepherd
node` processes, each with a directory of its own standing for a host, and real bridges
started there. Nothing sleeps: tests wait on output lines, notifications, process exits and
CLI round trips."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.nats.server import NatsServer
from tests.nats.test_serve import AGENT, _read_until
from tests.processes.conftest import DIE_WITH_PYTEST, Serve, cli
from tests.reliability.live import session_pids, wait_gone

pytestmark = pytest.mark.processes

WAIT_ANY = json.dumps({"steps": [{"await": "any"}]})


class Node:
    """A `shepherd node` process (in its own process group, as on a host of its own)."""

    def __init__(self, url: str, name: str, root: Path, *extra: str) -> None:
        self.name, self.root = name, root
        argv = ["node", "--transport", url, "--name", name, "--dir", str(root), "--json", *extra]
        self.proc = subprocess.Popen(
            [*DIE_WITH_PYTEST, sys.executable, "-m", "actors.surfaces.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        # the ready line, or the error when it refused to start
        self.first: dict[str, Any] = json.loads(self.proc.stdout.readline() or "{}")
        self.ready: dict[str, Any] | None = self.first.get("node")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.communicate(timeout=30)  # reads the rest and closes the pipes
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate(timeout=10)


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


@pytest.fixture
def start_node(nats_server: NatsServer, tmp_path: Path) -> Iterator[Any]:
    started: list[Node] = []

    def start(name: str) -> Node:
        node = Node(nats_server.url, name, tmp_path / f"host-{name}")
        assert node.ready is not None, node.proc.communicate(timeout=30)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


def _settings(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config" / "shepherd" / "config.toml"  # XDG_CONFIG_HOME (isolated_state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _serve(tmp_path: Path, nats_server: NatsServer | None) -> Serve:
    extra = ("--transport", nats_server.url) if nats_server is not None else ()
    server = Serve(tmp_path / "session", dict(os.environ), *extra)
    assert server.wait_for(lambda lines: any("session" in x for x in lines))
    return server


@pytest.fixture
def serve(tmp_path: Path, nats_server: NatsServer) -> Iterator[Serve]:
    server = _serve(tmp_path, nats_server)
    try:
        yield server
    finally:
        server.stop()


def _spawn_command(tmp_path: Path, name: str, node: str) -> dict[str, Any]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    cmd = f"NAME={name} {shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    session = tmp_path / "session"
    _, spawned = cli(
        "spawn", name, "--adapter", "command", "--cmd", cmd, "--node", node, session=session
    )
    return spawned  # type: ignore[no-any-return]


def _spawn_waiting(tmp_path: Path, name: str, node: str) -> dict[str, Any]:
    script = tmp_path / "wait.json"
    script.write_text(WAIT_ANY)
    _, spawned = cli(
        "spawn", name, "--script", str(script), "--node", node, session=tmp_path / "session"
    )
    return spawned  # type: ignore[no-any-return]


def _rows(tmp_path: Path) -> dict[str, dict[str, Any]]:
    _, status = cli("status", session=tmp_path / "session")
    return {a["name"]: a for a in status["agents"]}


def _failed_with(serve: Serve, task_id: str, words: str) -> Any:
    def found(lines: list[dict[str, Any]]) -> bool:
        return any(
            r["task_id"] == task_id and r["status"] == "failed" and words in (r["error"] or "")
            for x in lines
            if x.get("kind") == "task_completion"
            for r in x["results"]
        )

    return found


def test_agents_on_two_nodes_run_the_canonical_flow_and_status_shows_their_node(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    sid = json.loads((session / "session.json").read_text())["session_id"]
    one, two = start_node("n1"), start_node("n2")
    alpha = _spawn_command(tmp_path, "alpha", "n1")
    beta = _spawn_command(tmp_path, "beta", "n2")
    _, t_alpha = cli("delegate", "alpha", "TELL-BETA MARK-DONE", session=session)
    _, t_beta = cli("delegate", "beta", "MARK-DONE", session=session)
    ids = [t_alpha["task_id"], t_beta["task_id"]]
    _, waited = cli("wait", *ids, "--timeout", "90", session=session)
    results = {r["agent_name"]: r for r in waited["completed"]}
    assert waited["pending"] == [] and not waited["timed_out"], waited
    assert (results["alpha"]["text"], results["beta"]["text"]) == ("done by alpha", "done by beta")
    # alpha's message crossed from one node to the other, and reached the parent
    assert any("hello beta from alpha" in x for x in _read_until(session, "beta", "hello beta"))
    assert serve.wait_for(
        lambda lines: any(x.get("content") == "progress from alpha" for x in lines)
    )

    rows = _rows(tmp_path)
    assert (rows["alpha"]["node"], rows["beta"]["node"]) == ("n1", "n2")
    shown = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.entry", "status", "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "@n1" in shown and "@n2" in shown

    # the child's private files are the node's, on its host: none in the parent's directory
    for node, agent in ((one, alpha), (two, beta)):
        agent_dir = node.root / sid / "agents" / agent["agent_id"]
        assert stat.S_IMODE((agent_dir / "output.log").stat().st_mode) == 0o600
        for made in (node.root / sid, agent_dir.parent, agent_dir):
            assert stat.S_IMODE(made.stat().st_mode) == 0o700
        assert not (session / "agents" / agent["agent_id"]).exists()

    # a close reaches the node, which stops the bridge and reports its exit (not a lost node)
    cli("close", "alpha", session=session)
    assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    assert serve.wait_story("alpha", "exited")
    row = _rows(tmp_path)["alpha"]
    assert row["process_state"] == "exited" and row["exit_code"] != -1, row
    # a shutdown closes the agents on nodes too
    rc, _ = cli("shutdown", session=session)
    assert rc == 0 and serve.proc.wait(timeout=60) == 0
    assert wait_gone(lambda: session_pids(sid), timeout=60)


def test_node_any_places_on_the_least_loaded_live_node(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    start_node("n1")
    start_node("n2")
    placed = {}
    for name, node in (("a", "n1"), ("b", "any"), ("c", "any"), ("d", "any")):
        _spawn_waiting(tmp_path, name, node)
        placed[name] = _rows(tmp_path)[name]["node"]
    # b: n2 has none; c: one each, the first name; d: n1 has two
    assert placed == {"a": "n1", "b": "n2", "c": "n1", "d": "n2"}


def test_a_node_killed_fails_its_running_task_with_a_reason_naming_it(
    nats_server: NatsServer, start_node: Any, tmp_path: Path
) -> None:
    _settings(tmp_path, "node_lost_s = 3\n")
    serve = _serve(tmp_path, nats_server)
    try:
        session = tmp_path / "session"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        node = start_node("n1")
        alpha = _spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")

        node.proc.send_signal(signal.SIGKILL)
        assert serve.wait_for(_failed_with(serve, task["task_id"], "node n1 lost"), timeout=120)
        row = _rows(tmp_path)["alpha"]
        assert row["process_state"] == "exited" and row["node"] == "n1"
        # the bridge saw its node die and stopped; nothing of the agent is left running
        assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    finally:
        serve.stop()


def test_a_node_restarted_under_its_name_ends_what_it_ran_before(
    nats_server: NatsServer, start_node: Any, tmp_path: Path
) -> None:
    _settings(tmp_path, "node_lost_s = 600\n")  # the restart, not the silence, must tell it
    serve = _serve(tmp_path, nats_server)
    try:
        session = tmp_path / "session"
        node = start_node("n1")
        _spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=30)
        start_node("n1")
        assert serve.wait_for(_failed_with(serve, task["task_id"], "node n1 restarted"))
    finally:
        serve.stop()


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
    assert _rows(tmp_path) == {}


def test_node_on_a_session_over_the_file_mailbox_is_refused(tmp_path: Path) -> None:
    serve = _serve(tmp_path, None)
    try:
        script = tmp_path / "wait.json"
        script.write_text(WAIT_ANY)
        rc, out = cli(
            "spawn", "a", "--script", str(script), "--node", "n1",
            session=tmp_path / "session", check=False,
        )  # fmt: skip
        assert rc == 2 and out["error"]["code"] == "invalid_argument", out
        assert "node" in out["error"]["message"] and "NATS" in out["error"]["message"]
        assert _rows(tmp_path) == {}
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
    nats_server: NatsServer, start_node: Any, tmp_path: Path
) -> None:
    start_node("n1")
    again = Node(nats_server.url, "n1", tmp_path / "other")
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
    from protocol.errors import InvalidArgument
    from protocol.limits import MAX_NODE_NAME_CHARS, NODE_NAME_PATTERN
    from protocol.tools import parent_tools

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


def test_a_parent_killed_and_served_again_adopts_its_agent_on_a_node(
    nats_server: NatsServer, start_node: Any, tmp_path: Path
) -> None:
    _settings(tmp_path, "node_lost_s = 3\n")
    serve = _serve(tmp_path, nats_server)
    session = tmp_path / "session"
    node = start_node("n1")
    alpha = _spawn_command(tmp_path, "alpha", "n1")
    fifo = tmp_path / "release"
    _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
    cli("watch", task["task_id"], session=session)
    _read_until(session, "alpha", "BLOCKED")
    serve.stop(signal.SIGKILL)  # the node's agent does not depend on the parent's process

    second = Serve(session, dict(os.environ))
    try:
        assert second.wait_for(lambda lines: any("session" in x for x in lines))
        row = _rows(tmp_path)["alpha"]
        assert row["node"] == "n1" and row["process_state"] != "exited", row
        with open(fifo, "w"):
            pass  # its `done` reaches the new parent through the same servers
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        (result,) = waited["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha")
        # and it is the node's: its loss is the agent's (on one machine, the bridge could
        # also have been adopted as a local process, which would tell another reason)
        fifo.unlink()
        _, again = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", again["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")
        node.proc.send_signal(signal.SIGKILL)
        assert second.wait_for(_failed_with(second, again["task_id"], "node n1 lost"))
        sid = json.loads((session / "session.json").read_text())["session_id"]
        assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    finally:
        second.stop()
        serve.stop()


def test_a_node_stopped_with_sigterm_stops_its_agents_and_reports_their_exits(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    """Not a lost node: the node says each exit itself (the default bound, 10 s, is not waited)."""
    session = tmp_path / "session"
    sid = json.loads((session / "session.json").read_text())["session_id"]
    node = start_node("n1")
    alpha = _spawn_command(tmp_path, "alpha", "n1")
    fifo = tmp_path / "release"
    _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
    cli("watch", task["task_id"], session=session)
    _read_until(session, "alpha", "BLOCKED")
    node.proc.terminate()
    assert node.proc.wait(timeout=60) == 0
    assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    assert serve.wait_for(_failed_with(serve, task["task_id"], "agent process exited"))
    notes = [x for x in serve.lines if x.get("kind") == "task_completion"]
    assert not any("lost" in (r["error"] or "") for n in notes for r in n["results"])
    # the end of the bridge's log on the node came with its exit report
    lines = _read_until(session, "alpha", "its log ends")
    assert any("ready: pid" in line for line in lines), lines


def test_a_node_cut_off_and_back_has_the_agents_counted_as_gone_killed(
    nats_server: NatsServer, start_node: Any, tmp_path: Path
) -> None:
    _settings(tmp_path, "node_lost_s = 3\n")
    serve = _serve(tmp_path, nats_server)
    node = None
    try:
        session = tmp_path / "session"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        node = start_node("n1")
        alpha = _spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")
        node.proc.send_signal(signal.SIGSTOP)  # a partition: silent, its agent still there
        assert serve.wait_for(_failed_with(serve, task["task_id"], "node n1 lost"))
        assert session_pids(sid, alpha["agent_id"])
        node.proc.send_signal(signal.SIGCONT)  # back: its beat lists the agent, which goes
        assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    finally:
        if node is not None:
            node.proc.send_signal(signal.SIGCONT)
        serve.stop()


def test_hostile_requests_on_a_nodes_subjects_get_typed_errors_and_start_nothing(
    nats_server: NatsServer, start_node: Any, tmp_path: Path
) -> None:
    """What any client of the servers may send a node: malformed, for another session's or
    agent's environment, with ids that would be paths, a stop of what it does not run."""
    import asyncio

    import msgspec

    from protocol import nodes

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

        nc = await nats.connect(nats_server.url)
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
