"""The supervisor's side of its transport's life: which transport a session uses, opening it as
the session's creator, sweeping the reply inboxes of ended calls, and removing the session's
inboxes at shutdown - the file mailbox's directory, or the session's streams on NATS.

Rules:
- A new session uses ``--transport`` if given (checked: :mod:`protocol.core.transport_url`), else a
  mailbox directory. A resumed session keeps what it recorded in session.json; another
  ``--transport`` for it is ``invalid_argument`` (its agents and unread envelopes are there).
- ``--nats-auth DIR`` (:mod:`actors.transports.nats.auth`) needs NATS; a resumed session keeps the
  authority it recorded, and another one given for it is ``invalid_argument``. The parent and
  its shutdown's own connection log in as the account's parent user.
- ``--nats-ca FILE`` (and ``--nats-cert``/``--nats-key``: :mod:`actors.transports.nats.tls`) need
  ``tls://`` and are checked before anything is made; a resumed session keeps the files it
  recorded (checked again), and another one given for it is ``invalid_argument``. Every
  connection of the parent (its transport, its records, its nodes' channel, its shutdown's)
  uses them.
- At shutdown, once every agent has exited and the live callers read their answers, the
  session's inboxes are deleted: nothing is left to read them. On NATS that is the session's
  inbox and quarantine streams (their consumers go with them); a server that cannot be reached
  then keeps them, which is logged - nobody is left to tell.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from actors.runtime.clock import Clock
from actors.runtime.log import logger
from actors.runtime.transport import PARENT_INBOX
from actors.session.launcher import ProcessLauncher
from actors.transports.mailbox.drain import RejectCallback, Validator
from actors.transports.mailbox.reply_inboxes import ReplyInboxSweeper, unread_answers
from actors.transports.wire import SessionTransport, open_transport
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.core.transport_url import TlsFiles, is_nats, parse_transport
from protocol.records.settings import Settings

if TYPE_CHECKING:
    from actors.transports.nats.auth import Authority, NatsLogin
    from actors.transports.nats.transport import NatsTransport

__all__ = [
    "ParentTransport",
    "check_auth",
    "check_tls",
    "given_transport",
    "launcher_class",
    "load_authority",
    "resumed_auth",
    "resumed_tls",
    "resumed_transport",
]


def given_transport(transport: str | None, mailbox_root: Path | str | None) -> str | None:
    """The canonical ``--transport`` (None: a mailbox directory)."""
    if transport is None:
        return None
    if mailbox_root is not None:
        raise InvalidArgument("a session has a mailbox directory or NATS servers, not both")
    return parse_transport(transport).url


def launcher_class(descriptor: str) -> type[ProcessLauncher]:
    """Over NATS, a launcher that can also place agents on ``shepherd node``s (imported only
    then: a session on its file mailbox never loads NATS)."""
    if not is_nats(descriptor):
        return ProcessLauncher
    from actors.session.placement import NodeLauncher

    return NodeLauncher


def resumed_transport(session_dir: Path, recorded: str, given: str | None) -> str:
    if given is not None and given != recorded:
        raise InvalidArgument(
            f"{session_dir} runs over {recorded}; --transport cannot move it to {given}"
        )
    return recorded


def resumed_auth(recorded: str | None, given: str | None) -> str | None:
    if given is not None and (recorded is None or Path(given).absolute() != Path(recorded)):
        raise InvalidArgument(
            f"--nats-auth: this session runs with {recorded or 'no NATS credentials'}; "
            "that cannot change"
        )
    return recorded


def resumed_tls(recorded: TlsFiles | None, given: TlsFiles | None) -> TlsFiles | None:
    """The TLS files a restarted session keeps; another file named for it is refused."""
    kept = recorded or TlsFiles()
    mine = given or TlsFiles()
    for option, was, now in (
        ("--nats-ca", kept.ca, mine.ca),
        ("--nats-cert", kept.cert, mine.cert),
        ("--nats-key", kept.key, mine.key),
    ):
        if now is not None and (was is None or Path(now).absolute() != Path(was)):
            raise InvalidArgument(
                f"{option}: this session runs with {was or 'none'}; that cannot change"
            )
    return recorded


def check_tls(descriptor: str, files: TlsFiles | None) -> TlsFiles | None:
    """The TLS files checked against the transport (:func:`actors.transports.nats.tls.load_tls`):
    their absolute paths, or None."""
    if files is None or files.given() is None:
        return None
    from actors.transports.nats.tls import load_tls

    return load_tls(descriptor, files.ca, files.cert, files.key)


def check_auth(descriptor: str, nats_auth: str | None) -> str | None:
    if nats_auth is not None and not is_nats(descriptor):
        raise InvalidArgument("--nats-auth needs --transport nats:// or tls://HOST:PORT")
    return nats_auth


def load_authority(descriptor: str, nats_auth: str | None) -> Authority | None:
    """The session's NATS authority (:mod:`actors.transports.nats.auth`), checked, or None."""
    raw = check_auth(descriptor, nats_auth)
    if raw is None:
        return None
    from actors.transports.nats.auth import Authority

    return Authority.load(raw)


