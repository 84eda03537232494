"""What a child knows about itself: the ``SHEPHERD_*`` environment the parent's launcher
set (:data:`ENV_VARS`), parsed into a :class:`ChildEnv`, and the validator that guards an
inbox of this child.

Rules:
- Identity comes only from this environment: a missing or malformed variable is named in
  the error (``session_unavailable`` / ``invalid_argument``), never guessed.
- An inbox of this child accepts only what the parent wrote for it: this session, this
  target, this child's capability (constant-time compare). Parent-only kinds (task, control,
  notice, ack) must come from ``shepherd``; a message or reply keeps its original author as
  sender (the broker forwards it unchanged but stamps the *recipient's* capability, which
  only the parent knows). The mailbox quarantines anything else with the reason.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from protocol.core.errors import (
    ForbiddenSender,
    InvalidArgument,
    InvalidEnvelope,
    SessionUnavailable,
)
from protocol.core.ids import PARENT_ID, IdKind, kind_of
from protocol.core.transport_url import TlsFiles
from protocol.records.settings import Settings
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    TaskEnvelope,
)

if TYPE_CHECKING:
    from actors.child.scripted import AgentIdentity
    from actors.transports.nats.auth import NatsLogin
    from actors.transports.wire import SessionTransport

__all__ = [
    "ENV_NATS_CA",
    "ENV_NATS_CERT",
    "ENV_NATS_CREDS",
    "ENV_NATS_KEY",
    "ENV_NATS_TLS",
    "ENV_VARS",
    "FORWARDED_KINDS",
    "INBOX_KINDS",
    "ChildEnv",
    "child_env_from",
    "envelope_validator",
    "tls_environ",
]

#: The environment contract between the parent's launcher and this bridge.
ENV_SESSION = "SHEPHERD_SESSION"
ENV_SESSION_ID = "SHEPHERD_SESSION_ID"
ENV_MAILBOX = "SHEPHERD_MAILBOX"
ENV_AGENT_ID = "SHEPHERD_AGENT_ID"
ENV_AGENT_NAME = "SHEPHERD_AGENT_NAME"
ENV_CAPABILITY = "SHEPHERD_CAPABILITY"
ENV_PARENT_PID = "SHEPHERD_PARENT_PID"
ENV_ADAPTER = "SHEPHERD_ADAPTER"
ENV_AGENT_OPTIONS = "SHEPHERD_AGENT_OPTIONS"
#: the session's settings as JSON: the child's mailbox keeps the same limits as the parent's
ENV_SETTINGS = "SHEPHERD_SETTINGS"
#: the path of this child's own NATS credentials (0600, in its private directory), set only by
#: a session with ``--nats-auth``: the bridge and its commands connect as that user
ENV_NATS_CREDS = "SHEPHERD_NATS_CREDS"
#: the TLS files of the session's ``tls://`` servers (``serve --nats-ca``, ``--nats-cert``,
#: ``--nats-key``; on a node, the node's own): the bridge and its commands build their TLS
#: context from them
ENV_NATS_CA = "SHEPHERD_NATS_CA"
ENV_NATS_CERT = "SHEPHERD_NATS_CERT"
ENV_NATS_KEY = "SHEPHERD_NATS_KEY"
ENV_NATS_TLS = (ENV_NATS_CA, ENV_NATS_CERT, ENV_NATS_KEY)
ENV_VARS = (
    ENV_SESSION,
    ENV_SESSION_ID,
    ENV_MAILBOX,
    ENV_AGENT_ID,
    ENV_AGENT_NAME,
    ENV_CAPABILITY,
    ENV_PARENT_PID,
    ENV_ADAPTER,
    ENV_AGENT_OPTIONS,
    ENV_SETTINGS,
    ENV_NATS_CREDS,
    *ENV_NATS_TLS,
)


def tls_environ(files: TlsFiles | None) -> dict[str, str]:
    """The ``SHEPHERD_NATS_*`` variables for the TLS files ``files`` (those set)."""
    files = files or TlsFiles()
    named = zip(ENV_NATS_TLS, (files.ca, files.cert, files.key), strict=True)
    return {name: value for name, value in named if value is not None}


# Kinds the parent may put into an agent's inbox, and which of them may carry another sender.
INBOX_KINDS = (
    TaskEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    NoticeEnvelope,
    AckEnvelope,
    ControlEnvelope,
)
FORWARDED_KINDS = (MessageEnvelope, ReplyEnvelope)


class ChildEnv(msgspec.Struct, frozen=True, kw_only=True):
    """What the environment says about this child (see :data:`ENV_VARS`)."""

    session_id: str
    mailbox: str
    agent_id: str
    capability: str
    name: str = ""
    session_dir: str | None = None
    parent_pid: int | None = None
    adapter: str = "scripted"
    options: dict[str, Any] = {}
    settings: Settings = msgspec.field(default_factory=Settings)
    nats_creds: str | None = None
    nats_tls: TlsFiles | None = None

    def nats_login(self) -> NatsLogin | None:
        """Who this child is on the NATS servers (None: no credentials)."""
        if self.nats_creds is None:
            return None
        from actors.transports.nats.auth import NatsLogin

        return NatsLogin(self.nats_creds, owner=self.agent_id)

    def open_transport(self, settings: Settings | None = None, **options: Any) -> SessionTransport:
        """The session's transport as this child opens it (its mailbox, or NATS with this
        child's user and TLS files); ``options``: :func:`~actors.transports.wire.open_transport`'s
        (``validate``, ``on_reject``, ...). Imported at the call: help and usage errors never
        pay for it."""
        from actors.transports.wire import open_transport

        return open_transport(
            self.mailbox,
            self.session_id,
            settings or self.settings,
            login=self.nats_login(),
            tls=self.nats_tls,
            **options,
        )

    @property
    def identity(self) -> AgentIdentity:
        # imported here: `shepherd-child message|done` read this environment without needing
        # the scripted agent's machinery
        from actors.child.scripted import AgentIdentity

        return AgentIdentity(
            agent_id=self.agent_id,
            session_id=self.session_id,
            capability=self.capability,
            name=self.name,
        )


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise SessionUnavailable(
            f"{name} is not set: shepherd-child runs only inside an agent started by a "
            "Shepherd session"
        )
    return value


def child_env_from(environ: Mapping[str, str], *, bridge: bool) -> ChildEnv:
    """Parse the ``SHEPHERD_*`` variables; a missing or malformed one is named in the error.

    ``bridge=True`` (``shepherd-child run``) also needs the parent's pid; the adapter
    defaults to ``scripted`` and its options to ``{}``.
    """
    session_id = _required(environ, ENV_SESSION_ID)
    if kind_of(session_id) is not IdKind.SESSION:
        raise InvalidArgument(f"{ENV_SESSION_ID}={session_id!r:.80} is not a session id")
    agent_id = _required(environ, ENV_AGENT_ID)
    if kind_of(agent_id) is not IdKind.AGENT:
        raise InvalidArgument(f"{ENV_AGENT_ID}={agent_id!r:.80} is not an agent id")
    mailbox = _required(environ, ENV_MAILBOX)
    capability = _required(environ, ENV_CAPABILITY)
    parent_pid: int | None = None
    if bridge:
        raw_pid = _required(environ, ENV_PARENT_PID)
        try:
            parent_pid = int(raw_pid)
        except ValueError:
            raise InvalidArgument(f"{ENV_PARENT_PID}={raw_pid!r:.40} is not a pid") from None
        if parent_pid <= 1:
            raise InvalidArgument(f"{ENV_PARENT_PID}={parent_pid} is not a supervisor's pid")
    options: dict[str, Any] = {}
    raw_options = environ.get(ENV_AGENT_OPTIONS, "").strip()
    if raw_options:
        try:
            decoded = json.loads(raw_options)
        except ValueError as exc:
            raise InvalidArgument(f"{ENV_AGENT_OPTIONS} is not valid JSON: {exc}") from None
        if not isinstance(decoded, dict):
            raise InvalidArgument(f"{ENV_AGENT_OPTIONS} must be a JSON object")
        options = decoded
    settings = Settings()
    raw_settings = environ.get(ENV_SETTINGS, "").strip()
    if raw_settings:
        try:
            settings = msgspec.json.decode(raw_settings, type=Settings)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InvalidArgument(f"{ENV_SETTINGS} is not this version's settings: {exc}") from None
    return ChildEnv(
        session_id=session_id,
        mailbox=mailbox,
        agent_id=agent_id,
        capability=capability,
        name=environ.get(ENV_AGENT_NAME, "").strip(),
        session_dir=environ.get(ENV_SESSION) or None,
        parent_pid=parent_pid,
        adapter=environ.get(ENV_ADAPTER, "").strip() or "scripted",
        options=options,
        settings=settings,
        nats_creds=environ.get(ENV_NATS_CREDS, "").strip() or None,
        nats_tls=TlsFiles(
            ca=environ.get(ENV_NATS_CA, "").strip() or None,
            cert=environ.get(ENV_NATS_CERT, "").strip() or None,
            key=environ.get(ENV_NATS_KEY, "").strip() or None,
        ).given(),
    )


def envelope_validator(
    env: ChildEnv, *, kinds: tuple[type, ...] = INBOX_KINDS, forwarded: tuple[type, ...] = ()
) -> Callable[[str, AnyEnvelope], None]:
    """The mailbox validator for an inbox of this child (see the module rules).

    ``kinds`` are the envelope kinds accepted; those in ``forwarded`` may carry another
    author than ``shepherd`` (the parent routes them but keeps their sender)."""
    expected = env.capability.encode()

    def validate(inbox: str, envelope: AnyEnvelope) -> None:
        if envelope.session_id != env.session_id:
            raise ForbiddenSender(f"envelope belongs to session {envelope.session_id}")
        if not isinstance(envelope, kinds):
            kind = envelope.__struct_config__.tag
            raise InvalidEnvelope(f"an agent's inbox does not take {kind!r} envelopes")
        if envelope.sender_id != PARENT_ID and not isinstance(envelope, forwarded):
            raise ForbiddenSender(
                f"only {PARENT_ID!r} may send {envelope.__struct_config__.tag!r} envelopes "
                f"here, not {envelope.sender_id!r}"
            )
        if envelope.target_id != env.agent_id:
            raise ForbiddenSender(f"envelope is addressed to {envelope.target_id!r}, not us")
        if not hmac.compare_digest(envelope.capability.encode(), expected):
            raise ForbiddenSender("capability does not match this agent")

    return validate
