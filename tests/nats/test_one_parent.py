"""One parent per session across hosts (`serve --journal nats`): a second supervisor of a live
session, started on another host (its own session directory and state), is refused at its start
with `session_busy` naming the live parent; several started at once on the session of a killed
parent, each on its own host: exactly one runs. Real `nats-server`s, real `serve` processes;
nothing sleeps."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.nats.conftest import OVER_A_CLUSTER
from tests.processes.conftest import START_S, Serve

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

#: serves started at once, round after round, each on a host of its own
ROUNDS = (2, 4)


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


def _host(root: Path) -> tuple[Path, dict[str, str]]:
    """A host of its own: its session directory and its state directory."""
    return root / "session", dict(os.environ, XDG_STATE_HOME=str(root / "state"))


def _started(server: Serve) -> bool:
    return server.wait_for(lambda lines: any("session" in x for x in lines), START_S)


def _refused_by(server: Serve, winner: Serve) -> None:
    """``server`` exited 2 with ``session_busy`` naming ``winner``, and no traceback."""
    assert server.proc.wait(timeout=120) == 2
    (line,) = server.lines
    assert line["error"]["code"] == "session_busy", line
    assert f"pid {winner.proc.pid} " in line["error"]["message"], line
    assert server.proc.stderr is not None
    err = server.proc.stderr.read().decode(errors="replace")
    assert "Traceback" not in err, err


@OVER_A_CLUSTER
def test_a_second_parent_on_another_host_is_refused_naming_the_live_one(
    nats_url: str, tmp_path: Path
) -> None:
    records = ("--transport", nats_url, "--journal", "nats")
    session_a, env_a = _host(tmp_path / "host-a")
    first = Serve(session_a, env_a, *records)
    servers: list[Serve] = [first]
    try:
        assert _started(first) and first.proc.poll() is None
        session_id = json.loads((session_a / "session.json").read_text())["session_id"]
        session_b, env_b = _host(tmp_path / "host-b")
        second = Serve(session_b, env_b, *records, "--resume", session_id)
        servers.append(second)
        assert not _started(second)
        _refused_by(second, first)
        (line,) = second.lines
        assert str(session_a) in line["error"]["message"]  # where the live one runs
        assert not (session_b / "session.json").exists()  # it read and wrote nothing

        # the live parent is killed: its claim is taken over, by exactly one of several
        first.stop(signal.SIGKILL)
        for round_, count in enumerate(ROUNDS):
            hosts = [_host(tmp_path / f"round-{round_}-host-{i}") for i in range(count)]
            racing = [Serve(d, env, *records, "--resume", session_id) for d, env in hosts]
            servers += racing
            ran = [s for s in racing if _started(s)]
            assert len(ran) == 1, f"{len(ran)} of {count} parents run the session at once"
            (winner,) = ran
            for loser in racing:
                if loser is not winner:
                    _refused_by(loser, winner)
            if round_ < len(ROUNDS) - 1:
                winner.stop(signal.SIGKILL)
                continue
            # stopped cleanly, the session is free for the next parent at once
            os.killpg(winner.proc.pid, signal.SIGTERM)
            assert winner.proc.wait(timeout=120) == 0
        after, env_after = _host(tmp_path / "host-after")
        again = Serve(after, env_after, *records, "--resume", session_id)
        servers.append(again)
        assert _started(again) and again.proc.poll() is None
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize("count", [2, 4])
def test_nodes_started_at_once_on_one_directory_one_runs_the_others_are_refused(
    nats_url: str, tmp_path: Path, count: int
) -> None:
    """`shepherd node` holds its directory as `serve` holds a session's: several started at once
    under one name on one host (so on one directory), exactly one runs; the others exit 2
    naming the live one's pid, without a traceback."""
    from tests.nats.nodes import Node

    root = tmp_path / "node-files"
    nodes = [Node(nats_url, "n1", root, read=False) for _ in range(count)]  # all at once
    try:
        for node in nodes:
            node.read_first()
        ready = [n for n in nodes if n.ready is not None]
        assert len(ready) == 1, [n.first for n in nodes]
        (live,) = ready
        for node in nodes:
            if node is live:
                continue
            assert node.proc.wait(timeout=60) == 2
            assert node.first["error"]["code"] == "invalid_argument", node.first
            assert f"pid {live.proc.pid})" in node.first["error"]["message"], node.first
            err = node.stop()
            assert "Traceback" not in err, err
    finally:
        errs = [node.stop() for node in nodes]
    assert live.proc.returncode == 0 and "Traceback" not in errs[nodes.index(live)]
