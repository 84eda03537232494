"""What draining one inbox of the session mailbox does, on the mailbox's receiver thread.
*When* an inbox is drained is the :class:`~actors.transports.mailbox.watch.Receiver`'s business;
*what* draining does is this module's.

Rules:
- Every file in ``new/`` is, in name order, either handed to the handler once and moved to
  ``cur/``, acknowledged as a duplicate, or moved to ``quarantine/`` beside a ``.reason`` JSON
  file (:class:`QuarantineReason`; then ``on_reject`` is told, and whether the sender was
  authenticated, so that only a proven sender gets a non-delivery notice — never the victim
  whose id a forger claimed). Nothing is dropped silently; one bad file never blocks the files
  behind it.
- A non-regular entry (symlink, FIFO, directory, device) is quarantined without being opened.
- The reason file is written before the rename into ``quarantine/``
  (:mod:`actors.transports.mailbox.quarantine`).
- A capability never leaves this layer: the handler and ``on_reject`` get the envelope
  without it.

- **One hand-off per batch.** The envelopes accepted in one pass over ``new/`` (at most the
  inbox's ``batch_max``: :data:`BATCH_MAX` for a :data:`BatchHandler`, 1 for a per-envelope
  :data:`~actors.runtime.transport.Handler`) are handed over together, in name order, and only
  *then* acknowledged: moved to ``cur/`` and remembered in the duplicate window. A crash before
  the hand-off returns loses nothing (the files are still in ``new/``); a crash after it and
  before the acknowledgement hands them over again after the restart, and the receiving side's
  own record (for the parent: the journal, whose rules keep the first ``done`` and the first
  reply) drops the repeat. The envelopes the handler refuses (its answer) are quarantined with
  its reason, each told to ``on_reject`` as authenticated; the others of the batch are
  acknowledged. A handler that raises refuses its whole batch.
- Authentication and de-duplication happen here, before the batch is built: a handler never
  sees a forged or repeated envelope, and never the same message id twice in one batch (a
  repeat inside one pass closes the batch first, so it is judged against the window).

Theory of operation: per file, in name order: ``lstat`` (non-regular → quarantine) → name
grammar → open/fstat/read bounded → strict decode → the name's message id must match the
envelope's → session check (always) → the injected validator → duplicate check → into the
batch (the capability stripped). When the batch is full, or the listing is done: handler →
per envelope, rename into ``cur/`` (or quarantine, if refused) → prune ``cur/``. Handlers run
on the receiver thread and must be quick (they ``tell`` an actor, or ``ask`` one for a whole
batch). Duplicates are remembered per (inbox, message id) in a bounded FIFO window, seeded from
the names in ``cur/`` so a restart does not re-deliver them. A file that can be neither
delivered nor moved is *stuck*: skipped until it leaves ``new/``.
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import msgspec

from actors.runtime.crashpoints import crashpoint
from actors.runtime.log import logger
from actors.runtime.transport import BatchHandler, DeliveryFailed, NotHandled, Refusals
from actors.transports.mailbox.files import NAME_RE, describe, read_file, shown, sweep_abandoned
from actors.transports.mailbox.quarantine import QuarantineReason, quarantine_file
from protocol.core.errors import InvalidEnvelope, ShepherdError
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, decode_envelope

__all__ = [
    "BATCH_MAX",
    "DeliveryFailed",
    "Drainer",
    "QuarantineReason",
    "RejectCallback",
    "SubscribedInbox",
    "Validator",
]

#: ``validate(inbox, envelope)`` raises a ShepherdError to reject (capability, target, ...).
Validator = Callable[[str, AnyEnvelope], None]
#: ``on_reject(inbox, envelope_or_None, error, authenticated)``: called after a file went to
#: quarantine. ``authenticated`` is True only when the envelope had passed the validator (so its
#: ``sender_id`` is proven, not merely claimed): only then may the sender be told about it.
RejectCallback = Callable[[str, AnyEnvelope | None, ShepherdError, bool], None]

#: how often a subscribed inbox's tmp/ is swept of abandoned files
_SWEEP_EVERY_S = 60.0
#: files handled in one turn of one inbox before the receiver looks at the others
_DRAIN_BUDGET = 1024
#: the most envelopes handed over at once to a :data:`BatchHandler`: it bounds what one
#: hand-off holds in memory (at most this many envelopes of ``max_envelope_bytes``) and what a
#: crash between the hand-off and the acknowledgement hands over again
BATCH_MAX = 256
_BY_NAME = attrgetter("name")


class _Rejected(Exception):
    """Internal: this file goes to quarantine for ``error``."""

    def __init__(self, error: ShepherdError, envelope: AnyEnvelope | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.envelope = envelope


_NONE_REFUSED: Mapping[str, ShepherdError] = {}


class _Batch:
    """The envelopes accepted in one pass and not handed over yet, with their file names."""

    __slots__ = ("envelopes", "ids", "names")

    def __init__(self) -> None:
        self.envelopes: list[AnyEnvelope] = []
        self.names: list[str] = []
        self.ids: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.envelopes)

    def add(self, name: str, envelope: AnyEnvelope) -> None:
        self.envelopes.append(envelope)
        self.names.append(name)
        self.ids.add(envelope.message_id)

    def take(self) -> tuple[Sequence[AnyEnvelope], list[str]]:
        taken = self.envelopes, self.names
        self.envelopes, self.names, self.ids = [], [], set()
        return taken


@dataclass(slots=True, eq=False)
class SubscribedInbox:
    """Receiver-side state of one subscribed inbox."""

    name: str
    new_dir: str
    cur_dir: str
    handler: BatchHandler
    token: object
    batch_max: int = 1  # envelopes per hand-off (1: a per-envelope handler, as it always was)
    active: bool = True
    seeded: bool = False
    broken: bool = False
    retained: deque[str] = field(default_factory=deque)  # cur/ names, oldest first
    swept_at: float = float("-inf")  # when tmp/ was last swept of abandoned files
    stuck: set[str] = field(default_factory=set)  # names we could neither deliver nor move
    # ``new_dir + "/"`` and ``cur_dir + "/"``: a file's path is prefix + name (a listed name
    # never holds a "/"), without an ``os.path.join`` per file
    new_prefix: str = field(init=False)
    cur_prefix: str = field(init=False)

    def __post_init__(self) -> None:
        self.new_prefix = os.path.join(self.new_dir, "")
        self.cur_prefix = os.path.join(self.cur_dir, "")


class Drainer:
    """Drains the subscribed inboxes of one :class:`~actors.transports.mailbox.mailbox.Mailbox`;
    owns the duplicate window and the delivery counters. Runs on the receiver thread only."""

    def __init__(
        self,
        *,
        session_id: str,
        settings: Settings,
        quarantine_dir: Path,
        validate: Validator | None,
        on_reject: RejectCallback | None,
        now_ns: Callable[[], int],
        stopping: Callable[[], bool],
    ) -> None:
        self._session_id = session_id
        self._settings = settings
        self._quarantine = quarantine_dir
        self._validate = validate
        self._on_reject = on_reject
        self._now_ns = now_ns
        self._stopping = stopping
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.delivered = 0
        self.duplicates = 0
        self.quarantined = 0

    def drain(self, box: SubscribedInbox) -> bool:
        """Handle the files in ``box``'s ``new/`` in name order, listing again until it is
        empty (True) or :data:`_DRAIN_BUDGET` files were judged (False: the receiver gives the
        other inboxes a turn and comes straight back). What is accepted is handed over in
        batches of at most ``box.batch_max`` (the module rules)."""
        if not box.seeded:
            self._seed(box)
        self._sweep_tmp(box)
        budget = _DRAIN_BUDGET
        batch = _Batch()
        while True:
            try:
                with os.scandir(box.new_dir) as scan:
                    entries = sorted(scan, key=_BY_NAME)
            except OSError as exc:
                if not box.active:
                    return True  # unsubscribed (and removed) while this pass was on its way
                if not box.broken:
                    box.broken = True
                    logger.bind(inbox=box.name).error("mailbox: cannot list new/: {}", exc)
                return True  # nothing readable: the fallback pass tries again
            box.broken = False
            if box.stuck:
                box.stuck.intersection_update(entry.name for entry in entries)
                entries = [entry for entry in entries if entry.name not in box.stuck]
            if not entries:
                self._flush(box, batch)
                return True
            for entry in entries:
                if self._stopping() or not box.active:
                    return True  # what the batch holds stays in new/ for the next pass
                if budget == 0:
                    self._flush(box, batch)
                    return False
                budget -= 1
                try:
                    self._judge(box, entry, batch)
                except Exception:
                    logger.bind(inbox=box.name).exception("mailbox: failed on {!r}", entry.name)
                    box.stuck.add(entry.name)
            self._flush(box, batch)  # before listing again: a listed file is never in a batch

    def _seed(self, box: SubscribedInbox) -> None:
        """Remember what ``cur/`` already holds: its ids (duplicates across a restart) and its
        names (retention order)."""
        box.seeded = True
        try:
            names = sorted(os.listdir(box.cur_dir))
        except OSError:
            return
        for name in names:
            match = NAME_RE.fullmatch(name)
            if match is not None:
                self._remember(box.name, match.group(1))
        box.retained.extend(names)
        self._prune(box)

    def _sweep_tmp(self, box: SubscribedInbox) -> None:
        """At subscription and then every :data:`_SWEEP_EVERY_S`: remove what writers that
        died mid-publish left in ``tmp/`` (see :func:`sweep_abandoned`)."""
        now_s = self._now_ns() / 1e9
        if now_s - box.swept_at < _SWEEP_EVERY_S:
            return
        box.swept_at = now_s
        tmp_dir = os.path.join(os.path.dirname(box.new_dir), "tmp")
        for name, size in sweep_abandoned(tmp_dir, now_s):
            logger.bind(inbox=box.name).warning(
                "mailbox: removed {} ({} bytes) from tmp/: its writer never finished it",
                shown(name),
                size,
            )

    def _judge(self, box: SubscribedInbox, entry: os.DirEntry[str], batch: _Batch) -> None:
        """Quarantine, acknowledge as a duplicate, or add ``entry``'s envelope to ``batch``
        (handing the batch over when it is full)."""
        name = entry.name
        try:
            envelope = self._accept(box, entry)
        except _Rejected as rejected:
            self._reject(box, name, rejected.envelope, rejected.error, authenticated=False)
            return
        if envelope is None:
            return  # gone between the listing and the open: nothing of ours to lose
        inbox, message_id = box.name, envelope.message_id
        # keyword arguments land in the record's ``extra`` as ``bind`` would put them, without
        # building a bound logger per file
        logger.debug(
            "mailbox: received {} from {}",
            envelope.__struct_config__.tag,
            envelope.sender_id,
            inbox=inbox,
            message_id=message_id,
        )
        if message_id in batch.ids:
            self._flush(box, batch)  # judge the repeat against the window, once it is known
        if (inbox, message_id) in self._seen:
            self.duplicates += 1
            logger.debug(
                "mailbox: duplicate {} acknowledged without delivery",
                name,
                inbox=inbox,
                message_id=message_id,
            )
            self._acknowledge(box, name)
            return
        if envelope.capability:
            envelope = msgspec.structs.replace(envelope, capability="")  # never leaves this layer
        batch.add(name, envelope)
        if len(batch.envelopes) >= box.batch_max:
            self._flush(box, batch)

    def _flush(self, box: SubscribedInbox, batch: _Batch) -> None:
        """Hand ``batch`` over, then acknowledge each envelope (or quarantine it, if refused);
        ``batch`` is empty afterwards."""
        if not batch:
            return
        envelopes, names = batch.take()
        refused: Refusals
        try:
            refused = box.handler(envelopes) or _NONE_REFUSED
        except NotHandled as exc:  # left in new/ for the parent started next; never again here
            box.stuck.update(names)
            logger.bind(inbox=box.name).error("mailbox: {} left unhandled: {}", len(names), exc)
            return
        except Exception as exc:
            failed = DeliveryFailed(f"handler raised {exc!r}")
            refused = {envelope.message_id: failed for envelope in envelopes}
        crashpoint("mailbox.before_ack")  # handled, not yet acknowledged: handed over again
        inbox = box.name
        for envelope, name in zip(envelopes, names, strict=True):
            message_id = envelope.message_id
            try:
                error = refused.get(message_id)
                if error is not None:
                    self._reject(box, name, envelope, error, authenticated=True)
                    continue
                self._remember(inbox, message_id)
                self.delivered += 1
                logger.debug("mailbox: delivered {}", name, inbox=inbox, message_id=message_id)
                if self._acknowledge(box, name):
                    logger.debug(
                        "mailbox: acknowledged {}", name, inbox=inbox, message_id=message_id
                    )
            except Exception:
                logger.bind(inbox=inbox).exception("mailbox: failed on {!r}", name)
                box.stuck.add(name)

    def _accept(self, box: SubscribedInbox, entry: os.DirEntry[str]) -> AnyEnvelope | None:
        """Open, decode and validate one file; raise :class:`_Rejected` to quarantine it,
        return None if it vanished."""
        name = entry.name
        if not entry.is_file(follow_symlinks=False):
            try:
                kind = describe(entry.stat(follow_symlinks=False).st_mode)
            except FileNotFoundError:
                return None
            message = f"{shown(name)} in new/ is a {kind}, not a regular file; it was not opened"
            raise _Rejected(InvalidEnvelope(message))
        match = NAME_RE.fullmatch(name)
        if match is None:
            raise _Rejected(InvalidEnvelope(f"{shown(name)} is not an envelope file name"))
        limit = self._settings.max_envelope_bytes
        try:
            envelope = decode_envelope(read_file(entry.path, limit), max_bytes=limit)
        except FileNotFoundError:
            return None
        except ShepherdError as exc:
            raise _Rejected(exc) from None
        except OSError as exc:
            raise _Rejected(InvalidEnvelope(f"cannot read {shown(name)}: {exc}")) from None
        if envelope.message_id != match.group(1):
            message = f"file {shown(name)} is named for another message than {envelope.message_id}"
            raise _Rejected(InvalidEnvelope(message), envelope)
        try:
            if envelope.session_id != self._session_id:
                raise InvalidEnvelope(f"envelope is for session {envelope.session_id}, not ours")
            if self._validate is not None:
                self._validate(box.name, envelope)
        except ShepherdError as exc:
            raise _Rejected(exc, envelope) from None
        except Exception as exc:
            raise _Rejected(DeliveryFailed(f"validator raised {exc!r}"), envelope) from None
        return envelope

    def _remember(self, inbox: str, message_id: str) -> None:
        self._seen[(inbox, message_id)] = None
        while len(self._seen) > max(self._settings.dedup_window, 0):
            self._seen.popitem(last=False)

    def _acknowledge(self, box: SubscribedInbox, name: str) -> bool:
        try:
            os.rename(box.new_prefix + name, box.cur_prefix + name)
        except FileNotFoundError:
            return False
        except OSError as exc:
            logger.bind(inbox=box.name).error("mailbox: cannot acknowledge {}: {}", name, exc)
            box.stuck.add(name)  # delivered, and remembered as such: never re-delivered
            return False
        box.retained.append(name)
        self._prune(box)
        return True

    def _prune(self, box: SubscribedInbox) -> None:
        retained, keep = box.retained, max(self._settings.retention_count, 0)
        while len(retained) > keep:
            try:  # noqa: SIM105 - once per delivered file; suppress() costs a context manager
                os.unlink(box.cur_prefix + retained.popleft())
            except FileNotFoundError:
                pass

    def _reject(
        self,
        box: SubscribedInbox,
        name: str,
        envelope: AnyEnvelope | None,
        error: ShepherdError,
        *,
        authenticated: bool,
    ) -> None:
        """Quarantine ``new/<name>`` with a reason, then tell ``on_reject`` (``authenticated``:
        the envelope had passed the validator)."""
        if envelope is not None and envelope.capability:
            envelope = msgspec.structs.replace(envelope, capability="")
        outcome = quarantine_file(
            self._quarantine, box.new_dir, box.name, name, envelope, error, self._now_ns()
        )
        if outcome == "stuck":
            box.stuck.add(name)
        if outcome == "gone":
            return
        if outcome == "moved":
            self.quarantined += 1
            logger.bind(
                inbox=box.name, message_id=envelope.message_id if envelope else None
            ).warning("mailbox: quarantined {}: {} ({})", shown(name), error.message, error.code)
        if self._on_reject is not None:
            try:
                self._on_reject(box.name, envelope, error, authenticated)
            except Exception:
                logger.bind(inbox=box.name).exception("mailbox: on_reject failed")
