"""What an agent sends is never lost to a leader election: over a cluster of three with
``--journal nats``, the session stream's leader is SIGKILLed while the agents' ``done``s are in
flight. Real ``serve``, real bridges of scripted agents (their ``done`` goes out through the
bridge's outbox, as any agent's does), real servers. Every task completes, and each completion
is notified exactly once."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from actors.nats.server import NatsServer
from actors.nats.transport import stream_name
from tests.nats.test_journal_serve import _completed, _started
from tests.nats.test_serve import _notifications
from tests.processes.conftest import Serve, cli

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

AGENTS = 3
ROUNDS = 20  # AGENTS x ROUNDS = 60 tasks
KILL_AT_ROUND = 6
#: a worker that says done a moment after it gets a task, ROUNDS times: in the round whose
#: delegations are followed at once by the leader's SIGKILL, its done is sent during the election
WORKER = {
    "steps": [
        {
            "repeat": {
                "times": ROUNDS,
                "steps": [
                    {"await": "task"},
                    {"sleep": 0.5},
                    {"done": {"status": "completed", "summary": "did {last}"}},
                ],
            }
        },
        {"await": "any"},
    ]
}


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
        script = tmp_path / "worker.json"
        script.write_text(json.dumps(WORKER))
        names = [f"w{i}" for i in range(AGENTS)]
        for name in names:
            cli("spawn", name, "--script", str(script), session=session)
        tasks: list[str] = []
        already: list[str] = []  # settled before its watch: in the watch's answer, never notified
        victim = None
        for round_ in range(ROUNDS):
            ids = [
                cli("delegate", name, f"round {round_}", session=session)[1]["task_id"]
                for name in names
            ]
            if round_ == KILL_AT_ROUND:  # the agents are about to say done
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
