"""What an agent sends is never lost to a leader election: over a cluster of three with
``--journal nats``, the session stream's leader is SIGKILLed while the agents' ``done``s are in
flight. Real ``serve``, real bridges of scripted agents (their ``done`` goes out through the
bridge's outbox, as any agent's does), real servers. Every task completes, and each completion
is notified exactly once.

Each agent waits at a gate of its own (a FIFO its ``run`` step reads one line from) between
its task and its ``done``: in the round of the kill, the test opens every gate (which returns
only once each agent is there, its task in hand), kills the leader, and only then lets them
say done: the ``done``s are sent during the election, whatever the machine's speed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.transports.nats.server import NatsServer
from actors.transports.nats.transport import stream_name
from tests.nats.test_journal_serve import _completed, _started
from tests.nats.test_serve import _notifications
from tests.processes.conftest import Serve, cli

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

AGENTS = 3
ROUNDS = 20  # AGENTS x ROUNDS = 60 tasks
KILL_AT_ROUND = 6
#: how long a gate waits for its agent to reach it
GATE_S = 120.0


def _worker(gate: Path) -> dict[str, object]:
    """A worker that, ROUNDS times, takes a task, waits at its gate, and says done."""
    return {
        "steps": [
            {
                "repeat": {
                    "times": ROUNDS,
                    "steps": [
                        {"await": "task"},
                        {"run": f"read line < {gate}"},
                        {"done": {"status": "completed", "summary": "did {last}"}},
                    ],
                }
            },
            {"await": "any"},
        ]
    }


def _open_gate(gate: Path) -> int:
    """The gate's write end, opened once its agent waits there (bounded)."""
    opened: list[int] = []
    opener = threading.Thread(target=lambda: opened.append(os.open(gate, os.O_WRONLY)))
    opener.start()
    opener.join(GATE_S)
    if not opened:
        with contextlib.suppress(OSError):  # the opener is let go: a reader of its own
            os.close(os.open(gate, os.O_RDONLY | os.O_NONBLOCK))
        opener.join(GATE_S)
        for fd in opened:
            os.close(fd)
        raise AssertionError(f"no agent reached {gate.name} within {GATE_S:g} s")
    return opened[0]


@contextlib.contextmanager
def _at_their_gates(gates: list[Path]) -> Iterator[None]:
    """Every agent waits at its gate inside the block; let go at its end."""
    fds: list[int] = []
    try:
        for gate in gates:
            fds.append(_open_gate(gate))
        yield
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.write(fd, b"go\n")
            os.close(fd)


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


def _leader(url: str, session_id: str) -> str:
    async def ask() -> str:
        import nats

        nc = await nats.connect(url)
        try:
            info = await nc.jetstream().stream_info(stream_name(session_id))
            assert info.cluster is not None and info.cluster.leader
            return str(info.cluster.leader)
        finally:
            await nc.close()

    return asyncio.run(ask())


def test_agents_dones_in_flight_survive_the_stream_leaders_sigkill(
    nats_cluster: list[NatsServer], tmp_path: Path
) -> None:
    servers = ",".join(s.url.removeprefix("nats://") for s in nats_cluster)
    session = tmp_path / "session"
    serve = _started(
        Serve(session, dict(os.environ), "--transport", f"nats://{servers}", "--journal", "nats")
    )
    try:
        session_id = json.loads((session / "session.json").read_text())["session_id"]
        names = [f"w{i}" for i in range(AGENTS)]
        gates = [tmp_path / f"gate-{name}" for name in names]
        for name, gate in zip(names, gates, strict=True):
            os.mkfifo(gate)
            script = tmp_path / f"{name}.json"
            script.write_text(json.dumps(_worker(gate)))
            cli("spawn", name, "--script", str(script), session=session)
        tasks: list[str] = []
        already: list[str] = []  # settled before its watch: in the watch's answer, never notified
        victim = None
        for round_ in range(ROUNDS):
            ids = [
                cli("delegate", name, f"round {round_}", session=session)[1]["task_id"]
                for name in names
            ]
            with _at_their_gates(gates):  # each has its task; none said done yet
                if round_ == KILL_AT_ROUND:
                    victim = _leader(nats_cluster[0].url, session_id)
                    next(s for s in nats_cluster if s.name == victim).kill()
            _, watched = cli("watch", *ids, session=session)
            already += [r["task_id"] for r in watched["completed"]]
            _, waited = cli("wait", *ids, "--timeout", "50", session=session)
            assert sorted(r["task_id"] for r in waited["completed"]) == sorted(ids), waited
            assert {r["status"] for r in waited["completed"]} == {"completed"}, waited
            tasks += ids
        assert victim is not None
    finally:
        serve.stop()
    shown = Counter(_completed(_notifications(session)))
    assert len(tasks) == AGENTS * ROUNDS
    # each completion reached the watcher exactly once: in the watch's answer, or notified
    assert {t: n for t, n in shown.items() if n != 1} == {}, "notified more than once"
    assert set(shown) | set(already) == set(tasks) and not set(shown) & set(already)
