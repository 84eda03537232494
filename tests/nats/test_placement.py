"""The parent's launcher for agents on nodes, in this process against a real `nats-server`:
what it concludes from beats and from silence (the processes: tests/nats/test_node.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.nats.placement import NodeLauncher, RemoteAgent
from actors.nats.server import NatsServer
from actors.runtime.clock import SystemClock
from actors.session.agent import AgentSpec
from protocol import nodes
from protocol.settings import Settings

SESSION = "shepherd-session-" + "c" * 16


@pytest.fixture
def launcher(tmp_path: Path, nats_server: NatsServer) -> Iterator[NodeLauncher]:
    made = NodeLauncher(
        session_dir=tmp_path / "session",
        session_id=SESSION,
        mailbox_root=nats_server.url,
        ensure_inbox=lambda _inbox: None,
        register=lambda _spec: None,
        clock=SystemClock(),
        settings=Settings(node_lost_s=5.0),
    )
    try:
        yield made
    finally:
        made.close()


def _placed(launcher: NodeLauncher, agent: str, exits: list[int]) -> RemoteAgent:
    spec = AgentSpec(agent_id=agent, name=agent, session_id=SESSION, capability="x", adapter="c")
    handle = RemoteAgent(launcher, spec, "n1", exits.append)
    handle.started(nodes.NodeReply(pid=1, boot="b1", seq=3))
    launcher._remote[agent] = handle
    return handle


def test_silence_past_the_bound_loses_the_node_and_its_agents(launcher: NodeLauncher) -> None:
    exits: list[int] = []
    handle = _placed(launcher, "shepherd-agent-" + "1" * 16, exits)
    launcher._heard_from(nodes.Beat(name="n1", boot="b1", seq=4, agents=(handle.agent_id,)))
    now = time.monotonic()
    launcher.check_lost(now + 4.0)
    assert exits == []
    launcher.check_lost(now + 6.0)
    assert exits == [-1] and handle.exit_reason is not None
    assert handle.exit_reason.startswith("node n1 lost")


def test_a_parent_cut_off_from_the_servers_loses_no_node(launcher: NodeLauncher) -> None:
    exits: list[int] = []
    handle = _placed(launcher, "shepherd-agent-" + "2" * 16, exits)
    launcher._heard_from(nodes.Beat(name="n1", boot="b1", seq=4, agents=(handle.agent_id,)))
    now = time.monotonic()
    launcher.check_lost(now + 60.0, connected=False)  # a minute without servers
    launcher.check_lost(now + 61.0)  # back: the node's silence counts from now
    assert exits == []
    launcher.check_lost(now + 67.0)  # and is then silent past the bound
    assert exits == [-1]


def test_beats_end_an_agent_a_restarted_node_or_a_later_beat_no_longer_lists(
    launcher: NodeLauncher,
) -> None:
    exits: list[int] = []
    one = _placed(launcher, "shepherd-agent-" + "3" * 16, exits)
    two = _placed(launcher, "shepherd-agent-" + "4" * 16, exits)
    launcher._heard_from(nodes.Beat(name="n1", boot="b1", seq=3, agents=()))  # not yet
    assert exits == []
    launcher._heard_from(nodes.Beat(name="n1", boot="b1", seq=4, agents=(two.agent_id,)))
    assert exits == [-1] and one.exit_reason == "node n1 no longer runs it"
    launcher._heard_from(nodes.Beat(name="n2", boot="z", seq=9, agents=()))  # another node
    launcher._heard_from(nodes.Beat(name="n1", boot="b2", seq=1, agents=(two.agent_id,)))
    assert exits == [-1, -1] and two.exit_reason == "node n1 restarted"
