"""The session's transport as every process opens it: the file mailbox or NATS, chosen by what
the session recorded.

A session records where its envelopes go in one string, its *descriptor*: the mailbox
directory (the default), or ``nats://HOST:PORT[,HOST:PORT...]`` (``tls://`` for TLS;
``serve --transport``, :mod:`protocol.core.transport_url`). The supervisor writes it to
``session.json`` (``mailbox``: what a CLI client reads) and to every agent's
``SHEPHERD_MAILBOX`` (what the bridge and ``shepherd-child`` read). Every process opens it
through :func:`open_transport` and gets a :class:`SessionTransport`: what the supervisor, the
CLI client, the bridge and the child commands use, and nothing more.

Rules:
- Imports are made here, at the call, never at module top: a CLI that never opens a NATS
  transport never imports ``nats-py`` or :mod:`actors.transports.nats` (nor the mailbox until it
  opens one).
- The parent creates (``create=True``); every other process opens what exists and may create
  only its own one-shot reply inbox (:func:`open_reply_inbox`).
- Authentication stays the transport's: the owner's ``validate`` and ``on_reject`` mean the
  same on both (see :mod:`actors.transports.mailbox.drain`).
- Naming three or more servers makes the session's streams replicated on three (R3); one or
  two servers, on one (R1). Name every server of a cluster.
- ``login`` (NATS only): who this process is on the servers (``serve --nats-auth``,
  :mod:`actors.transports.nats.auth`); without it, no credentials. A mailbox takes none.
- ``tls`` (``tls://`` only): the session's TLS files (``serve --nats-ca``, ``--nats-cert``,
  ``--nats-key``, recorded in session.json and the agents' ``SHEPHERD_NATS_*``); without
  them, the system's trust store (:mod:`actors.transports.nats.tls`). Any other transport refuses
  them.
- A NATS server that does not answer within :data:`NATS_TIMEOUT_S` (twice that for the first
  connection) is ``session_unavailable`` naming the servers; nothing waits forever. The
  session's creator waits out an outage for at most :data:`NATS_OUTAGE_S` before it says so
  (its publishes, and its records' appends with ``--journal nats``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from actors.runtime.transport import Transport
from protocol.core.errors import InvalidArgument
from protocol.core.transport_url import TlsFiles, is_nats, is_tls, parse_transport

if TYPE_CHECKING:
    from actors.transports.mailbox.drain import RejectCallback, Validator
    from actors.transports.nats.auth import NatsLogin
    from protocol.records.settings import Settings

__all__ = [
    "CLUSTER_REPLICAS",
    "NATS_OUTAGE_S",
    "NATS_TIMEOUT_S",
    "ReplyBox",
    "SessionTransport",
    "open_reply_inbox",
    "open_transport",
    "transport_exists",
]

#: how long one request to the NATS servers may take (the first connection: twice this)
NATS_TIMEOUT_S = 5.0
#: how long the session's creator waits out an outage of its NATS servers on a publish (a
#: stream leader's election takes seconds on a cluster of three)
NATS_OUTAGE_S = 60.0
#: a session naming at least this many servers keeps its streams on this many of them (R3: one
#: server may die without losing an accepted envelope); with fewer, on one
CLUSTER_REPLICAS = 3


class SessionTransport(Transport, Protocol):
    """What the session's processes need of a transport (both the mailbox and NATS; the
    mailbox is also a :class:`~actors.runtime.transport.BatchTransport`)."""

    def has_inbox(self, inbox: str) -> bool: ...

    def ensure_inbox(self, inbox: str) -> object: ...

    def remove_inbox(self, inbox: str) -> None: ...

    def wake_mode(self, inbox: str) -> str | None: ...

    def wait_drained(self, timeout_s: float) -> bool: ...

    def set_aside(self, inbox: str, aside: Path) -> int: ...


class ReplyBox(Protocol):
    """A one-shot reply inbox: it exists until :meth:`remove` (which never raises)."""

    owner: str

    def remove(self) -> None: ...


def open_transport(
    descriptor: str,
    session_id: str,
    settings: Settings | None = None,
    *,
    create: bool = False,
    validate: Validator | None = None,
    on_reject: RejectCallback | None = None,
    on_wake_mode: Callable[[str, str], None] | None = None,
    login: NatsLogin | None = None,
    tls: TlsFiles | None = None,
) -> SessionTransport:
    """The transport ``descriptor`` names (see the module rules); raises the typed error."""
    if tls is not None and not is_tls(descriptor):
        raise InvalidArgument("TLS files (--nats-ca, --nats-cert) need a tls:// transport")
    if is_nats(descriptor):
        from actors.transports.nats.transport import NatsTransport

        servers = parse_transport(descriptor).server_urls
        return NatsTransport(
            servers,
            session_id,
            settings,
            replicas=CLUSTER_REPLICAS if len(servers) >= CLUSTER_REPLICAS else 1,
            request_timeout_s=NATS_TIMEOUT_S,
            create=create,
            validate=validate,
            on_reject=on_reject,
            # the parent waits out a failover; a child's or a CLI call's wait stays bounded
            outage_s=NATS_OUTAGE_S if create else 0.0,
            login=login,
            tls=tls,
        )
    if login is not None:
        raise InvalidArgument("NATS credentials (--nats-auth) need a nats:// transport")
    from actors.transports.mailbox.mailbox import Mailbox

    opener = Mailbox.create if create else Mailbox.open
    return opener(
        descriptor,
        session_id,
        settings,
        validate=validate,
        on_reject=on_reject,
        on_wake_mode=on_wake_mode,
    )


def open_reply_inbox(transport: SessionTransport, owner: str) -> ReplyBox:
    """Create ``owner``'s one-shot reply inbox (a message id) on ``transport``."""
    make = getattr(transport, "reply_inbox", None)  # a transport with inboxes of its own kind
    if callable(make):
        box: ReplyBox = make(owner)
        return box
    from actors.transports.mailbox.mailbox import Mailbox
    from actors.transports.mailbox.reply_inboxes import ReplyInbox

    assert isinstance(transport, Mailbox)
    return ReplyInbox(transport, owner)


def transport_exists(descriptor: str) -> bool:
    """Does the recorded transport still exist as far as this host can tell? A mailbox
    directory is removed at shutdown; NATS servers are not asked (a CLI listing sessions must
    not wait on the network): the supervisor's liveness says it."""
    return is_nats(descriptor) or os.path.isdir(descriptor)
