"""A Linux inotify waker for the mailbox: the physical floor of a file mailbox's latency, and
no CPU at all while idle (the measurement that made it the Linux default is in
:func:`actors.transports.mailbox.bell.default_waker`).

It watches each ``new/`` directory for files renamed in (a publish) or created there (a
planted file, which the receiver then judges), and blocks in ``poll`` on the inotify
descriptor and on the receiver's interrupt pipe, so it wakes only when there is something to
do. watchfiles stays the portable waker.

An inotify *instance* is a per-user kernel budget (``fs.inotify.max_user_instances``, 128 by
default, shared with every other program of the user), so only the session parent takes one
(:class:`InotifyWatch`, inside :class:`~actors.transports.mailbox.bell.BellWaker`); every other
process is woken by its inbox's doorbell (:mod:`actors.transports.mailbox.bell`).
:class:`InotifyWaker` alone is what ``SHEPHERD_WAKER=inotify`` forces (the previous default of every
process).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import select
import struct
import threading
from collections.abc import Sequence

from actors.transports.mailbox.wakers import Wake, Waker, WakerFactory

__all__ = ["InotifyWaker", "InotifyWatch", "inotify_available", "inotify_waker"]

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_BUFFER = 64 * 1024


@functools.cache
def _load() -> ctypes.CDLL | None:
    # The C library this process already runs on, first: ``find_library`` runs ``ldconfig``
    # in a subprocess, which a short-lived command (each CLI call opens a mailbox) would pay
    # on every call; it is only the fallback where the process's own symbols lack inotify.
    lib = ctypes.CDLL(None, use_errno=True)
    if not hasattr(lib, "inotify_init1"):
        from ctypes.util import find_library

        name = find_library("c")
        if name is None:
            return None
        lib = ctypes.CDLL(name, use_errno=True)
        if not hasattr(lib, "inotify_init1"):
            return None
    lib.inotify_init1.argtypes = [ctypes.c_int]
    lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return lib


def inotify_available() -> bool:
    return os.name == "posix" and _load() is not None


class InotifyWatch:
    """One inotify instance watching directories for files added (renamed or created in).

    The instance is the scarce thing (``max_user_instances`` per user, 128 by default, shared
    by every process of the user); watches are cheap. Raises ``OSError`` when either cannot be
    had (``EMFILE``: no instance left; ``ENOSPC``: no watch left)."""

    def __init__(self) -> None:
        lib = _load()
        if lib is None:
            raise OSError(errno.ENOSYS, "inotify is not available")
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1 failed: {os.strerror(code)}")
        self._lib = lib
        self._fd: int = fd
        self._dirs: dict[int, str] = {}

    def fileno(self) -> int:
        return self._fd

    def add(self, directory: str) -> None:
        wd = self._lib.inotify_add_watch(self._fd, os.fsencode(directory), IN_MOVED_TO | IN_CREATE)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot watch {directory}: {os.strerror(code)}")
        self._dirs[wd] = directory

    def read(self) -> tuple[set[str], bool]:
        """The watched directories that had files added since the last read, and whether
        events were lost (queue overflow: then rescan everything)."""
        dirs: set[str] = set()
        overflow = False
        while True:
            try:
                data = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                break
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size + length
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                elif wd in self._dirs and not mask & IN_IGNORED:
                    dirs.add(self._dirs[wd])
        return dirs, overflow

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class InotifyWaker:
    """Wake on files added to the watched directories; block (no CPU) otherwise."""

    mode = "inotify"

    def __init__(self, dirs: Sequence[str], interrupt: threading.Event) -> None:
        self._interrupt = interrupt
        self._watch = InotifyWatch()
        try:
            for directory in dirs:
                self._watch.add(directory)
        except OSError:
            self._watch.close()
            raise
        self._fd = self._watch.fileno()
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._interrupt_fd = getattr(interrupt, "fileno", lambda: None)()
        if self._interrupt_fd is not None:
            self._poll.register(self._interrupt_fd, select.POLLIN)

    def wait(self, timeout_ms: int) -> Wake:
        if self._fd < 0:
            raise RuntimeError("waker is closed")
        if self._interrupt.is_set():
            return Wake(interrupted=True)
        # Without an interrupt pipe, look at the event at least every 50 ms.
        step = timeout_ms if self._interrupt_fd is not None else min(timeout_ms, 50)
        remaining = timeout_ms
        while True:
            ready = self._poll.poll(max(step, 0))
            if self._interrupt.is_set():
                return Wake(interrupted=True)
            if any(fd == self._fd for fd, _ in ready):
                dirs, overflow = self._watch.read()
                if overflow:  # events were lost: have the receiver rescan everything
                    return Wake(timed_out=True)
                return Wake(dirs=frozenset(dirs))
            remaining -= step
            if remaining <= 0:
                return Wake(timed_out=True)

    def close(self) -> None:
        self._fd = -1
        self._watch.close()


def inotify_waker() -> WakerFactory:
    def make(dirs: Sequence[str], interrupt: threading.Event) -> Waker:
        return InotifyWaker(dirs, interrupt)

    return make
