"""A sandboxed agent in a session over NATS with one user per agent (``serve --nats-auth``):
without network in its sandbox, its ``shepherd-child`` calls still reach the parent (through
its bridge, outside, connected as the agent's own user), and its credentials are out of its
reach."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.transports.nats.server import NatsServer
from tests.nats.test_auth import auth_server, authority_dir
from tests.processes.conftest import Serve, cli

__all__ = ["auth_server", "authority_dir"]  # fixtures used here

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]


def test_a_sandboxed_agent_over_nats_reaches_the_parent_without_network_or_credentials(
    isolated_state: Path, auth_server: NatsServer, authority_dir: Path, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    serve = Serve(session, dict(os.environ), "--transport", auth_server.url,
                  "--nats-auth", str(authority_dir))  # fmt: skip
    try:
        assert serve.wait_for(lambda lines: any("session" in x for x in lines))
        work = tmp_path / "work"
        work.mkdir()
        creds = session / "agents"  # each agent's nats.creds is under here
        probe = (
            f"cat {creds}/*/nats.creds > /dev/null 2>&1; echo creds=$? > found.txt\n"
            f"shepherd-child message shepherd 'hello from the sandbox'\n"
            "shepherd-child done --status completed --summary 'over nats'\n"
        )
        (work / "probe.sh").write_text(probe)
        _, spawned = cli("spawn", "boxed", "--adapter", "command", "--cmd",
                         "bash probe.sh {message}", "--cwd", str(work), "--sandbox",
                         session=session)  # fmt: skip
        _, task = cli("delegate", "boxed", "probe", session=session)
        _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
        assert waited["pending"] == [] and not waited["timed_out"], waited
        result = waited["completed"][0]
        assert (result["status"], result["text"]) == ("completed", "over nats")
        assert (work / "found.txt").read_text().strip() != "creds=0"
        own = session / "agents" / spawned["agent_id"] / "nats.creds"
        assert "BEGIN NATS USER JWT" in own.read_text()  # it has a user: its bridge's
        assert serve.wait_for(
            lambda lines: any(x.get("content") == "hello from the sandbox" for x in lines)
        )
        _, status = cli("status", session=session)
        assert status["agents"][0]["sandbox"]["net"] is False
        rc, _ = cli("shutdown", session=session)
        assert rc == 0
    finally:
        serve.stop()
