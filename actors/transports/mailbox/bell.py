"""Doorbells: waking an inbox's reader without an inotify instance per process.

Why: inotify instances are a per-user kernel budget (``fs.inotify.max_user_instances``, 128 by
default, shared by every process of the user: editors and file watchers too). With one per
bridge, a session ran out past ~120 agents, and every later process only polled. A doorbell is
a FIFO per inbox: the publisher rings it after the rename into ``new/``, the reader blocks in
``poll`` on it. It costs one descriptor in the reader, and no kernel budget beyond a pipe.

Rules:
- The bell is ``inbox/<owner>/bell`` (:data:`BELL_NAME`), beside ``tmp/ new/ cur/`` and never
  in ``new/`` (which holds envelopes only: anything else there is quarantined unopened). It is
  a FIFO, 0600, made by whoever makes the inbox (:func:`make_bell`, from
  ``Mailbox.ensure_inbox``), or by its reader if it is missing; removed with the inbox.
- A reader opens it ``O_RDWR | O_NONBLOCK | O_NOFOLLOW`` (being a writer too, it never sees
  end-of-file or a hang-up) and checks with ``fstat`` that it is a FIFO of ours, mode 0600
  (:func:`open_bell`). Anything else at that path (a symlink, a regular file, someone else's
  FIFO) is refused and never written or read: the inbox is then woken another way (inotify,
  else only the fallback rescan), and the receiver reports how (``Mailbox.wake_mode``).
- A publisher rings after the rename (:class:`BellRinger`): ``open(O_WRONLY | O_NONBLOCK |
  O_NOFOLLOW)`` (``ENXIO``: nobody listens, fine), ``fstat`` (a FIFO of ours, else nothing is
  written), one byte (``EAGAIN``: already rung, fine). A ring is only a hint and never fails a
  publish: the reader still rescans ``new/`` on the fallback interval, so a file planted
  without a ring is found then.
- No ring is lost between a rescan and the wait: the reader empties the bell *before* it
  rescans ``new/``, and opens it before its first rescan, so a publish that renamed its file
  after a rescan listed ``new/`` rang a bell that was already open.
- A bell swapped under its reader (unlinked, replaced) is noticed on the next check (lstat of
  the path against the open descriptor, at least once per fallback interval); the waker then
  fails and the receiver builds a new one, which reports the new way the inbox is woken.

Which process uses what (:func:`default_waker`): the session parent watches its own inbox with
one inotify instance *and* its bell (so either a planted file or a ring wakes it, and running
out of inotify instances costs nothing); every other process (each bridge, each CLI call's and
each ``shepherd-child message|done``'s one-shot inbox) uses the bell, and inotify only for an
inbox whose bell it refused (without inotify: the parent uses watchfiles, the others bells).
``SHEPHERD_WAKER=bell|inotify|watchfiles|polling`` forces one.

Measured (``scripts/bench.py``): a ring costs ~1 us on a cached descriptor against ~12 us for
open + fstat + write + close, so publishers keep the last :data:`RINGER_CACHE` bells open (an
LRU: the parent publishes to every agent, and descriptors are a per-process budget too; a
one-shot inbox's bell, rung once, is not kept). A cached bell whose reader went away fails
with ``EPIPE`` and is dropped (Python ignores
``SIGPIPE``, which a write to a FIFO without a reader would otherwise raise).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from actors.runtime.log import logger
from actors.transports.mailbox.files import FILE_MODE, describe
from actors.transports.mailbox.inotify import InotifyWatch, inotify_available
from actors.transports.mailbox.wakers import (
    WAKE_BELL,
    WAKE_INOTIFY,
    WAKE_POLLING,
    Wake,
    Waker,
    WakerFactory,
    polling_waker,
    watchfiles_waker,
)

__all__ = [
    "BELL_NAME",
    "RINGER_CACHE",
    "BellRinger",
    "BellWaker",
    "bell_path",
    "bell_waker",
    "default_waker",
    "make_bell",
    "open_bell",
    "remove_bell",
]

BELL_NAME = "bell"
#: bells a publisher keeps open (least recently rung closed first)
RINGER_CACHE = 32
_OPEN_READ = os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_RING = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def bell_path(box_dir: str | os.PathLike[str]) -> str:
    """The bell of the inbox whose directory is ``box_dir``."""
    return os.path.join(box_dir, BELL_NAME)


def make_bell(box_dir: str | os.PathLike[str]) -> None:
    """Create the inbox's bell (a FIFO, 0600) unless there already is one. Something else at
    its path is left alone (and refused by readers and publishers)."""
    path = bell_path(box_dir)
    try:
        os.mkfifo(path, FILE_MODE)
    except FileExistsError:
        return
    st = os.lstat(path)
    if stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) != FILE_MODE:
        os.chmod(path, FILE_MODE)  # the umask may have taken owner bits


def remove_bell(box_dir: str | os.PathLike[str]) -> None:
    """Remove the inbox's bell, whatever it is (unlink never follows a link)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(bell_path(box_dir))


