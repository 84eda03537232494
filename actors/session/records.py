"""Where a session keeps its records: the journal and the record of delivery (the notifications
every restart must not hand over again), in the session directory or on the NATS servers.

``serve --journal file`` (the default) keeps ``journal.jsonl`` and ``notifications.jsonl`` in
the session directory. ``serve --journal nats`` (with ``--transport nats://...``) keeps both as
streams on the session's servers (:mod:`actors.transports.nats.journal`), so that a parent started
again on **another host** (``serve --resume SESSION_ID``, in a directory of that host) finds every
result and hands no notification over twice.

Rules:
- **One record, written first.** Every notification is recorded before any sink shows it (the
  supervisor's fan-out); with ``nats`` the record is the servers' stream, and the session
  directory's ``notifications.jsonl`` is this host's view of it, written after the record (what
  ``shepherd notifications`` and the MCP server read). A parent resumed on another host starts
  that view empty: what was delivered before is on record, and is not delivered again. A
  parent started again in the same directory first makes its view whole (:meth:`Records.
  catch_up`): one killed after a notification was recorded and before the view showed it
  left the view without it, and the record says it was delivered, so nothing else would.
- **Resuming from the servers** needs the session's streams to exist: a session id with no
  records there is ``invalid_handle``, and nothing is created for it.
- **One writer.** Two supervisors of one session cannot both write its records on NATS: the
  second is refused at its start (``session_busy`` naming the live one,
  :mod:`actors.transports.nats.claim`), and any append that does not follow the last one is refused
  (:mod:`actors.transports.nats.lines`); the records are kept after the session ends, as a session
  directory is.
- What a session uses is recorded in ``session.json`` (``records``); a resumed session keeps it,
  and asking for the other is ``invalid_argument``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from actors.records.journal_file import FileJournal
from actors.records.jsonlines import LineProblem
from actors.records.notifications import Deliveries, NotificationFile, encode_note
from actors.runtime.log import logger
from actors.session.sinks import Sink
from protocol.core.errors import InvalidArgument
from protocol.core.ids import IdKind, kind_of
from protocol.core.transport_url import TlsFiles, is_nats, parse_transport
from protocol.records.journal import Record

if TYPE_CHECKING:
    from actors.transports.nats.auth import NatsLogin
    from actors.transports.nats.claim import ParentClaim
    from actors.transports.nats.journal import NatsJournal, NatsNotifications

__all__ = ["RECORDS", "Records", "open_records", "records_kind", "resumable_id"]

#: the kinds of records a session can keep (``serve --journal``)
RECORDS = ("file", "nats")


class _Journal(Protocol):
    @property
    def problems(self) -> list[LineProblem]: ...

    def append(self, record: msgspec.Struct) -> None: ...

    def append_many(self, records: Sequence[msgspec.Struct]) -> None: ...

    def read(self) -> list[Record]: ...

    def close(self) -> None: ...


class _Delivered(Protocol):
    @property
    def problems(self) -> list[LineProblem]: ...

    def read_deliveries(self) -> Deliveries: ...


class Records:
    """A session's journal, its record of delivery (a sink, first of all), and the view other
    processes on this host read (``notifications.jsonl``; the record itself with ``file``)."""

    def __init__(
        self,
        kind: str,
        journal: _Journal,
        record: Sink,
        delivered: _Delivered,
        view: NotificationFile,
        claim: ParentClaim | None = None,
    ) -> None:
        self.kind = kind
        self.journal = journal
        self.record = record
        self.delivered = delivered
        self.view = view
        #: this supervisor's claim on the session, with records on the NATS servers
        self.claim = claim

    @property
    def sinks_after_record(self) -> list[Sink]:
        """The view, when it is not the record itself."""
        return [self.view] if self.view is not self.record else []

    def catch_up(self, given: Deliveries | None = None) -> int:
        """This host's view made whole again from the record (a restart in the same
        directory, with the record on the servers): every recorded notification the view
        lacks is appended to it, in the record's order; how many. ``given``: the record as a
        restart read it already (else it is read). Nothing with ``file`` (the view is the
        record)."""
        if self.view is self.record:
            return 0
        recorded = (given or self.delivered.read_deliveries()).notes
        shown = {line.rstrip(b"\n") for line in self.view.lines()}
        missing = [note for note in recorded if encode_note(note).rstrip(b"\n") not in shown]
        for note in missing:
            self.view(note)
        if missing:
            logger.warning(
                "{n} recorded notifications were missing from {path}: shown now",
                n=len(missing),
                path=self.view.path,
            )
        return len(missing)

    @property
    def journal_where(self) -> str:
        """Where the journal is, for ``session.json``."""
        path = getattr(self.journal, "path", None)
        return str(path) if path is not None else str(getattr(self.journal, "where", "nats"))

    def close(self, *, keep_claim: bool = False) -> None:
        """``keep_claim``: the session stays this supervisor's until :meth:`release` (its
        last use of the session's other resources)."""
        self.journal.close()
        close = getattr(self.record, "close", None)
        if callable(close):
            close()
        if self.view is not self.record:
            self.view.close()
        if not keep_claim:
            self.release()

    def release(self) -> None:
        """The claim on the session given up (with records on NATS): another may take it."""
        if self.claim is not None:
            self.claim.close()


