"""A Linux inotify waker for the mailbox: the physical floor of a file mailbox's latency, and
no CPU at all while idle (issue 7; PERF.md: ~0.4 ms p50 against ~2 ms for watchfiles at a
1 ms step, which also costs ~3% of a core per idle process).

It watches each ``new/`` directory for files renamed in (a publish) or created there (a
planted file, which the receiver then judges), and blocks in ``poll`` on the inotify
descriptor and on the receiver's interrupt pipe, so it wakes only when there is something to
do. watchfiles stays the portable waker; this one is chosen on Linux when inotify works.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import select
import struct
import threading
from collections.abc import Sequence

from actors.mailbox_watch import Wake, Waker, WakerFactory, watchfiles_waker

__all__ = ["InotifyWaker", "default_waker", "inotify_available", "inotify_waker"]

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
    name = ctypes.util.find_library("c")
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


class InotifyWaker:
    """Wake on files added to the watched directories; block (no CPU) otherwise."""

    def __init__(self, dirs: Sequence[str], interrupt: threading.Event) -> None:
        lib = _load()
        if lib is None:
            raise OSError(errno.ENOSYS, "inotify is not available")
        self._interrupt = interrupt
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        self._dirs: dict[int, str] = {}
        try:
            for directory in dirs:
                wd = lib.inotify_add_watch(fd, os.fsencode(directory), IN_MOVED_TO | IN_CREATE)
                if wd < 0:
                    raise OSError(ctypes.get_errno(), f"cannot watch {directory}")
                self._dirs[wd] = directory
        except OSError:
            os.close(fd)
            raise
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
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
                return self._read()
            remaining -= step
            if remaining <= 0:
                return Wake(timed_out=True)

    def _read(self) -> Wake:
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
        if overflow:  # events were lost: have the receiver rescan everything
            return Wake(timed_out=True)
        return Wake(dirs=frozenset(dirs))

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def inotify_waker() -> WakerFactory:
    def make(dirs: Sequence[str], interrupt: threading.Event) -> Waker:
        return InotifyWaker(dirs, interrupt)

    return make


def default_waker(*, debounce_ms: int, step_ms: int) -> WakerFactory:
    """inotify where it works (Linux), else watchfiles with the given debounce and step.
    ``SHEPHERD_WAKER=watchfiles`` forces the portable one."""
    if os.environ.get("SHEPHERD_WAKER", "").lower() != "watchfiles" and inotify_available():
        return inotify_waker()
    return watchfiles_waker(debounce_ms=debounce_ms, step_ms=step_ms)
