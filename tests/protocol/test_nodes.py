"""Agents placed on nodes, the pure part: node names and their bounds, ``spawn``'s ``node``
argument, the least-loaded choice, and when a beat says an agent is gone."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.calls import api
from protocol.core.errors import InvalidArgument
from protocol.core.limits import MAX_NATS_CREDS_CHARS, MAX_NODE_NAME_CHARS, NodeName
from protocol.ops import parent_op
from protocol.records.settings import Settings, apply_overrides
from protocol.wire import nodes

HOSTILE_NAMES = [
    "",
    "A",
    "Host-B",
    "-a",
    "a.b",
    "*",
    ">",
    "a*",
    "a>",
    "a b",
    "a\n",
    "a\tb",
    "a\x00",
    "../etc",
    "a/b",
    "hôte",
    "x" * (MAX_NODE_NAME_CHARS + 1),
    "x" * 100_000,
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_node_is_refused_by_spawn_naming_the_field(name: str) -> None:
    with pytest.raises(InvalidArgument, match="node"):
        parent_op("spawn").build({"name": "alpha", "script": "s.json", "node": name})


@pytest.mark.parametrize("name", ["a", "host-b", "n1", "0", "x" * MAX_NODE_NAME_CHARS, "any"])
def test_a_node_name_or_any_is_taken(name: str) -> None:
    args = parent_op("spawn").build({"name": "alpha", "script": "s.json", "node": name})
    assert isinstance(args, api.SpawnArgs) and args.node == name


def test_spawn_without_node_keeps_the_parent_host() -> None:
    args = parent_op("spawn").build({"name": "alpha", "script": "s.json"})
    assert isinstance(args, api.SpawnArgs) and args.node is None


@given(st.text(max_size=80))
def test_a_node_name_is_always_one_safe_subject_token(name: str) -> None:
    """Whatever passes the bound can go into a NATS subject as one token."""
    try:
        msgspec.convert(name, NodeName)
    except msgspec.ValidationError:
        return
    assert 1 <= len(name) <= MAX_NODE_NAME_CHARS
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert nodes.node_subject(name, "spawn").split(".") == ["shepherd", "nodes", name, "spawn"]


def test_the_least_loaded_node_and_ties_by_name() -> None:
    assert nodes.least_loaded({}) is None
    assert nodes.least_loaded({"b": 1, "a": 2}) == "b"
    assert nodes.least_loaded({"b": 1, "a": 1}) == "a"


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), st.integers(0, 50)))
def test_the_least_loaded_node_runs_no_more_than_any_other(loads: dict[str, int]) -> None:
    chosen = nodes.least_loaded(loads)
    if not loads:
        assert chosen is None
        return
    assert chosen is not None
    assert all(loads[chosen] <= load for load in loads.values())
    assert chosen == min(n for n, load in loads.items() if load == loads[chosen])


def _beat(boot: str, seq: int, *agents: str) -> nodes.Beat:
    return nodes.Beat(name="n1", boot=boot, seq=seq, agents=agents)


def test_a_beat_says_an_agent_is_gone_only_after_its_launch() -> None:
    # started at beat 5: beat 5 (sent before the start) may not list it yet
    assert not nodes.gone_from(_beat("b1", 5), "ag", "b1", 5)
    assert not nodes.gone_from(_beat("b1", 6, "ag"), "ag", "b1", 5)
    assert nodes.gone_from(_beat("b1", 6), "ag", "b1", 5)
    # a node that restarted runs nothing it ran before, whatever its sequence
    assert nodes.gone_from(_beat("b2", 1, "ag"), "ag", "b1", 5)


@given(st.integers(0, 1000), st.integers(0, 1000), st.booleans(), st.booleans())
def test_gone_from_is_the_restart_or_a_later_beat_without_it(
    seq: int, started: int, listed: bool, same_boot: bool
) -> None:
    beat = _beat("b1" if same_boot else "b2", seq, *(["ag"] if listed else []))
    expected = (not same_boot) or (seq > started and not listed)
    assert nodes.gone_from(beat, "ag", "b1", started) is expected


def test_the_lost_reason_names_the_node() -> None:
    assert "node host-b lost" in nodes.lost_reason("host-b", 10.2)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 0, 2.9, 3601, "10"])
def test_node_lost_s_out_of_bounds_is_a_warning_naming_it(value: object) -> None:
    settings, warnings = apply_overrides(Settings(), {"node_lost_s": value}, "config.toml")
    assert settings.node_lost_s == 10.0
    assert warnings and "node_lost_s" in warnings[0]


def test_node_lost_s_in_bounds_is_taken() -> None:
    settings, warnings = apply_overrides(Settings(), {"node_lost_s": 3}, "config.toml")
    assert settings.node_lost_s == 3.0 and not warnings


NAMES = st.from_regex(r"[a-z0-9][a-z0-9-]{0,8}", fullmatch=True)


@given(NAMES, NAMES, st.sampled_from(["beat", "exit"]))
def test_a_beat_or_an_exit_report_is_believed_only_from_its_own_nodes_subject(
    sender: str, claimed: str, kind: str
) -> None:
    """With credentials a node may publish only on subjects naming it: the name in the
    payload counts only when the subject names the same node."""
    subject = (
        nodes.node_subject(sender, "beat") if kind == "beat" else nodes.exit_subject("s1", sender)
    )
    assert nodes.sent_by(subject, claimed) == (sender == claimed)


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "shepherd.nodes.n1",
        "shepherd.nodes.n1.spawn",
        "shepherd.node-exits.s1",
        "x.nodes.n1.beat",
    ],
)
def test_no_other_subject_speaks_for_a_node(subject: str) -> None:
    assert not nodes.sent_by(subject, "n1")


def test_the_parent_subscribes_to_every_nodes_exit_reports_of_its_session_only() -> None:
    assert nodes.exits_subject("s1") == "shepherd.node-exits.s1.*"
    assert nodes.exit_subject("s1", "n1") == "shepherd.node-exits.s1.n1"


def test_a_spawn_request_carries_bounded_credentials_and_never_shows_them() -> None:
    creds = "-----BEGIN NATS USER JWT-----\nSECRETJWT\nSUSEEDSECRET"
    req = nodes.SpawnRequest(session_id="s", agent_id="a", env={}, nats_creds=creds)
    for shown in (repr(req), str(req), f"{req}", repr([req])):
        assert "SECRET" not in shown and "<hidden>" in shown
    data = msgspec.json.encode(req)
    assert msgspec.json.decode(data, type=nodes.SpawnRequest).nats_creds == creds
    too_long = msgspec.json.encode(
        msgspec.structs.replace(req, nats_creds="x" * (MAX_NATS_CREDS_CHARS + 1))
    )
    with pytest.raises(msgspec.ValidationError, match="nats_creds"):
        msgspec.json.decode(too_long, type=nodes.SpawnRequest)
