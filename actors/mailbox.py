"""The session mailbox: the :class:`~actors.transport.Transport` over a Maildir-style directory.

Rules (DESIGN §1.6, §5; STYLE convention 10):
- Layout: ``<root>/inbox/<owner>/{tmp,new,cur}`` and ``<root>/quarantine/``; every directory
  0700, every file 0600. ``owner`` is ``parent``, an agent id, or a client's message id.
- An inbox exists only if someone created it on purpose (:meth:`Mailbox.ensure_inbox`): a
  publish to a missing inbox is ``invalid_handle``, never an implicit ``mkdir``.
- Publish = exclusive create in ``tmp/`` (0600, ``O_NOFOLLOW``) → write → fsync if asked →
  atomic rename into ``new/``. A file in ``new/`` is therefore always complete; a partial or
  garbage one was planted, and is simply invalid. A failed publish leaves nothing in ``new/``.
- Names are ``<stamp:020d>.<pid>.<seq>.<message_id>.json``; the stamp strictly increases per
  process, so name order is publish order for every publisher.
- Receive: every file in ``new/`` is, in name order, either handed to the handler once and moved
  to ``cur/``, acknowledged as a duplicate, or moved to ``quarantine/`` beside a ``.reason`` JSON
  file (then ``on_reject`` is told, so a known sender can get a non-delivery notice). Nothing is
  dropped silently; one bad file never blocks the files behind it.
- A non-regular entry (symlink, FIFO, directory, device) is quarantined without being opened;
  regular files are opened ``O_NOFOLLOW | O_NONBLOCK`` and re-checked with ``fstat``.
- Bounded: envelope size, unread files per inbox (checked at publish; approximate under
  concurrent publishers), ``cur/`` retention, the duplicate window.

Theory of operation: one :class:`~actors.mailbox_watch.Receiver` thread per :class:`Mailbox`
(one per process) serves every inbox the process subscribed to: it decides *when* an inbox is
drained (after the watch exists, on a wake-up, on the fallback interval); this module decides
*what* draining does. Per file, in name order: ``lstat`` (non-regular → quarantine) → name
grammar → open/fstat/read bounded → strict decode → the name's message id must match the
envelope's → session check (always) → the injected validator → duplicate check → handler (the
capability stripped) → rename into ``cur/`` → prune ``cur/``. Handlers run on the receiver thread
and must be quick (they ``tell`` an actor). Duplicates are remembered per (inbox, message id) in
a bounded FIFO window, seeded from the names in ``cur/`` so a restart does not re-deliver them.

Log levels: ``debug`` one event per delivery stage (published, received, delivered,
acknowledged, duplicate); ``warning`` each quarantine and each degraded watch; ``error`` a file
the receiver could neither deliver nor move.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec
from loguru import logger

from actors.mailbox_inotify import default_waker
from actors.mailbox_watch import (
    DEFAULT_DEBOUNCE_MS,
    DEFAULT_STEP_MS,
    Receiver,
    WakerFactory,
)
from actors.transport import PARENT_INBOX, Handler, Subscription
from protocol.envelopes import AnyEnvelope, decode_envelope, encode_envelope, validate_addresses
from protocol.errors import (
    ForbiddenSender,
    InvalidArgument,
    InvalidEnvelope,
    InvalidHandle,
    LimitExceeded,
    SessionUnavailable,
    ShepherdError,
)
from protocol.ids import IdKind, kind_of, parse_id
from protocol.settings import Settings

__all__ = [
    "DeliveryFailed",
    "Mailbox",
    "MailboxStats",
    "QuarantineReason",
    "RejectCallback",
    "Validator",
    "default_runtime_dir",
]

#: ``validate(inbox, envelope)`` raises a ShepherdError to reject (capability, target, ...).
Validator = Callable[[str, AnyEnvelope], None]
#: ``on_reject(inbox, envelope_or_None, error)``: called after a file went to quarantine.
RejectCallback = Callable[[str, AnyEnvelope | None, ShepherdError], None]

_DIR_MODE = 0o700
_FILE_MODE = 0o600
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAME_RE = re.compile(r"\d{20}\.\d{1,10}\.\d{1,20}\.(shepherd-message-[0-9a-f]{8,64})\.json")
_INBOX_RE = re.compile(r"parent|shepherd-(?:agent|message)-[0-9a-f]{8,64}")
_MAX_REASON_CHARS = 2000
#: a count of an under-half-full new/ is reused for this many of our own publishes
_RECOUNT_EVERY = 32
#: files handled in one turn of one inbox before the receiver looks at the others
_DRAIN_BUDGET = 1024


class DeliveryFailed(ShepherdError):
    """The receiving side failed on a valid envelope (its handler or validator raised)."""

    code = "delivery_failed"


class QuarantineReason(msgspec.Struct, frozen=True, kw_only=True):
    """``quarantine/<name>.reason``: why ``<name>`` was not delivered."""

    code: str
    message: str
    inbox: str
    file: str
    quarantined_at: float
    message_id: str | None = None
    sender_id: str | None = None


class _Rejected(Exception):
    """Internal: this file goes to quarantine for ``error``."""

    def __init__(self, error: ShepherdError, envelope: AnyEnvelope | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.envelope = envelope


@dataclass(frozen=True, slots=True)
class MailboxStats:
    published: int
    delivered: int
    duplicates: int
    quarantined: int


def default_runtime_dir() -> Path:
    """Where session mailboxes go: a memory filesystem when there is one (PERF.md).

    ``$XDG_RUNTIME_DIR/shepherd`` if that directory is ours and writable, else
    ``/dev/shm/shepherd-<uid>``, else ``<tempdir>/shepherd-<uid>``. Nothing is created here;
    :meth:`Mailbox.create` creates missing directories 0700 and checks their owner.
    """
    uid = os.getuid()
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg):
        with contextlib.suppress(OSError):
            st = os.stat(xdg)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and os.access(xdg, os.W_OK | os.X_OK):
                return Path(xdg) / "shepherd"
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        return Path("/dev/shm") / f"shepherd-{uid}"
    return Path(tempfile.gettempdir()) / f"shepherd-{uid}"


class _StampSource:
    """Process-wide publish stamps: strictly increasing even if the clock repeats or steps back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = 0
        self.seq = 0

    def next(self, now_ns: int) -> tuple[int, int]:
        with self.lock:
            self.last = max(now_ns, self.last + 1)
            self.seq += 1
            return self.last, self.seq

    def after_fork(self) -> None:
        self.lock = threading.Lock()  # a lock held by another thread at fork() stays held


