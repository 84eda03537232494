"""An agent's bridge process and its log: how the parent's launcher and a ``shepherd node``
start a bridge (``shepherd-child run``, in a session of its own), its private log, and the end
of that log (what an exit is reported with)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["LOG_TAIL_BYTES", "open_private_log", "read_log_tail", "start_bridge"]


#: How much of the end of an agent's log ``log_tail`` reads.
LOG_TAIL_BYTES = 8 * 1024


def start_bridge(
    python: str, cwd: str, env: dict[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    """A child bridge (``shepherd-child run``) in a session of its own, its output to its
    private log: how the parent's launcher and a ``shepherd node`` start one."""
    log = open_private_log(log_path)
    try:
        return subprocess.Popen(
            [python, "-m", "actors.child.cli", "run"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(log)


def open_private_log(path: Path) -> int:
    """Open (create) an agent's log for appending, private to this user (0600, also when it
    already existed with wider permissions), never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd


def read_log_tail(path: Path, lines: int, max_bytes: int = LOG_TAIL_BYTES) -> list[str]:
    """The last ``lines`` lines of ``path`` (at most ``max_bytes`` of it are read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - max_bytes), os.SEEK_SET)
        data = os.read(fd, max_bytes)
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:
        text = text.partition("\n")[2]  # the first line read is probably cut
    return [line for line in text.splitlines() if line.strip()][-lines:]
