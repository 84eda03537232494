"""What each NATS user of a session's authority may do (:mod:`actors.transports.nats.auth` signs
them): the permission sets, derived from the subjects the processes use (the inboxes:
:mod:`actors.transports.nats.transport`; the nodes: :mod:`protocol.wire.nodes`). Anything not named
is a permissions violation at the server.

A child (``S`` the session, ``A`` the agent, ``R`` its reply stream ``S_A``):

- publish: its parent's inbox subject ``shepherd.S.in.parent`` and its own quarantine subject;
  the JetStream API to look up the parent's and its own consumer, to pull from its own consumer
  and ack what it got; on its own reply stream ``R`` (where its one-shot reply inboxes are) to
  create, look up, pull from, ack and delete consumers and to purge it;
- subscribe: its own reply prefix ``_INBOX_A.>`` (publish acknowledgements and pulled messages
  come there; the client uses it as its inbox prefix).

A node ``N`` (``shepherd node --name N --nats-creds FILE``), which serves every session of the
account and never touches JetStream:

- subscribe: the requests addressed to it (``shepherd.nodes.N.{info,check,spawn,stop}``: a
  spawn carries the child's credentials, so no other node may read them), the ping every node
  answers, and its own reply prefix ``_INBOX_NODE_N.>`` (its one request: is another node
  live under its name?);
- publish: its own beats, its exit reports for any session (``shepherd.node-exits.*.N``), its
  own ``info`` subject (that question), and a reply to each request it received (the server's
  response permission: one message, to the reply subject of a request it was delivered).

So a node cannot publish into an inbox, read or manage a consumer or a stream, read another
node's requests, or speak on another node's subjects.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.core.limits import NodeName
from protocol.wire import nodes

__all__ = [
    "CHILD_USER",
    "NODE_USER",
    "check_node_name",
    "child_inbox_prefix",
    "child_permissions",
    "node_inbox_prefix",
    "node_permissions",
    "reply_stream",
]

#: the start of each user's name in its JWT (a node's name follows, or a child's agent id)
CHILD_USER: Final = "shepherd-child"
NODE_USER: Final = "shepherd-node"
#: how long a node may take to answer a request it got (the server's response permission;
#: nanoseconds, as the JWT says it): longer than any request's bound in the parent
_RESPONSE_TTL_NS: Final = 120 * 10**9


def check_node_name(name: str, option: str = "--name") -> str:
    """``name`` if it may name a node, else ``invalid_argument`` naming ``option``."""
    try:
        msgspec.convert(name, NodeName)
    except msgspec.ValidationError:
        raise InvalidArgument(
            f"{option}: {name[:80]!r} is not a node name (1-63 of a-z, 0-9 and '-', starting "
            "with a letter or digit)"
        ) from None
    if name == nodes.ANY_NODE:
        raise InvalidArgument(f"{option}: 'any' is not a node name (spawn --node any picks one)")
    return name


def reply_stream(session_id: str, agent_id: str) -> str:
    """The stream of ``agent_id``'s one-shot reply inboxes (its own, so that its rights on
    consumers can be limited to it: a consumer's API subject names only its stream)."""
    return f"{session_id}_{agent_id}"


def child_inbox_prefix(agent_id: str) -> str:
    return f"_INBOX_{agent_id}"


def node_inbox_prefix(name: str) -> str:
    """A node's reply prefix (upper-case ``NODE``: an agent id is lower-case, so no child's
    prefix is ever a node's)."""
    return f"_INBOX_NODE_{name}"


def child_permissions(session_id: str, agent_id: str, parent_inbox: str) -> dict[str, Any]:
    s, a, r = session_id, agent_id, reply_stream(session_id, agent_id)
    publish = [
        f"shepherd.{s}.in.{parent_inbox}",
        f"shepherd.{s}.quarantine.{a}",
        f"$JS.API.CONSUMER.INFO.{s}.{parent_inbox}",
        f"$JS.API.CONSUMER.INFO.{s}.{a}",
        f"$JS.API.CONSUMER.MSG.NEXT.{s}.{a}",
        f"$JS.ACK.{s}.{a}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{r}.*",
        f"$JS.API.CONSUMER.CREATE.{r}.>",
        f"$JS.API.CONSUMER.INFO.{r}.*",
        f"$JS.API.CONSUMER.MSG.NEXT.{r}.*",
        f"$JS.API.CONSUMER.DELETE.{r}.*",
        f"$JS.API.STREAM.PURGE.{r}",
        f"$JS.ACK.{r}.>",
    ]
    return {"pub": {"allow": publish}, "sub": {"allow": [f"{child_inbox_prefix(a)}.>"]}}


def node_permissions(name: str) -> dict[str, Any]:
    requests = [nodes.node_subject(name, verb) for verb in ("info", "check", "spawn", "stop")]
    publish = [
        nodes.node_subject(name, "beat"),
        nodes.exit_subject("*", name),
        nodes.node_subject(name, "info"),
    ]
    return {
        "pub": {"allow": publish},
        "sub": {"allow": [*requests, nodes.NODE_PING, f"{node_inbox_prefix(name)}.>"]},
        "resp": {"max": 1, "ttl": _RESPONSE_TTL_NS},
    }