_STAMPS = _StampSource()
os.register_at_fork(after_in_child=_STAMPS.after_fork)


@dataclass(slots=True, eq=False)
class _Inbox:
    """Receiver-side state of one subscribed inbox."""

    name: str
    new_dir: str
    cur_dir: str
    handler: Handler
    token: object
    active: bool = True
    seeded: bool = False
    broken: bool = False
    retained: deque[str] = field(default_factory=deque)  # cur/ names, oldest first
    stuck: set[str] = field(default_factory=set)  # names we could neither deliver nor move


class _MailboxSubscription:
    def __init__(self, mailbox: Mailbox, inbox: str, token: object) -> None:
        self._mailbox = mailbox
        self._inbox = inbox
        self._token = token

    def cancel(self) -> None:
        self._mailbox._unsubscribe(self._inbox, self._token)


class Mailbox:
    """A session's filesystem mailbox. Build with :meth:`create` (parent) or :meth:`open`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        session_id: str,
        settings: Settings,
        *,
        creator: bool,
        validate: Validator | None,
        on_reject: RejectCallback | None,
        debounce_ms: int,
        step_ms: int,
        waker_factory: WakerFactory | None,
        now_ns: Callable[[], int],
    ) -> None:
        self._root = Path(os.path.abspath(root))
        self._inbox_root = self._root / "inbox"
        self._quarantine = self._root / "quarantine"
        self._session_id = session_id
        self._settings = settings
        self._creator = creator
        self._validate = validate
        self._on_reject = on_reject
        self._now_ns = now_ns
        self._receiver = Receiver(
            self._drain,
            waker_factory or default_waker(debounce_ms=debounce_ms, step_ms=step_ms),
            settings.fallback_poll_s,
        )
        self._lock = threading.Lock()
        self._closed = False
        self._inboxes: dict[str, _Inbox] = {}
        self._depth: dict[str, list[int]] = {}  # inbox -> [files counted in new/, published since]
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._published = 0
        self._delivered = 0
        self._duplicates = 0
        self._quarantined = 0

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str],
        session_id: str,
        settings: Settings | None = None,
        *,
        validate: Validator | None = None,
        on_reject: RejectCallback | None = None,
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
        step_ms: int = DEFAULT_STEP_MS,
        waker_factory: WakerFactory | None = None,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> Mailbox:
        """Create (or re-open after a restart) the layout under ``root``, as the session parent.

        Missing directories are made 0700; ``root`` must not be a symlink and must be ours, and
        its parent must be ours or root's and not writable by others unless sticky.
        """
        session_id = parse_id(session_id, IdKind.SESSION)
        path = Path(os.path.abspath(root))
        missing: list[Path] = []
        probe = path
        while not os.path.lexists(probe) and probe != probe.parent:
            missing.append(probe)
            probe = probe.parent
        for directory in reversed(missing[1:]):  # ancestors first; root itself checked below
            _make_private_dir(directory)
        _check_parent(path.parent)
        for directory in (path, path / "inbox", path / "quarantine"):
            _make_private_dir(directory)
        return cls(
            path,
            session_id,
            settings or Settings(),
            creator=True,
            validate=validate,
            on_reject=on_reject,
            debounce_ms=debounce_ms,
            step_ms=step_ms,
            waker_factory=waker_factory,
            now_ns=now_ns,
        )

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        session_id: str,
        settings: Settings | None = None,
        *,
        validate: Validator | None = None,
        on_reject: RejectCallback | None = None,
        debounce_ms: int = DEFAULT_DEBOUNCE_MS,
        step_ms: int = DEFAULT_STEP_MS,
        waker_factory: WakerFactory | None = None,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> Mailbox:
        """Open an existing mailbox from a child or client process (creates nothing but,
        through :meth:`ensure_inbox`, the caller's own client inbox)."""
        session_id = parse_id(session_id, IdKind.SESSION)
        path = Path(os.path.abspath(root))
        for directory in (path, path / "inbox", path / "quarantine"):
            try:
                st = os.lstat(directory)
            except FileNotFoundError:
                raise SessionUnavailable(f"no session mailbox at {path}") from None
            _check_private(directory, st)
            if st.st_mode & 0o077:
                raise InvalidArgument(f"{directory} is open to other users (mode {st.st_mode:o})")
        return cls(
            path,
            session_id,
            settings or Settings(),
            creator=False,
            validate=validate,
            on_reject=on_reject,
            debounce_ms=debounce_ms,
            step_ms=step_ms,
            waker_factory=waker_factory,
            now_ns=now_ns,
        )

    @property
    def root(self) -> Path:
        return self._root

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def settings(self) -> Settings:
        return self._settings

    def inbox_path(self, owner: str) -> Path:
        return self._inbox_root / _inbox_name(owner)

    def has_inbox(self, owner: str) -> bool:
        return os.path.isdir(self.inbox_path(owner) / "new")

    def ensure_inbox(self, owner: str) -> Path:
        """Create ``inbox/<owner>/{tmp,new,cur}`` if missing. The parent creates inboxes for
        agents it knows; an opened mailbox may only create a client inbox (a message id)."""
        path = self.inbox_path(owner)
        if not self._creator and kind_of(owner) is not IdKind.MESSAGE:
            raise ForbiddenSender(f"only the session parent creates inbox {owner!r}")
        for directory in (path, path / "tmp", path / "new", path / "cur"):
            _make_private_dir(directory)
        return path

    def remove_inbox(self, owner: str) -> None:
        """Remove an inbox nobody reads any more (a finished client's). Refused while it is
        subscribed here or still holds unread envelopes: nothing accepted is ever deleted."""
        path = self.inbox_path(owner)
        with self._lock:
            if owner in self._inboxes:
                raise InvalidArgument(f"inbox {owner!r} is still subscribed")
        if not os.path.isdir(path / "new"):
            raise InvalidHandle(f"no inbox {owner!r} in this session")
        if os.listdir(path / "new"):
            raise InvalidArgument(f"inbox {owner!r} still holds unread envelopes")
        for sub in ("tmp", "cur"):
            for name in os.listdir(path / sub):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path / sub / name)
        for sub in ("tmp", "new", "cur"):
            os.rmdir(path / sub)
        os.rmdir(path)

    def stats(self) -> MailboxStats:
        return MailboxStats(
            published=self._published,
            delivered=self._delivered,
            duplicates=self._duplicates,
            quarantined=self._quarantined,
        )

    # ------------------------------------------------------------------ publish

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        """Accept ``envelope`` into ``inbox`` (it is then delivered or quarantined) or raise."""
        if self._closed:
            raise InvalidHandle("mailbox is closed")
        _inbox_name(inbox)
        validate_addresses(envelope)  # ids end up in file names: check them before any I/O
        if envelope.session_id != self._session_id:
            raise InvalidEnvelope(f"envelope is for session {envelope.session_id}, not this one")
        data = encode_envelope(envelope)
        limit = self._settings.max_envelope_bytes
        if len(data) > limit:
            raise LimitExceeded(f"envelope is {len(data)} bytes, over the {limit}-byte limit")
        box = os.path.join(self._inbox_root, inbox)
        new_dir = os.path.join(box, "new")
        self._check_depth(inbox, box, new_dir)
        stamp, seq = _STAMPS.next(self._now_ns())
        name = f"{stamp:020d}.{os.getpid()}.{seq}.{envelope.message_id}.json"
        tmp_path = os.path.join(box, "tmp", name)
        try:
            fd = os.open(tmp_path, _WRITE_FLAGS, _FILE_MODE)
        except OSError as exc:
            raise _write_error(inbox, exc) from exc
        try:
            try:
                _write_all(fd, data)
                if self._settings.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp_path, os.path.join(new_dir, name))
            if self._settings.fsync:
                _fsync_dir(new_dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
            raise _write_error(inbox, exc) from exc
        with self._lock:
            self._published += 1
            self._depth[inbox][1] += 1
        logger.bind(inbox=inbox, message_id=envelope.message_id).debug(
            "mailbox: published {} ({} bytes)", name, len(data)
        )

    def _check_depth(self, inbox: str, box_dir: str, new_dir: str) -> None:
        """Refuse a publish into an inbox whose ``new/`` already holds ``max_queue_depth`` files.

        Counting ``new/`` costs ~0.2 ms per 1,000 files, so it is not done on every publish: a
        count stays good for :data:`_RECOUNT_EVERY` of our own publishes while it shows the
        inbox under half full. At half full and above every publish re-counts. So the limit can
        be overshot by at most ``_RECOUNT_EVERY`` per concurrent publisher, never more.
        """
        _check_inbox_dirs(inbox, box_dir, new_dir)
        limit = self._settings.max_queue_depth
        with self._lock:
            cached = self._depth.get(inbox)
            stale = (
                cached is None or cached[1] >= _RECOUNT_EVERY or cached[0] + cached[1] >= limit // 2
            )
        if stale:
            counted = _count_entries(new_dir, limit)
            with self._lock:
                cached = self._depth[inbox] = [counted, 0]
        assert cached is not None
        if cached[0] + cached[1] >= limit:
            raise LimitExceeded(
                f"inbox {inbox!r} already holds {cached[0] + cached[1]} unread envelopes "
                f"(limit {limit})"
            )

    # ------------------------------------------------------------------ subscribe / close

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler`` on this mailbox's receiver thread,
        starting with whatever is already in ``new/``. Subscribing again replaces the handler."""
        _inbox_name(inbox)
        box_dir = os.path.join(self._inbox_root, inbox)
        for directory in (box_dir, os.path.join(box_dir, "new"), os.path.join(box_dir, "cur")):
            try:
                st = os.lstat(directory)
            except FileNotFoundError:
                raise InvalidHandle(f"no inbox {inbox!r} in this session") from None
            if not stat.S_ISDIR(st.st_mode):  # a symlink planted for an inbox is not followed
                kind = _describe(st.st_mode)
                raise InvalidHandle(f"inbox {inbox!r} is a {kind}; refusing to read it")
        token = object()
        with self._lock:
            if self._closed:
                raise InvalidHandle("mailbox is closed")
            box = self._inboxes.get(inbox)
            if box is None:
                box = _Inbox(
                    name=inbox,
                    new_dir=os.path.join(box_dir, "new"),
                    cur_dir=os.path.join(box_dir, "cur"),
                    handler=handler,
                    token=token,
                )
                self._inboxes[inbox] = box
            else:
                box.handler = handler
                box.token = token
            self._receiver.watch(inbox, box.new_dir)
        return _MailboxSubscription(self, inbox, token)

    def _unsubscribe(self, inbox: str, token: object) -> None:
        with self._lock:
            box = self._inboxes.get(inbox)
            if box is None or box.token is not token:
                return
            del self._inboxes[inbox]
            box.active = False  # files left in new/ stay there for the next subscriber
            self._receiver.unwatch(inbox)

    def wait_drained(self, timeout_s: float) -> bool:
        """Block until every file that was in a subscribed ``new/`` when called has been
        handled (delivered, acknowledged or quarantined). False on timeout or close.
        Raises ``RuntimeError`` from a handler (it would wait for itself)."""
        if self._closed:
            return False
        return self._receiver.wait_drained(timeout_s)

    def close(self) -> None:
        """Stop the receiver (promptly: within one watcher step) and refuse later publishes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._receiver.close()

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Mailbox({str(self._root)!r}, {self._session_id!r})"

    # ------------------------------------------------------------------ receiving (receiver thread)

    def _drain(self, inbox: str) -> bool:
        """Handle the files in ``inbox``'s ``new/`` in name order, listing again until it is
        empty (True) or :data:`_DRAIN_BUDGET` files were handled (False: the receiver gives the
        other inboxes a turn and comes straight back)."""
        with self._lock:
            box = self._inboxes.get(inbox)
        if box is None or not box.active:
            return True
        if not box.seeded:
            self._seed(box)
        budget = _DRAIN_BUDGET
        while True:
            try:
                with os.scandir(box.new_dir) as scan:
                    entries = sorted(scan, key=lambda entry: entry.name)
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
                return True
            for entry in entries:
                if self._receiver.stopping or not box.active:
                    return True
                if budget == 0:
                    return False
                budget -= 1
                try:
                    self._handle_file(box, entry)
                except Exception:
                    logger.bind(inbox=box.name).exception("mailbox: failed on {!r}", entry.name)
                    box.stuck.add(entry.name)

    def _seed(self, box: _Inbox) -> None:
        """Remember what ``cur/`` already holds: its ids (duplicates across a restart) and its
        names (retention order)."""
        box.seeded = True
        try:
            names = sorted(os.listdir(box.cur_dir))
        except OSError:
            return
        for name in names:
            match = _NAME_RE.fullmatch(name)
            if match is not None:
                self._remember(box.name, match.group(1))
        box.retained.extend(names)
        self._prune(box)

    def _handle_file(self, box: _Inbox, entry: os.DirEntry[str]) -> None:
        name = entry.name
        try:
            envelope = self._accept(box, entry)
        except _Rejected as rejected:
            self._reject(box, name, rejected.envelope, rejected.error)
            return
        if envelope is None:
            return  # gone between the listing and the open: nothing of ours to lose
        stage = logger.bind(inbox=box.name, message_id=envelope.message_id)
        stage.debug(
            "mailbox: received {} from {}", envelope.__struct_config__.tag, envelope.sender_id
        )
        key = (box.name, envelope.message_id)
        if key in self._seen:
            self._duplicates += 1
            stage.debug("mailbox: duplicate {} acknowledged without delivery", name)
            self._acknowledge(box, name)
            return
        if envelope.capability:
            envelope = msgspec.structs.replace(envelope, capability="")  # never leaves this layer
        try:
            box.handler(envelope)
        except Exception as exc:
            self._reject(box, name, envelope, DeliveryFailed(f"handler raised {exc!r}"))
            return
        self._remember(box.name, envelope.message_id)
        self._delivered += 1
        stage.debug("mailbox: delivered {}", name)
        if self._acknowledge(box, name):
            stage.debug("mailbox: acknowledged {}", name)

    def _accept(self, box: _Inbox, entry: os.DirEntry[str]) -> AnyEnvelope | None:
        """Open, decode and validate one file; raise :class:`_Rejected` to quarantine it,
        return None if it vanished."""
        name = entry.name
        if not entry.is_file(follow_symlinks=False):
            try:
                kind = _describe(entry.stat(follow_symlinks=False).st_mode)
            except FileNotFoundError:
                return None
            message = f"{_shown(name)} in new/ is a {kind}, not a regular file; it was not opened"
            raise _Rejected(InvalidEnvelope(message))
        match = _NAME_RE.fullmatch(name)
        if match is None:
            raise _Rejected(InvalidEnvelope(f"{_shown(name)} is not an envelope file name"))
        limit = self._settings.max_envelope_bytes
        try:
            envelope = decode_envelope(_read_file(entry.path, limit), max_bytes=limit)
        except FileNotFoundError:
            return None
        except ShepherdError as exc:
            raise _Rejected(exc) from None
        except OSError as exc:
            raise _Rejected(InvalidEnvelope(f"cannot read {_shown(name)}: {exc}")) from None
        if envelope.message_id != match.group(1):
            message = f"file {_shown(name)} is named for another message than {envelope.message_id}"
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

    def _acknowledge(self, box: _Inbox, name: str) -> bool:
        try:
            os.rename(os.path.join(box.new_dir, name), os.path.join(box.cur_dir, name))
        except FileNotFoundError:
            return False
        except OSError as exc:
            logger.bind(inbox=box.name).error("mailbox: cannot acknowledge {}: {}", name, exc)
            box.stuck.add(name)  # delivered, and remembered as such: never re-delivered
            return False
        box.retained.append(name)
        self._prune(box)
        return True

    def _prune(self, box: _Inbox) -> None:
        while len(box.retained) > max(self._settings.retention_count, 0):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(box.cur_dir, box.retained.popleft()))

    def _reject(
        self, box: _Inbox, name: str, envelope: AnyEnvelope | None, error: ShepherdError
    ) -> None:
        """Quarantine ``new/<name>`` with a reason, then tell ``on_reject``."""
        if envelope is not None and envelope.capability:
            envelope = msgspec.structs.replace(envelope, capability="")
        outcome = self._quarantine_file(box, name, envelope, error)
        if outcome == "gone":
            return
        if outcome == "moved":
            self._quarantined += 1
            logger.bind(
                inbox=box.name, message_id=envelope.message_id if envelope else None
            ).warning("mailbox: quarantined {}: {} ({})", _shown(name), error.message, error.code)
        if self._on_reject is not None:
            try:
                self._on_reject(box.name, envelope, error)
            except Exception:
                logger.bind(inbox=box.name).exception("mailbox: on_reject failed")

    def _quarantine_file(
        self, box: _Inbox, name: str, envelope: AnyEnvelope | None, error: ShepherdError
    ) -> Literal["moved", "stuck", "gone"]:
        """Reason file first (exclusive create), then the rename: a crash in between leaves the
        file in new/ to be judged again, never a quarantined file without its reason."""
        now_ns = self._now_ns()
        base = name if _NAME_RE.fullmatch(name) else f"{now_ns:020d}.invalid-name"
        reason = QuarantineReason(
            code=error.code,
            message=error.message[:_MAX_REASON_CHARS],
            inbox=box.name,
            file=name if base == name else _shown(name),
            quarantined_at=now_ns / 1e9,
            message_id=envelope.message_id if envelope else None,
            sender_id=envelope.sender_id if envelope else None,
        )
        data = msgspec.json.encode(reason)
        for attempt in range(1000):
            target = os.path.join(self._quarantine, base if attempt == 0 else f"{base}.{attempt}")
            if os.path.lexists(target):
                continue
            try:
                fd = os.open(f"{target}.reason", _WRITE_FLAGS, _FILE_MODE)
            except FileExistsError:
                continue
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            try:
                os.rename(os.path.join(box.new_dir, name), target)
            except OSError as exc:
                os.unlink(f"{target}.reason")
                if isinstance(exc, FileNotFoundError):
                    return "gone"
                logger.bind(inbox=box.name).error(
                    "mailbox: cannot quarantine {} ({}); left in new/", _shown(name), exc
                )
                box.stuck.add(name)
                return "stuck"
            return "moved"
        raise OSError(errno.EEXIST, "no free quarantine name", base)


