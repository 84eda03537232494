"""The session mailbox: the :class:`~actors.runtime.transport.Transport` over a Maildir-style
directory.

Rules (nothing a publish accepted is lost; a wake-up is only a hint):
- Layout: ``<root>/inbox/<owner>/{tmp,new,cur}``, the inbox's doorbell ``<owner>/bell`` (a
  FIFO, :mod:`actors.transports.mailbox.bell`), and ``<root>/quarantine/``; every directory 0700,
  every file 0600. ``owner`` is ``parent``, an agent id, or a client's message id.
- An inbox exists only if someone created it on purpose (:meth:`Mailbox.ensure_inbox`): a
  publish to a missing inbox is ``invalid_handle``, never an implicit ``mkdir``.
- Publish = exclusive create in ``tmp/`` (0600, ``O_NOFOLLOW``) → write → fsync if asked →
  atomic rename into ``new/`` → ring the inbox's bell (a hint; it never fails a publish). A
  file in ``new/`` is therefore always complete; a partial or garbage one was planted, and is
  simply invalid. A failed publish leaves nothing in ``new/``.
- Names are ``<stamp:020d>.<pid>.<seq>.<message_id>.json``; the stamp strictly increases per
  process, so name order is publish order for every publisher.
- Receive: every file in ``new/`` is, in name order, either handed to the handler once and moved
  to ``cur/``, acknowledged as a duplicate, or moved to ``quarantine/`` beside a ``.reason`` JSON
  file (then ``on_reject`` is told, so a known sender can get a non-delivery notice). Nothing is
  dropped silently; one bad file never blocks the files behind it.
- A non-regular entry (symlink, FIFO, directory, device) is quarantined without being opened;
  regular files are opened ``O_NOFOLLOW | O_NONBLOCK`` and re-checked with ``fstat``.
- Bounded: envelope size, unread files per inbox (checked at publish,
  :mod:`actors.transports.mailbox.depth`:
  exact on tmpfs, else within ``RESYNC_EVERY`` per concurrent publisher), ``cur/`` retention,
  the duplicate window.

Theory of operation: one :class:`~actors.transports.mailbox.watch.Receiver` thread per
:class:`Mailbox` (one per process) serves every inbox the process subscribed to: it decides *when*
an inbox is drained (after the watch exists, on a wake-up, on the fallback interval), woken as
:func:`~actors.transports.mailbox.bell.default_waker` chooses (:meth:`Mailbox.wake_mode` says how);
:class:`~actors.transports.mailbox.drain.Drainer` decides *what* draining does (per-file pipeline,
duplicate window, quarantine). This module owns the mailbox's life, inboxes and publishing;
:mod:`actors.transports.mailbox.subscriptions` the subscribed inboxes (receiver and drainer);
:mod:`actors.transports.mailbox.files` the layout, names and safe file operations.

Log levels: ``debug`` one event per delivery stage (published, received, delivered,
acknowledged, duplicate); ``warning`` each quarantine and each degraded watch; ``error`` a file
the receiver could neither deliver nor move.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors.runtime.log import logger
from actors.runtime.transport import BatchHandler, Handler, Subscription
from actors.transports.mailbox.bell import BellRinger, default_waker, make_bell, remove_bell
from actors.transports.mailbox.depth import InboxDepth
from actors.transports.mailbox.drain import (
    BATCH_MAX,
    DeliveryFailed,
    QuarantineReason,
    RejectCallback,
    Validator,
)
from actors.transports.mailbox.files import (
    FILE_MODE,
    WRITE_FLAGS,
    check_inbox_dirs,
    check_parent,
    check_private,
    default_runtime_dir,
    encode_publishable,
    envelope_file_name,
    fsync_dir,
    inbox_name,
    make_private_dir,
    move_unread,
    write_all,
    write_error,
)
from actors.transports.mailbox.subscriptions import Subscriptions
from actors.transports.mailbox.wakers import (
    DEFAULT_DEBOUNCE_MS,
    DEFAULT_STEP_MS,
    ModeCallback,
    WakerFactory,
)
from protocol.core.errors import (
    ForbiddenSender,
    InvalidArgument,
    InvalidHandle,
    SessionUnavailable,
)
from protocol.core.ids import IdKind, kind_of, parse_id
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope

__all__ = [
    "DeliveryFailed",
    "Mailbox",
    "MailboxStats",
    "QuarantineReason",
    "RejectCallback",
    "Validator",
    "default_runtime_dir",
]


#: the prefix of a client's inbox name (a message id): one answer, then removed
_ONE_SHOT = "shepherd-message-"


@dataclass(frozen=True, slots=True)
class MailboxStats:
    published: int
    delivered: int
    duplicates: int
    quarantined: int


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
        on_wake_mode: ModeCallback | None = None,
    ) -> None:
        self._root = Path(os.path.abspath(root))
        self._inbox_root = self._root / "inbox"
        # ``<inbox root>/``: an inbox's directory is this + its name (never holds a "/"), built
        # without converting a Path and calling ``os.path.join`` per publish
        self._inbox_prefix = os.path.join(self._inbox_root, "")
        self._quarantine = self._root / "quarantine"
        self._session_id = session_id
        self._settings = settings
        self._creator = creator
        self._now_ns = now_ns
        self._subscriptions = Subscriptions(
            self._inbox_root,
            self._quarantine,
            session_id,
            settings,
            validate=validate,
            on_reject=on_reject,
            waker_factory=waker_factory
            or default_waker(creator=creator, debounce_ms=debounce_ms, step_ms=step_ms),
            now_ns=now_ns,
            on_wake_mode=on_wake_mode,
        )
        self._ringer = BellRinger()
        self._lock = threading.Lock()
        self._closed = False
        self._depth = InboxDepth()  # how full each inbox we publish into is
        self._published = 0

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
        on_wake_mode: ModeCallback | None = None,
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
            make_private_dir(directory)
        check_parent(path.parent)
        for directory in (path, path / "inbox", path / "quarantine"):
            make_private_dir(directory)
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
            on_wake_mode=on_wake_mode,
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
        on_wake_mode: ModeCallback | None = None,
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
            check_private(directory, st)
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
            on_wake_mode=on_wake_mode,
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
        return self._inbox_root / inbox_name(owner)

    def has_inbox(self, owner: str) -> bool:
        return os.path.isdir(self.inbox_path(owner) / "new")

    def ensure_inbox(self, owner: str) -> Path:
        """Create ``inbox/<owner>/{tmp,new,cur}`` if missing. The parent creates inboxes for
        agents it knows; an opened mailbox may only create a client inbox (a message id)."""
        path = self.inbox_path(owner)
        if not self._creator and kind_of(owner) is not IdKind.MESSAGE:
            raise ForbiddenSender(f"only the session parent creates inbox {owner!r}")
        for directory in (path, path / "tmp", path / "new", path / "cur"):
            make_private_dir(directory)
        make_bell(path)
        return path

    def set_aside(self, owner: str, aside: Path) -> int:
        """Move what ``owner``'s inbox holds unread into ``aside`` (``serve --recover``:
        :mod:`actors.session.recovery`); how many envelopes."""
        return move_unread(self.inbox_path(owner), aside)

    def remove_inbox(self, owner: str) -> None:
        """Remove an inbox nobody reads any more (a finished client's). Refused while it is
        subscribed here or still holds unread envelopes: nothing accepted is ever deleted."""
        path = self.inbox_path(owner)
        if self._subscriptions.holds(owner):
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
        self._ringer.forget(str(path))
        self._depth.forget(owner)
        remove_bell(path)
        os.rmdir(path)

    def wake_mode(self, inbox: str) -> str | None:
        """How this process's receiver is woken for ``inbox`` (``inotify``, ``bell``,
        ``watchfiles``, or ``polling``: only the fallback rescan); None if not subscribed yet."""
        return self._subscriptions.wake_mode(inbox)

    def stats(self) -> MailboxStats:
        return MailboxStats(
            published=self._published,
            delivered=self._subscriptions.drainer.delivered,
            duplicates=self._subscriptions.drainer.duplicates,
            quarantined=self._subscriptions.drainer.quarantined,
        )

    # ------------------------------------------------------------------ publish

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        """Accept ``envelope`` into ``inbox`` (it is then delivered or quarantined) or raise."""
        if self._closed:
            raise InvalidHandle("mailbox is closed")
        data = encode_publishable(
            inbox, envelope, self._session_id, self._settings.max_envelope_bytes
        )
        box = self._inbox_prefix + inbox
        new_dir = box + "/new"
        box_st, new_st = check_inbox_dirs(inbox, box, new_dir)
        self._depth.check(inbox, box, box_st, new_dir, new_st, self._settings.max_queue_depth)
        name = envelope_file_name(envelope.message_id, self._now_ns())
        tmp_path = f"{box}/tmp/{name}"
        try:
            fd = os.open(tmp_path, WRITE_FLAGS, FILE_MODE)
        except OSError as exc:
            raise write_error(inbox, exc) from exc
        try:
            try:
                write_all(fd, data)
                if self._settings.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp_path, f"{new_dir}/{name}")
            if self._settings.fsync:
                fsync_dir(new_dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
            raise write_error(inbox, exc) from exc
        # a client's one-shot inbox gets one answer: its bell is not worth a cached descriptor
        self._ringer.ring(box, keep=not inbox.startswith(_ONE_SHOT))
        self._depth.published(inbox)
        with self._lock:
            self._published += 1
        # keyword arguments land in the record's ``extra`` as ``bind`` would put them
        logger.debug(
            "mailbox: published {} ({} bytes)",
            name,
            len(data),
            inbox=inbox,
            message_id=envelope.message_id,
        )

    # ------------------------------------------------------------------ subscribe / close

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler`` on this mailbox's receiver thread, one
        call each, starting with whatever is already in ``new/``. Subscribing again replaces the
        handler."""
        return self._subscriptions.subscribe(inbox, handler)

    def subscribe_batch(
        self, inbox: str, handler: BatchHandler, *, batch_max: int = BATCH_MAX
    ) -> Subscription:
        """Like :meth:`subscribe`, but ``handler`` gets what one receiving pass accepted, up to
        ``batch_max`` envelopes a call, and answers which it refused; the batch is acknowledged
        once the call returned (:mod:`actors.transports.mailbox.drain`)."""
        if not 1 <= batch_max <= BATCH_MAX:
            raise InvalidArgument(f"batch_max must be 1..{BATCH_MAX}, not {batch_max!r}")
        return self._subscriptions.subscribe_batch(inbox, handler, batch_max=batch_max)

    def wait_drained(self, timeout_s: float) -> bool:
        """Block until every file that was in a subscribed ``new/`` when called has been
        handled (delivered, acknowledged or quarantined). False on timeout or close.
        Raises ``RuntimeError`` from a handler (it would wait for itself)."""
        if self._closed:
            return False
        return self._subscriptions.wait_drained(timeout_s)

    def close(self) -> None:
        """Stop the receiver (promptly: within one watcher step) and refuse later publishes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._subscriptions.close()
        self._ringer.close()

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Mailbox({str(self._root)!r}, {self._session_id!r})"
