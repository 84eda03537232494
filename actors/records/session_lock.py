"""One parent per session directory: the supervisor holds an exclusive ``flock`` on the directory
for its whole life, taken before anything of the session is read or written (and one node per
node directory: ``shepherd node`` holds its ``--dir`` the same way).

Rules:

1. The lock is taken at once or not at all: a directory another supervisor holds is
   ``session_busy``, naming that supervisor's pid, and nothing of the session was read or
   written. Two supervisors started at the same moment on one directory: exactly one runs.
2. The kernel releases the lock when the holder ends, however it ends (killed included): there
   is nothing to clean up, and no pid to trust that another process may have reused.
3. Only the supervisor holds it: the descriptor is not inherited by the processes it starts
   (the agents' bridges outlive a killed parent, and must not keep its session locked).
4. A directory that cannot be made or opened (under a regular file, on a read-only file
   system, ...) is ``invalid_argument`` naming the path and the cause.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from actors.records.session_info import os_failure, private_dir
from protocol.core.errors import SessionBusy, ShepherdError

__all__ = ["DirectoryLock", "lock_holder", "lock_session"]

_LOCKS = Path("/proc/locks")


class DirectoryLock:
    """The exclusive lock on one directory (module rules), made if missing; a directory held
    by another process is the error ``busy`` makes of its holder's pid (None: not known).
    :meth:`release` ends it early (the process's end ends it anyway)."""

    def __init__(self, path: Path, busy: Callable[[int | None], ShepherdError]) -> None:
        self.path = path
        private_dir(path)
        try:
            fd = _open_dir(path)
        except OSError as exc:
            raise os_failure(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(fd)
            os.close(fd)
            raise busy(holder) from None
        except OSError as exc:  # a file system without locks
            os.close(fd)
            raise os_failure(exc, path) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # the lock goes with its last descriptor


def lock_session(session_dir: Path) -> DirectoryLock:
    """A supervisor's lock on its session directory: another one's is ``session_busy``."""

    def busy(holder: int | None) -> ShepherdError:
        who = f"supervisor pid {holder}" if holder is not None else "another supervisor"
        return SessionBusy(
            f"{session_dir} is a live session ({who}); stop it first or use another --session-dir"
        )

    return DirectoryLock(session_dir, busy)


def _open_dir(path: Path) -> int:
    # O_CLOEXEC (and Python's non-inheritable descriptors): no child keeps the lock (rule 3)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def lock_holder(fd: int) -> int | None:
    """The pid holding an ``flock`` on the file open as ``fd``, as the kernel lists it
    (``/proc/locks``); None if it cannot be told (the lock was released meanwhile, or the
    holder is not visible from here)."""
    st = os.fstat(fd)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        listed = _LOCKS.read_text()
    except OSError:  # not Linux, or not readable here: the holder is not named
        return None
    for line in listed.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line starts "1: ->"
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            with contextlib.suppress(ValueError):
                pid = int(fields[4])
                return pid if pid > 0 else None
    return None