# ---------------------------------------------------------------------- file helpers


def _inbox_name(owner: object) -> str:
    if not isinstance(owner, str) or _INBOX_RE.fullmatch(owner) is None:
        raise InvalidHandle(
            f"{_shown(owner)} is not an inbox name ({PARENT_INBOX!r}, an agent id or a message id)"
        )
    return owner


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:120] + "…"


def _describe(mode: int) -> str:
    for test, kind in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return kind
    return "regular file" if stat.S_ISREG(mode) else "special file"


def _check_private(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise InvalidArgument(f"{path} is a symbolic link; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidArgument(f"{path} is a {_describe(st.st_mode)}, not a directory")
    if st.st_uid != os.getuid():
        raise InvalidArgument(f"{path} belongs to uid {st.st_uid}, not to us ({os.getuid()})")


def _make_private_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, _DIR_MODE)
    st = os.lstat(path)
    _check_private(path, st)
    if stat.S_IMODE(st.st_mode) != _DIR_MODE:
        os.chmod(path, _DIR_MODE)  # the umask may have taken owner bits; others never get any


def _check_parent(path: Path) -> None:
    """Whoever can write the parent can swap our directory: it must be ours or root's, and
    writable by others only if sticky (like /tmp or /dev/shm)."""
    st = os.stat(path)
    if st.st_uid not in (os.getuid(), 0):
        raise InvalidArgument(f"{path} belongs to uid {st.st_uid}; refusing to create in it")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise InvalidArgument(f"{path} is writable by other users and not sticky")


def _check_inbox_dirs(inbox: str, box_dir: str, new_dir: str) -> None:
    for directory in (box_dir, new_dir):
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            raise InvalidHandle(f"no inbox {inbox!r} in this session") from None
        if not stat.S_ISDIR(st.st_mode):  # never write through a symlink planted for an inbox
            kind = _describe(st.st_mode)
            raise InvalidHandle(f"inbox {inbox!r} is a {kind}; refusing to write to it")


def _count_entries(new_dir: str, limit: int) -> int:
    count = 0
    with os.scandir(new_dir) as scan:
        for _ in scan:
            count += 1
            if count >= limit:
                break
    return count


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_error(inbox: str, exc: OSError) -> ShepherdError:
    if exc.errno == errno.ENOENT:
        return InvalidHandle(f"no inbox {inbox!r} in this session")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return LimitExceeded(f"no space left for inbox {inbox!r}: {exc.strerror}")
    return SessionUnavailable(f"cannot write to inbox {inbox!r}: {exc}")


def _read_file(path: str, max_bytes: int) -> bytes:
    """Read a regular file without following a link or blocking on a swapped-in FIFO."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidEnvelope("the entry became a symbolic link; it was not followed") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidEnvelope(f"the entry is a {_describe(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise LimitExceeded(
                f"envelope file is {st.st_size} bytes, over the {max_bytes}-byte limit"
            )
        chunks: list[bytes] = []
        remaining = max_bytes + 1  # one byte more lets decode_envelope name an oversize
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
