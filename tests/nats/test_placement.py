"""The parent's launcher for agents on nodes, in this process against a real `nats-server`:
what it concludes from beats and from silence (the processes: tests/nats/test_node.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from actors.runtime.clock import SystemClock
from actors.session.agent import AgentSpec
from actors.session.placement import NodeLauncher, RemoteAgent
from actors.transports.nats.server import NatsServer
from protocol.records.settings import Settings
from protocol.wire import nodes

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


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (
            nodes.Beat(name="n2", boot="b", seq=1, agents=("shepherd-agent-" + "5" * 16,)),
            "InvalidHandle",
        ),
        (b"not a beat", "SessionUnavailable"),
    ],
)
def test_an_info_answer_in_another_nodes_name_or_malformed_is_not_believed(
    launcher: NodeLauncher, nats_server: NatsServer, answer: object, error: str
) -> None:
    """Whatever answers to n1's name speaks for n1 only: a beat naming n2 is refused (an
    adoption too), never recorded as n2's."""
    import msgspec

    from actors.transports.nats.loop import LoopThread
    from protocol.core.errors import ShepherdError

    data = answer if isinstance(answer, bytes) else msgspec.json.encode(answer)
    loop = LoopThread("fake-node")

    async def serve() -> object:
        import nats

        nc = await nats.connect(nats_server.url)

        async def reply(msg: object) -> None:
            await msg.respond(data)  # type: ignore[attr-defined]

        await nc.subscribe(nodes.node_subject("n1", "info"), cb=reply)
        await nc.flush()
        return nc

    nc = loop.run(serve(), 30)
    try:
        with pytest.raises(ShepherdError) as caught:
            # asked as the parent asks a node it has not heard yet: a server that says no one
            # answers to the name a moment after the node subscribed is asked again
            launcher._info_of_new("n1")
        assert type(caught.value).__name__ == error
        spec = AgentSpec(
            agent_id="shepherd-agent-" + "5" * 16,
            name="a",
            session_id=SESSION,
            capability="x",
            adapter="c",
            options={"node": "n1"},
        )
        with pytest.raises(ShepherdError):
            launcher.adopt(spec, 1, lambda _code: None)
        assert "n2" not in launcher._nodes and spec.agent_id not in launcher._remote
    finally:
        loop.run(nc.close(), 30)  # type: ignore[attr-defined]
        loop.stop()


def test_a_node_nothing_answers_for_yet_is_asked_again_then_named_as_not_live(
    launcher: NodeLauncher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that has just started may not be heard through this parent's server yet (a
    cluster tells its servers who listens where within moments): a spawn on it asks again;
    one that never answers is refused naming it, and why."""
    from actors.session import placement
    from protocol.core.errors import InvalidHandle

    asked: list[str] = []
    answer_after = 3

    def call(node: str, verb: str, data: bytes, timeout: float) -> bytes:
        asked.append(verb)
        if len(asked) < answer_after:
            raise placement._NobodyAnswers(f"node {node} is not live (nothing answers)")
        return msgspec.json.encode(nodes.Beat(name=node, boot="b", seq=1, agents=()))

    monkeypatch.setattr(launcher, "_call", call)
    monkeypatch.setattr(placement, "_ASK_AGAIN_S", 0.0)
    launcher._ask_info("n1")
    assert asked == ["info"] * answer_after and "n1" in launcher._live()

    asked.clear()
    answer_after = 10**9
    monkeypatch.setattr(placement, "_NEW_NODE_S", 0.0)
    with pytest.raises(InvalidHandle, match=r"no live node named 'n9' .*nothing answers"):
        launcher._ask_info("n9")
    assert asked == ["info"]


def test_a_placement_launched_while_loads_are_counted_is_counted_once(
    launcher: NodeLauncher,
) -> None:
    """A placement is reserved on its node until its launch registers the agent, which then
    ends the reservation. Counted between the two (the launch on another thread), the agent
    was counted twice: a node with one agent looked as loaded as one with two."""
    exits: list[int] = []
    launcher._heard_from(nodes.Beat(name="n1", boot="b1", seq=1, agents=()))
    launcher._heard_from(nodes.Beat(name="n2", boot="b2", seq=1, agents=()))
    for agent in ("a", "c"):  # two agents on n1, launched
        _placed(launcher, agent, exits)
    # b on n2: its launch registered it, and has not yet ended its reservation
    launcher._reserved["b"] = ("n2", time.monotonic())
    spec = AgentSpec(agent_id="b", name="b", session_id=SESSION, capability="x", adapter="c")
    launcher._remote["b"] = RemoteAgent(launcher, spec, "n2", exits.append)
    assert launcher._loads() == {"n1": 2, "n2": 1}
    assert nodes.least_loaded(launcher._loads()) == "n2"
    # reserved and not launched yet: counted once, by its reservation
    launcher._reserved["d"] = ("n2", time.monotonic())
    assert launcher._loads() == {"n1": 2, "n2": 2}