def _fence(journal: NatsJournal, record: NatsNotifications, why: str) -> None:
    """The records refuse every later append: another supervisor holds the session now."""
    journal.fence(why)
    record.fence(why)


def records_kind(given: str | None, transport: str, recorded: str | None) -> str:
    """The records a session keeps: what it recorded (a resumed session), else ``given``, else
    ``file``; checked against the transport."""
    if given is not None and given not in RECORDS:
        raise InvalidArgument(f"--journal must be one of {', '.join(RECORDS)}, not {given!r}")
    if recorded is not None:
        if given is not None and given != recorded:
            raise InvalidArgument(
                f"this session keeps its records in {recorded!r}; --journal cannot move them "
                f"to {given!r}"
            )
        return recorded
    kind = given or "file"
    if kind == "nats" and not is_nats(transport):
        raise InvalidArgument("--journal nats needs --transport nats:// or tls://HOST:PORT[,...]")
    return kind


def resumable_id(session_id: str, journal: str | None, transport: str | None) -> str:
    """``--resume``'s session id, checked: resuming from the servers needs their records."""
    if journal != "nats" or transport is None or not is_nats(transport):
        raise InvalidArgument(
            "--resume SESSION_ID resumes a session from the NATS servers' records: it needs "
            "--journal nats and --transport nats:// or tls://HOST:PORT[,...]"
        )
    if len(session_id) > 64 or kind_of(session_id) is not IdKind.SESSION:
        raise InvalidArgument(
            f"--resume: {session_id[:80]!r} is not a session id (session ids start with 'ses_')"
        )
    return session_id


def open_records(
    kind: str,
    session_dir: Path,
    transport: str,
    session_id: str,
    *,
    existing: bool,
    login: NatsLogin | None = None,
    tls: TlsFiles | None = None,
) -> Records:
    """Open the session's records (``existing``: they must be there already, as when resuming
    from the servers; a file journal is simply opened, its torn tail cut off). ``login``: the
    parent's NATS user (``--nats-auth``); ``tls``: the TLS files of ``tls://`` servers
    (``--nats-ca``...)."""
    view = NotificationFile(session_dir / "notifications.jsonl")
    if kind == "file":
        return Records(
            kind, FileJournal(session_dir / "journal.jsonl", fsync=True), view, view, view
        )
    from actors.transports.nats.claim import ParentClaim
    from actors.transports.nats.journal import NatsJournal, NatsNotifications
    from actors.transports.wire import CLUSTER_REPLICAS, NATS_OUTAGE_S, NATS_TIMEOUT_S

    servers = parse_transport(transport).server_urls
    replicas = CLUSTER_REPLICAS if len(servers) >= CLUSTER_REPLICAS else 1
    options = {
        "replicas": replicas,
        "request_timeout_s": NATS_TIMEOUT_S,
        "create": not existing,
        "outage_s": NATS_OUTAGE_S,
        "login": login,
        "tls": tls,
    }
    opened: list[ParentClaim | NatsJournal | NatsNotifications] = []
    try:
        # opened (the streams found, or made), then claimed before any record is read: a live
        # parent elsewhere refuses this one
        journal = NatsJournal(servers, session_id, **options)
        opened.append(journal)
        record = NatsNotifications(servers, session_id, **options)
        opened.append(record)
        claim = ParentClaim(
            servers,
            session_id,
            str(session_dir),
            replicas=replicas,
            request_timeout_s=NATS_TIMEOUT_S,
            outage_s=NATS_OUTAGE_S,
            login=login,
            tls=tls,
            lost=partial(_fence, journal, record),
        )
    except BaseException:
        for done in reversed(opened):
            done.close()
        view.close()
        raise
    return Records(kind, journal, record, record, view, claim)
