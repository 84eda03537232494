"""Which session a supervisor runs, and where: a new one, the one an existing session directory
holds (a restart on the same host), or one resumed from the NATS servers' records in a directory
of this host (``serve --resume SESSION_ID``, a restart on another host).

Rules:
- The directory is locked (the caller's ``lock``) before anything of it is read: a live
  supervisor in it is ``session_busy`` (:mod:`actors.records.session_lock`). An existing
  directory is resumed; a ``--resume`` id other than the one it holds is ``invalid_argument``.
- A resumed session keeps its recorded transport, records and NATS authority (asking for others
  is ``invalid_argument``: :func:`~actors.session.parent_transport.resumed_transport`,
  :func:`~actors.session.records.records_kind`,
  :func:`~actors.session.parent_transport.resumed_auth`). A session resumed from the servers
  on another host names its authority again (``--nats-auth``: this host's copy of it), and
  its TLS files (``--nats-ca``...).
- A session resumed from the servers gets a new client token on this host (the CLI of this
  host reads it from the new ``session.json``); its agents' capabilities come from its journal.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors.records.session_info import is_live, load_info, state_dir
from actors.session.parent_transport import (
    check_auth,
    check_tls,
    given_transport,
    resumed_auth,
    resumed_tls,
    resumed_transport,
)
from actors.session.records import records_kind, resumable_id
from actors.transports.mailbox.mailbox import default_runtime_dir
from protocol.core.errors import InvalidArgument, SessionBusy
from protocol.core.transport_url import TlsFiles

__all__ = ["Located", "locate"]


@dataclass(frozen=True)
class Located:
    session_id: str
    session_dir: Path
    transport: str
    mailbox_root: Path
    client_token: str
    #: the session's records (:data:`actors.session.records.RECORDS`)
    records: str
    #: its records exist already: they are read back (and, on NATS, must be there)
    resumed: bool
    #: the directory held the session already (a restart on this host, not a resume from the
    #: servers into a new directory): its view of the notifications is this host's
    restarted_here: bool = False
    #: the directory of its NATS authority (``--nats-auth``; kept by a resumed session)
    nats_auth: str | None = None
    #: the TLS files of its ``tls://`` servers (``--nats-ca``...; kept by a resumed session),
    #: absolute
    nats_tls: TlsFiles | None = None


def locate(
    session_dir: Path | str | None,
    *,
    transport: str | None,
    mailbox_root: Path | str | None,
    journal: str | None,
    resume: str | None,
    new_id: Callable[[], str],
    new_secret: Callable[[], str],
    nats_auth: str | None = None,
    nats_tls: TlsFiles | None = None,
    lock: Callable[[Path], None] = lambda _: None,
) -> Located:
    """The session to run (module rules); raises the typed error naming what is wrong.
    ``lock``: called on the session's directory before anything of it is read (the
    supervisor's lock, held for its life: :mod:`actors.records.session_lock`)."""
    wanted_transport = given_transport(transport, mailbox_root)
    if resume is not None:
        resume = resumable_id(resume, journal, wanted_transport)
    wanted = Path(session_dir).absolute() if session_dir else None
    if resume is not None and wanted is None:
        wanted = (state_dir() / "sessions" / resume).absolute()
    if wanted is not None:
        lock(wanted)
    if wanted is not None and (wanted / "session.json").exists():
        old = load_info(wanted)
        if old.parent_pid != os.getpid() and is_live(old):
            raise SessionBusy(
                f"{wanted} is a live session (supervisor pid {old.parent_pid}); "
                "stop it first or use another --session-dir"
            )
        if resume is not None and resume != old.session_id:
            raise InvalidArgument(f"{wanted} holds session {old.session_id}, not {resume}")
        kept = resumed_transport(wanted, old.mailbox, wanted_transport)
        return Located(
            session_id=old.session_id,
            session_dir=wanted,
            transport=kept,
            mailbox_root=Path(old.mailbox),
            client_token=old.client_token,
            records=records_kind(journal, kept, old.records),
            resumed=True,
            restarted_here=True,
            nats_auth=resumed_auth(old.nats_auth, nats_auth),
            nats_tls=check_tls(kept, resumed_tls(old.nats_tls, nats_tls)),
        )
    session_id = resume or new_id()
    if wanted is None:
        wanted = (state_dir() / "sessions" / session_id).absolute()
        lock(wanted)
    root = Path(mailbox_root or default_runtime_dir() / session_id).absolute()
    chosen = wanted_transport or str(root)
    return Located(
        session_id=session_id,
        session_dir=wanted,
        transport=chosen,
        mailbox_root=root,
        client_token=new_secret(),
        records=records_kind(journal, chosen, None),
        resumed=resume is not None,  # a session of the servers' records, new on this host
        nats_auth=check_auth(chosen, nats_auth),
        nats_tls=check_tls(chosen, nats_tls),
    )