class ParentTransport:
    def __init__(
        self,
        descriptor: str,
        mailbox_root: Path,
        session_id: str,
        settings: Settings,
        *,
        validate: Validator,
        on_reject: RejectCallback,
        undo: Callable[[], object],
        authority: Authority | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        """Open the session's transport as its creator, with the parent's inbox; if that fails
        (a NATS server out of reach), ``undo`` stops what the supervisor had started."""
        self.nats = is_nats(descriptor)
        self._descriptor = descriptor
        self._session_id = session_id
        self._root = mailbox_root
        self._late: NatsTransport | None = None  # a connection for after the session closed
        self.tls = tls
        try:
            self.authority = authority
            #: what session.json records (absolute)
            self.nats_auth = str(authority.directory) if authority is not None else None
            self.transport: SessionTransport = open_transport(
                descriptor,
                session_id,
                settings,
                create=True,
                validate=validate,
                on_reject=on_reject,
                login=self._login(),
                tls=tls,
            )
        except BaseException:
            undo()
            raise
        try:
            self.transport.ensure_inbox(PARENT_INBOX)
        except BaseException:
            self.transport.close()
            undo()
            raise
        self._nats = cast("NatsTransport", self.transport) if self.nats else None

    def _login(self) -> NatsLogin | None:
        return self.authority.parent_login() if self.authority is not None else None

    def sweeper(
        self, clock: Clock, submit: Callable[[Callable[[], object]], object]
    ) -> ReplyInboxSweeper:
        """The periodic sweep of the reply inboxes of ended calls
        (:mod:`actors.transports.nats.replies` on NATS)."""
        sweep = self._nats.sweep_reply_inboxes if self._nats is not None else None
        return ReplyInboxSweeper(self._root, clock, submit, sweep=sweep)

    def unread_answers(self) -> int:
        """Reply inboxes holding an answer their live caller has not read yet."""
        if self._nats is None:
            return unread_answers(self._root / "inbox")
        with contextlib.suppress(ShepherdError):
            return self._after_close().unread_answers()
        return 0

    def _after_close(self) -> NatsTransport:
        """The session closed its transport with its actors: shutdown's last steps (waiting for
        unread answers, deleting the streams) get a connection of their own."""
        if self._late is None:
            opened = open_transport(
                self._descriptor, self._session_id, login=self._login(), tls=self.tls
            )
            self._late = cast("NatsTransport", opened)
        return self._late

    def remove(self) -> None:
        """Delete the session's inboxes (see the module rules)."""
        if self._nats is None:
            shutil.rmtree(self._root, ignore_errors=True)
            return
        try:
            self._after_close().destroy()
        except ShepherdError as exc:
            logger.warning("could not delete the session's NATS streams: {}", exc.message)