def _check_bell(fd: int, path: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISFIFO(st.st_mode):
        raise OSError(errno.EINVAL, f"{path} is a {describe(st.st_mode)}, not a FIFO")
    if st.st_uid != os.getuid():
        raise OSError(errno.EPERM, f"{path} belongs to uid {st.st_uid}, not to us")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise OSError(errno.EPERM, f"{path} is open to other users (mode {st.st_mode:o})")
    return st


def open_bell(box_dir: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """Open the inbox's bell for its reader (creating a missing one): the descriptor and its
    ``fstat``. Raises ``OSError`` naming the reason when it is not a private FIFO of ours."""
    path = bell_path(box_dir)
    try:
        fd = os.open(path, _OPEN_READ)
    except FileNotFoundError:
        make_bell(box_dir)
        fd = os.open(path, _OPEN_READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"{path} is a symbolic link; not followed") from None
        raise
    try:
        return fd, _check_bell(fd, path)
    except OSError:
        os.close(fd)
        raise


class BellRinger:
    """A publisher's side: ring an inbox's bell, keeping the last :data:`RINGER_CACHE` bells
    open. Thread-safe; never raises (a ring is a hint)."""

    def __init__(self, cache: int = RINGER_CACHE) -> None:
        self._cache = max(cache, 0)
        self._open: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()  # held across a write: an fd is never closed under it
        self._closed = False

    def ring(self, box_dir: str, *, keep: bool = True) -> bool:
        """Ring ``box_dir``'s bell; True if a byte went in (or the bell was already rung).
        ``keep=False``: do not cache it (a one-shot inbox, rung once)."""
        with self._lock:
            if self._closed:
                return False
            fd = self._open.get(box_dir)
            if fd is not None:
                self._open.move_to_end(box_dir)
                if self._write(fd):
                    return True
                del self._open[box_dir]  # its reader went away: open the path afresh
                os.close(fd)
            path = bell_path(box_dir)
            try:
                fd = os.open(path, _OPEN_RING)
            except OSError:
                return False  # ENXIO: nobody listens; ENOENT, ELOOP, ...: no usable bell
            try:
                _check_bell(fd, path)
            except OSError as exc:
                os.close(fd)
                logger.debug("mailbox: not ringing {}: {}", path, exc)
                return False
            rung = self._write(fd)
            if not rung or not keep or self._cache == 0:
                os.close(fd)
                return rung
            self._open[box_dir] = fd
            while len(self._open) > self._cache:
                _, old = self._open.popitem(last=False)
                os.close(old)
            return True

    @staticmethod
    def _write(fd: int) -> bool:
        try:
            os.write(fd, b"\0")
        except BlockingIOError:
            return True  # full: rung many times already, and not read yet
        except OSError:  # EPIPE: no reader any more
            return False
        return True

    def forget(self, box_dir: str) -> None:
        """Close the cached bell of an inbox that is going away."""
        with self._lock:
            fd = self._open.pop(box_dir, None)
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            fds, self._open = list(self._open.values()), OrderedDict()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class BellWaker:
    """Wake on the bells of the watched inboxes and, where asked, on an inotify watch.

    ``dirs`` are ``new/`` directories; each one's bell is beside it. ``inotify``: ``"always"``
    watches every directory with inotify as well (the parent: one instance), ``"fallback"``
    only those whose bell was refused, ``"never"`` none. A directory with neither is only
    rescanned on the fallback interval. ``modes`` / ``problems`` say which, per directory.
    """

    def __init__(
        self,
        dirs: Sequence[str],
        interrupt: threading.Event,
        *,
        bells: bool = True,
        inotify: str = "fallback",
    ) -> None:
        if inotify not in ("always", "fallback", "never"):
            raise ValueError(f"inotify must be always, fallback or never, not {inotify!r}")
        self._interrupt = interrupt
        self._bells: dict[int, tuple[str, str, os.stat_result]] = {}  # fd -> dir, path, stat
        self._watch: InotifyWatch | None = None
        self.modes: dict[str, str] = {}
        self.problems: dict[str, str] = {}
        self._last_check = time.monotonic()
        try:
            for directory in dirs:
                if bells:
                    box = os.path.dirname(os.path.normpath(directory))
                    try:
                        fd, st = open_bell(box)
                    except OSError as exc:
                        self.problems[directory] = f"bell refused: {exc.strerror or exc}"
                    else:
                        self._bells[fd] = (directory, bell_path(box), st)
                        self.modes[directory] = WAKE_BELL
                if inotify == "always" or (inotify == "fallback" and directory not in self.modes):
                    self._add_inotify(directory)
                self.modes.setdefault(directory, WAKE_POLLING)
        except BaseException:
            self.close()
            raise
        self._poll = select.poll()
        for fd in self._bells:
            self._poll.register(fd, select.POLLIN)
        if self._watch is not None:
            self._poll.register(self._watch.fileno(), select.POLLIN)
        self._interrupt_fd = getattr(interrupt, "fileno", lambda: None)()
        if self._interrupt_fd is not None:
            self._poll.register(self._interrupt_fd, select.POLLIN)
        self._closed = False

    def _add_inotify(self, directory: str) -> None:
        try:
            if self._watch is None:
                self._watch = InotifyWatch()
            self._watch.add(directory)
        except OSError as exc:
            reason = f"inotify refused: {exc.strerror or exc}"
            old = self.problems.get(directory)
            self.problems[directory] = f"{old}; {reason}" if old else reason
            return
        self.modes[directory] = WAKE_INOTIFY

    def wait(self, timeout_ms: int) -> Wake:
        if self._closed:
            raise RuntimeError("waker is closed")
        if self._interrupt.is_set():
            return Wake(interrupted=True)
        now = time.monotonic()
        if now - self._last_check >= max(timeout_ms, 1) / 1000:
            self._last_check = now
            self._check_bells()
        # Without an interrupt pipe, look at the event at least every 50 ms.
        step = timeout_ms if self._interrupt_fd is not None else min(timeout_ms, 50)
        remaining = timeout_ms
        while True:
            ready = self._poll.poll(max(step, 0))
            if self._interrupt.is_set():
                return Wake(interrupted=True)
            if ready:
                return self._read(ready)
            remaining -= step
            if remaining <= 0:
                return Wake(timed_out=True)

    def _read(self, ready: list[tuple[int, int]]) -> Wake:
        dirs: set[str] = set()
        for fd, _ in ready:
            bell = self._bells.get(fd)
            if bell is not None:
                with contextlib.suppress(BlockingIOError):
                    while os.read(fd, 4096):  # empty it *before* the rescan (module rules)
                        pass
                dirs.add(bell[0])
            elif self._watch is not None and fd == self._watch.fileno():
                added, overflow = self._watch.read()
                if overflow:  # events were lost: have the receiver rescan everything
                    return Wake(timed_out=True)
                dirs |= added
        return Wake(dirs=frozenset(dirs))

    def _check_bells(self) -> None:
        """Raise if a bell's path no longer names the FIFO we hold (module rules)."""
        for directory, path, st in self._bells.values():
            try:
                now = os.lstat(path)
            except OSError as exc:
                raise OSError(exc.errno, f"the bell of {directory} is gone: {exc}") from None
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise OSError(errno.ESTALE, f"the bell of {directory} was replaced")

    def close(self) -> None:
        self._closed = True
        bells, self._bells = self._bells, {}
        for fd in bells:
            with contextlib.suppress(OSError):
                os.close(fd)
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()


def bell_waker(*, bells: bool = True, inotify: str = "fallback") -> WakerFactory:
    """A factory for :class:`BellWaker` with these sources."""

    def make(dirs: Sequence[str], interrupt: threading.Event) -> Waker:
        return BellWaker(dirs, interrupt, bells=bells, inotify=inotify)

    return make


def default_waker(*, creator: bool, debounce_ms: int, step_ms: int) -> WakerFactory:
    """How a mailbox is woken (module rules): the session parent (``creator``) with inotify
    and bells, any other process with bells and inotify only where a bell is refused (without
    inotify: watchfiles for the parent, bells for the others). ``SHEPHERD_WAKER`` forces
    one: ``bell`` (bells only), ``inotify``, ``watchfiles`` or ``polling``.

    Where Linux's inotify is there, it is used through :mod:`actors.transports.mailbox.inotify` (the
    three libc calls over ctypes: no compiled dependency, and small enough to own), not through
    watchfiles, which is the fallback elsewhere. The reason is this measurement
    (``scripts/bench.py --quick --only delivery,idle``, 2 cores, medians of 3 runs; the tuned
    watchfiles row with ``SHEPHERD_WAKER=watchfiles``). watchfiles cannot block until an event
    comes: its loop wakes every ``step_ms``, so it trades latency against idle CPU.

    ==============================================  ==========  ===========  =================
    waker (one process, 100 inboxes)                idle p50    burst p50    idle CPU-s / 30 s
    ==============================================  ==========  ===========  =================
    watchfiles, debounce 10 ms / step 1 ms          2.2 ms      2.4 ms       0.30 (1% core)
    watchfiles defaults (debounce 1600 / step 50)   76 ms       673 ms       0.018
    inotify alone (``InotifyWaker``)                0.82 ms     0.67 ms      0.036
    doorbell alone (``BellWaker``, no inotify)      0.75 ms     0.62 ms      0.053
    raw inotify, no mailbox (the floor)             0.59 ms     0.43 ms      0.000
    ==============================================  ==========  ===========  =================
    """
    forced = os.environ.get("SHEPHERD_WAKER", "").strip().lower()
    match forced:
        case "bell":
            return bell_waker(inotify="never")
        case "inotify":
            from actors.transports.mailbox.inotify import inotify_waker

            return inotify_waker()
        case "watchfiles":
            return watchfiles_waker(debounce_ms=debounce_ms, step_ms=step_ms)
        case "polling":
            return polling_waker()
        case "":
            pass
        case _:
            logger.warning("SHEPHERD_WAKER={!r} is not bell|inotify|watchfiles|polling", forced)
    if inotify_available():
        return bell_waker(inotify="always" if creator else "fallback")
    if creator:  # no inotify: the parent notices planted files through watchfiles
        return watchfiles_waker(debounce_ms=debounce_ms, step_ms=step_ms)
    return bell_waker(inotify="never")
