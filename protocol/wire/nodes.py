"""Agents placed on other hosts: what a session's parent and a ``shepherd node`` say to each
other over NATS (the node's process is :mod:`actors.nodes.node`, the parent's side
:mod:`actors.session.placement`).

A node is named by its operator (``shepherd node --name HOST``, a :data:`NodeName`); nodes
belong to the NATS servers, not to one session: any session on those servers may place agents
on any live node. On core NATS (not JetStream: nothing here must outlive the processes):

- ``shepherd.nodes.<name>.beat``: the node's heartbeat, every :data:`HEARTBEAT_S`, a
  :class:`Beat` (its boot id, a sequence number, the agents it runs). A node not heard from for
  the session's ``node_lost_s`` (a setting) is *lost*: its agents are gone.
- ``shepherd.nodes.<name>.check`` / ``.spawn`` / ``.stop``: requests to one node (request and
  reply); ``shepherd.nodes.<name>.info`` answers a :class:`Beat` at once (a parent that just
  started, or a second node claiming the name, learns of it without waiting for a beat).
- ``shepherd.nodes.ping``: every node answers with a beat of its own at once.
- ``shepherd.node-exits.<session>.<name>``: a node's :class:`ExitReport` for each bridge of
  that session that exited. A report lost on the way (the parent was disconnected) is made up
  for by the next beats: an agent the node no longer lists after its launch is gone.

Every subject a node publishes on names the node, so that with NATS credentials
(:mod:`actors.transports.nats.permissions`) a node may publish only its own beats and reports, and
the parent believes a beat or a report only from the subject of the node it names
(:func:`sent_by`): a node cannot speak for another. A spawn request carries the child's NATS
credentials when the session has an authority; its subject is one only that node's user may
read, and its ``repr`` leaves them out.

Rules (pure: what the parent decides from what it heard):
- ``--node any`` is the live node running the fewest agents (each node's last beat, with the
  agents this parent placed there since); ties go to the first name in order.
- A node heard from with another boot id than when it started an agent has restarted: that
  agent is gone (its status unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final, Literal

import msgspec

from protocol.core.errors import ErrorInfo
from protocol.core.limits import MAX_NATS_CREDS_CHARS, NodeName, RunningCap

__all__ = [
    "ANY_NODE",
    "EXIT_LOG_LINES",
    "HEARTBEAT_S",
    "MAX_NODE_AGENTS",
    "NODE_PING",
    "Beat",
    "CheckRequest",
    "ExitReport",
    "NodeReply",
    "SpawnRequest",
    "StopRequest",
    "beats_subject",
    "exit_subject",
    "exits_subject",
    "gone_from",
    "least_loaded",
    "lost_reason",
    "node_subject",
    "sent_by",
]

#: ``spawn --node any``: the least-loaded live node
ANY_NODE: Final = "any"
#: how often a node beats
HEARTBEAT_S: Final = 1.0
#: bridges one node runs at once, over every session (a spawn past it is ``limit_exceeded``);
#: it also bounds a beat (one agent id per bridge)
MAX_NODE_AGENTS: Final = 1000
#: lines of a bridge's log an exit report carries (the parent's ``read`` and exit reason)
EXIT_LOG_LINES: Final = 20
NODE_PING: Final = "shepherd.nodes.ping"

Verb = Literal["beat", "check", "spawn", "stop", "info"]


def node_subject(name: str, verb: Verb) -> str:
    return f"shepherd.nodes.{name}.{verb}"


def beats_subject() -> str:
    """Every node's heartbeat (a parent subscribes once)."""
    return "shepherd.nodes.*.beat"


def exit_subject(session_id: str, name: str) -> str:
    return f"shepherd.node-exits.{session_id}.{name}"


def exits_subject(session_id: str) -> str:
    """Every node's exit reports for a session (its parent subscribes once)."""
    return f"shepherd.node-exits.{session_id}.*"


def sent_by(subject: str, name: str) -> bool:
    """Is ``subject`` (a beat's or an exit report's) one that only node ``name`` may publish
    on? The name in a payload is believed only when its subject names the same node."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[:2] == ["shepherd", "nodes"] and parts[3] == "beat":
        return parts[2] == name
    if len(parts) == 4 and parts[:2] == ["shepherd", "node-exits"]:
        return parts[3] == name
    return False


class Beat(msgspec.Struct, frozen=True, kw_only=True):
    name: NodeName
    #: one per run of the node's process: a restarted node has another
    boot: str
    #: beats of this boot so far; a spawn's reply carries the one it was started at
    seq: int
    #: ids of the agents the node runs (bridges not yet exited), every session's
    agents: tuple[str, ...] = ()
    #: ``shepherd node --max-running N``: each session hands at most N tasks at once to the
    #: agents it placed here (its admission queues the rest); None: no cap of the node's
    max_running: RunningCap | None = None


class CheckRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Can the node start this agent (its adapter's checks, on the node's host)?"""

    adapter: str
    options: dict[str, object] = {}


class SpawnRequest(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    agent_id: str
    #: the bridge's ``SHEPHERD_*`` environment, as the parent's own launcher would give it
    #: (the node sets where its private files go and whose death stops it)
    env: dict[str, str]
    cwd: str | None = None
    #: the child's own NATS user (a ``.creds`` text, minted by the parent: the session has an
    #: authority), which the node writes 0600 in the agent's directory on its host
    nats_creds: Annotated[str, msgspec.Meta(max_length=MAX_NATS_CREDS_CHARS)] | None = None

    def __repr__(self) -> str:  # never the credentials, in a log or a traceback
        creds = "<hidden>" if self.nats_creds is not None else None
        return (
            f"SpawnRequest(session_id={self.session_id!r}, agent_id={self.agent_id!r}, "
            f"cwd={self.cwd!r}, nats_creds={creds})"
        )


class StopRequest(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    agent_id: str
    #: ``stop``: a moment to exit on its own, then SIGTERM, then SIGKILL (as a close does);
    #: ``kill``: SIGKILL at once
    how: Literal["stop", "kill"] = "stop"


class NodeReply(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a check, spawn or stop: done, or the typed error that refused it."""

    error: ErrorInfo | None = None
    pid: int | None = None
    boot: str = ""
    seq: int = 0


class ExitReport(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    agent_id: str
    node: str
    #: as a local launcher reports it: the status, or 128 + the signal's number
    code: int
    log_tail: tuple[str, ...] = ()


def least_loaded(loads: Mapping[str, int]) -> str | None:
    """The node with the fewest agents (ties: the first name); None when there is none."""
    if not loads:
        return None
    return min(loads, key=lambda name: (loads[name], name))


def gone_from(beat: Beat, agent_id: str, boot: str, seq: int) -> bool:
    """Does ``beat`` say the agent started at ``(boot, seq)`` no longer runs there?"""
    if beat.boot != boot:
        return True  # the node restarted: whatever it ran before went with it
    return beat.seq > seq and agent_id not in beat.agents


def lost_reason(name: str, silent_s: float) -> str:
    return f"node {name} lost: not heard from for {silent_s:.0f} s"
