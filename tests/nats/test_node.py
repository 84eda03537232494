"""`shepherd node` end to end: a real `nats-server`, a real `serve --transport`, real `shepherd
node` processes, each with a directory of its own standing for a host, and real bridges
started there. Nothing sleeps: tests wait on output lines, notifications, process exits and
CLI round trips (the refusals: test_node_refusals.py)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.nats.conftest import OVER_A_CLUSTER
from tests.nats.nodes import (
    _isolated,
    failed_with,
    rows,
    serve,
    serve_session,
    settings_file,
    spawn_command,
    spawn_waiting,
    start_node,
)
from tests.nats.test_serve import _read_until
from tests.processes.conftest import Serve, cli
from tests.reliability.live import session_pids, wait_gone

pytestmark = pytest.mark.processes

__all__ = ["_isolated", "serve", "start_node"]  # fixtures used here


@OVER_A_CLUSTER
def test_agents_on_two_nodes_run_the_canonical_flow_and_status_shows_their_node(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    sid = json.loads((session / "session.json").read_text())["session_id"]
    one, two = start_node("n1"), start_node("n2")
    alpha = spawn_command(tmp_path, "alpha", "n1")
    beta = spawn_command(tmp_path, "beta", "n2")
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

    placed = rows(tmp_path)
    assert (placed["alpha"]["node"], placed["beta"]["node"]) == ("n1", "n2")
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
    row = rows(tmp_path)["alpha"]
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
        spawn_waiting(tmp_path, name, node)
        placed[name] = rows(tmp_path)[name]["node"]
    # b: n2 has none; c: one each, the first name; d: n1 has two
    assert placed == {"a": "n1", "b": "n2", "c": "n1", "d": "n2"}


def test_spawn_many_places_each_name_on_a_node(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    """``spawn-many --node any``: each name placed as a spawn is (the least-loaded live node,
    counting the names placed before it in the call)."""
    start_node("n1")
    start_node("n2")
    script = tmp_path / "wait.json"
    script.write_text(json.dumps({"steps": [{"await": "any"}]}))
    session = tmp_path / "session"
    _, spawned = cli(
        "spawn-many", "a", "b", "--script", str(script), "--node", "any", session=session
    )
    assert spawned["errors"] == [] and all(spawned["agent_ids"]), spawned
    placed = rows(tmp_path)
    assert sorted(placed[name]["node"] for name in ("a", "b")) == ["n1", "n2"]


def test_a_node_killed_fails_its_running_task_with_a_reason_naming_it(
    nats_url: str, start_node: Any, tmp_path: Path
) -> None:
    settings_file(tmp_path, "node_lost_s = 3\n")
    serve = serve_session(tmp_path, nats_url)
    try:
        session = tmp_path / "session"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        node = start_node("n1")
        alpha = spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")

        node.proc.send_signal(signal.SIGKILL)
        assert serve.wait_for(failed_with(serve, task["task_id"], "node n1 lost"), timeout=120)
        row = rows(tmp_path)["alpha"]
        assert row["process_state"] == "exited" and row["node"] == "n1"
        # the bridge saw its node die and stopped; nothing of the agent is left running
        assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    finally:
        serve.stop()


def test_a_node_restarted_under_its_name_ends_what_it_ran_before(
    nats_url: str, start_node: Any, tmp_path: Path
) -> None:
    settings_file(tmp_path, "node_lost_s = 600\n")  # the restart, not the silence, must tell it
    serve = serve_session(tmp_path, nats_url)
    try:
        session = tmp_path / "session"
        node = start_node("n1")
        spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=30)
        start_node("n1")
        assert serve.wait_for(failed_with(serve, task["task_id"], "node n1 restarted"))
    finally:
        serve.stop()


def test_a_parent_killed_and_served_again_adopts_its_agent_on_a_node(
    nats_url: str, start_node: Any, tmp_path: Path
) -> None:
    settings_file(tmp_path, "node_lost_s = 3\n")
    serve = serve_session(tmp_path, nats_url)
    session = tmp_path / "session"
    node = start_node("n1")
    alpha = spawn_command(tmp_path, "alpha", "n1")
    fifo = tmp_path / "release"
    _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
    cli("watch", task["task_id"], session=session)
    _read_until(session, "alpha", "BLOCKED")
    serve.stop(signal.SIGKILL)  # the node's agent does not depend on the parent's process

    second = Serve(session, dict(os.environ))
    try:
        assert second.wait_for(lambda lines: any("session" in x for x in lines))
        row = rows(tmp_path)["alpha"]
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
        assert second.wait_for(failed_with(second, again["task_id"], "node n1 lost"))
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
    alpha = spawn_command(tmp_path, "alpha", "n1")
    fifo = tmp_path / "release"
    _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
    cli("watch", task["task_id"], session=session)
    _read_until(session, "alpha", "BLOCKED")
    node.proc.terminate()
    assert node.proc.wait(timeout=60) == 0
    assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    assert serve.wait_for(failed_with(serve, task["task_id"], "agent process exited"))
    notes = [x for x in serve.lines if x.get("kind") == "task_completion"]
    assert not any("lost" in (r["error"] or "") for n in notes for r in n["results"])
    # the end of the bridge's log on the node came with its exit report
    lines = _read_until(session, "alpha", "its log ends")
    assert any("ready: pid" in line for line in lines), lines


@OVER_A_CLUSTER
def test_a_node_cut_off_and_back_has_the_agents_counted_as_gone_killed(
    nats_url: str, start_node: Any, tmp_path: Path
) -> None:
    settings_file(tmp_path, "node_lost_s = 3\n")
    serve = serve_session(tmp_path, nats_url)
    node = None
    try:
        session = tmp_path / "session"
        sid = json.loads((session / "session.json").read_text())["session_id"]
        node = start_node("n1")
        alpha = spawn_command(tmp_path, "alpha", "n1")
        fifo = tmp_path / "release"
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo}", session=session)
        cli("watch", task["task_id"], session=session)
        _read_until(session, "alpha", "BLOCKED")
        node.proc.send_signal(signal.SIGSTOP)  # a partition: silent, its agent still there
        assert serve.wait_for(failed_with(serve, task["task_id"], "node n1 lost"))
        assert session_pids(sid, alpha["agent_id"])
        node.proc.send_signal(signal.SIGCONT)  # back: its beat lists the agent, which goes
        assert wait_gone(lambda: session_pids(sid, alpha["agent_id"]), timeout=60)
    finally:
        if node is not None:
            node.proc.send_signal(signal.SIGCONT)
        serve.stop()
