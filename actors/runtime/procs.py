"""Process plumbing shared by the bridge and its adapters: exit statuses, finding and
stopping the processes of a session or of a process tree, and pumping a child's pipes.

Rules (no orphans: nothing an agent started outlives it):
- Linux ``/proc`` is the source of truth for membership (session, group, parent, start
  time); elsewhere the scans find nothing and callers rely on process groups alone.
- A process is signalled through a pidfd opened *before* the signal: once open, the pid
  cannot be reused under us, so a kill never reaches an unrelated process that inherited
  the number. A pid alone is never trusted after its process may have been reaped.
- Stopping is SIGTERM, a grace period (:data:`KILL_GRACE_S`), then SIGKILL, repeated while
  new members appear (a fork racing the scan).
- :func:`pump_process` never reaps: the caller does, so a process group id stays valid for
  as long as the caller may still signal it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from actors.runtime.clock import SystemClock
from actors.runtime.log import logger

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "KILL_GRACE_S",
    "OUTPUT_TAIL_BYTES",
    "PIPE_LINGER_S",
    "OutputTail",
    "Proc",
    "descendants",
    "exit_status",
    "kill_all",
    "pid_alive",
    "pump_process",
    "raise_open_files_limit",
    "restore_open_files_limit",
    "session_members",
    "signal_group",
    "start_time",
    "tagged",
    "terminate_session",
]

#: A tool result keeps the last 8 KiB of a command's output (the watchdog hashes it; `read`
#: shows its tail): enough to see an error, never a whole build log in one envelope.
OUTPUT_TAIL_BYTES = 8 * 1024
#: How long a stopped process gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 2.0
#: After a process exited, how long its pipes may stay open (held by a background child)
#: before the reader gives up on them.
PIPE_LINGER_S = 0.5


#: the most descriptors :func:`raise_open_files_limit` asks for
OPEN_FILES_WANTED = 1 << 16


def raise_open_files_limit(wanted: int = OPEN_FILES_WANTED) -> int:
    """Raise this process's soft limit on open descriptors towards its hard limit (at most
    ``wanted``); return the soft limit it had, for :func:`restore_open_files_limit`.

    Why: the parent holds one pidfd per agent (plus a few per CLI call), and the usual soft
    limit of 1024 would refuse the ~1,000th agent although the hard limit allows far more (the
    Go runtime raises it the same way). Never lowers it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            logger.warning("cannot raise the open-files limit to {}: {}", target, exc)
    return soft


def restore_open_files_limit(pid: int, soft: int) -> None:
    """Give a child we started the soft limit we had before raising ours: what it runs (an
    agent, its tools) may still use ``select``, which fails past 1,024 descriptors."""
    import resource

    with contextlib.suppress(OSError, ValueError, AttributeError):
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


# ---------------------------------------------------------------------- sessions and groups


def _stat_fields(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of ``pid`` from /proc, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        fields = data[data.rindex(b")") + 2 :].split()
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])
    except (ValueError, IndexError):
        return None


def session_members(sid: int, *, pgid: int | None = None) -> list[int]:
    """Live (non-zombie) processes of session ``sid`` (or only of group ``pgid``), never
    this process. Linux /proc; empty elsewhere."""
    me = os.getpid()
    members: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return members
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        fields = _stat_fields(int(name))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if fields[3] == sid and (pgid is None or fields[2] == pgid):
            members.append(int(name))
    return members


def _open_pidfds(pids: list[int]) -> dict[int, int]:
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fds[pid] = os.pidfd_open(pid)
    return fds


def _signal_fds(fds: Mapping[int, int], sig: int) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, sig)


def _wait_fds(fds: dict[int, int], timeout_s: float, monotonic: Callable[[], float]) -> None:
    """Wait until every pidfd in ``fds`` is readable (its process exited) or the time is up;
    closes and removes the ones that fired."""
    deadline = monotonic() + timeout_s
    while fds:
        remaining = deadline - monotonic()
        if remaining <= 0:
            return
        poller = select.poll()
        by_fd = {fd: pid for pid, fd in fds.items()}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll(max(1, int(remaining * 1000))):
            os.close(fd)
            del fds[by_fd[fd]]


def terminate_session(
    sid: int,
    *,
    grace_s: float = KILL_GRACE_S,
    pgid: int | None = None,
    monotonic: Callable[[], float] | None = None,
) -> list[int]:
    """SIGTERM every live process of session ``sid`` (or group ``pgid`` in it), SIGKILL what
    is still there after ``grace_s``; repeated while new members appear (a fork racing the
    scan). Returns the pids signalled. Usable by the parent too: the bridge's pid is its
    session id, and the command adapter's per-turn process groups live in that session."""
    clock = monotonic or SystemClock().monotonic
    signalled: list[int] = []
    for _ in range(5):
        pids = session_members(sid, pgid=pgid)
        if not pids:
            break
        signalled.extend(pids)
        fds = _open_pidfds(pids)
        try:
            _signal_fds(fds, signal.SIGTERM)
            _wait_fds(fds, grace_s, clock)
            _signal_fds(fds, signal.SIGKILL)
            _wait_fds(fds, 1.0, clock)
        finally:
            for fd in fds.values():
                os.close(fd)
    return signalled


def signal_group(pgid: int, sig: int) -> bool:
    """Signal process group ``pgid``; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        logger.warning("not allowed to signal process group {}", pgid)
        return False
    return True


# ---------------------------------------------------------------------- pipes


def pump_process(
    proc: subprocess.Popen[bytes],
    on_data: Callable[[IO[bytes], bytes], None],
    *,
    linger_s: float = PIPE_LINGER_S,
    monotonic: Callable[[], float] | None = None,
) -> None:
    """Read ``proc``'s stdout/stderr pipes (whichever exist) until they close, or until the
    process itself has exited and ``linger_s`` passed (a background grandchild may hold a
    pipe forever). Does NOT reap ``proc``: the caller does, so its pid (and process group)
    cannot be reused while the caller may still signal it. Runs on a worker thread."""
    clock = monotonic or SystemClock().monotonic
    streams = [s for s in (proc.stdout, proc.stderr) if s is not None]
    pidfd: int | None = None
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)
    import selectors  # here: a CLI call that only probes a pid does not load it

    with selectors.DefaultSelector() as sel:
        for stream in streams:
            sel.register(stream, selectors.EVENT_READ, stream)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, None)
        open_streams = len(streams)
        exited_at: float | None = None
        try:
            while open_streams:
                if exited_at is None:
                    timeout = None if pidfd is not None else 0.1
                else:
                    timeout = exited_at + linger_s - clock()
                    if timeout <= 0:
                        return
                ready = sel.select(timeout)
                if pidfd is None and exited_at is None and proc.poll() is not None:
                    exited_at = clock()
                for key, _ in ready:
                    source: IO[bytes] | None = key.data
                    if source is None:  # the pidfd: the process exited
                        sel.unregister(key.fileobj)
                        exited_at = clock()
                        continue
                    data = os.read(source.fileno(), 65536)
                    if data:
                        on_data(source, data)
                    else:
                        sel.unregister(source)
                        open_streams -= 1
        finally:
            if pidfd is not None:
                os.close(pidfd)


class OutputTail:
    """The last ``limit`` bytes written to it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.dropped = False

    def write(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= self._limit:
            self._size -= len(self._chunks.popleft())
            self.dropped = True

    def text(self) -> str:
        data = b"".join(self._chunks)
        if len(data) > self._limit:
            data = data[-self._limit :]
            self.dropped = True
        text = data.decode("utf-8", errors="replace")
        return f"[… earlier output cut …]\n{text}" if self.dropped else text


# ---------------------------------------------------------------------- process trees
# (Linux /proc; elsewhere they find nothing and PiProcess.close() relies on the process
# group and Pi's own SIGTERM handler)

Proc = tuple[int, str]  # (pid, start time): a pid alone may be reused


def _proc_stat(pid: int) -> tuple[int, str, str] | None:
    """(ppid, state, start time) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    return int(fields[1]), fields[0], fields[19]


def pid_alive(pid: int) -> bool:
    """Does a process with this pid exist (a zombie included; someone else's too)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> str | None:
    """When a live process started (clock ticks since boot, from /proc): with its pid, what
    names it across pid reuse. ``None``: gone, a zombie, or no /proc."""
    stat = _proc_stat(pid)
    return stat[2] if stat is not None and stat[1] != "Z" else None


def descendants(root: int) -> set[Proc]:
    """Every live descendant of ``root`` (with its start time), found through /proc."""
    children: dict[int, list[int]] = {}
    start: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for name in entries:
        if not name.isdigit():
            continue
        stat = _proc_stat(int(name))
        if stat is not None:
            children.setdefault(stat[0], []).append(int(name))
            start[int(name)] = stat[2]
    found: set[Proc] = set()
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.add((pid, start[pid]))
        stack.extend(children.get(pid, ()))
    return found


def tagged(var: str, value: str) -> set[Proc]:
    """Every live process whose environment holds ``var=value`` (same user only)."""
    needle = f"{var}={value}".encode()
    found: set[Proc] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            stat = _proc_stat(int(name))
            if stat is not None:
                found.add((int(name), stat[2]))
    return found


def _alive(proc: Proc) -> bool:
    """Still running (a zombie has finished running) and still the same process."""
    stat = _proc_stat(proc[0])
    return stat is not None and stat[2] == proc[1] and stat[1] != "Z"


def kill_all(procs: set[Proc], timeout: float = 5.0) -> None:
    """SIGKILL each still-running process of the set (and its group), then wait until each
    has stopped running. Orphans are reaped by init, so "stopped" includes zombies."""
    own_group = os.getpgrp()
    waiting: list[int] = []
    for pid, started in procs:
        try:
            fd = os.pidfd_open(pid)  # pins the process: its pid cannot be reused under us
        except OSError:
            continue
        if not _alive((pid, started)):
            os.close(fd)
            continue
        waiting.append(fd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(pid)
            if pgid != own_group:
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    try:
        for fd in waiting:
            # A pidfd becomes readable when its process terminates: no polling loop needed.
            # poll, not select: a parent of many agents holds descriptors past FD_SETSIZE.
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll(timeout * 1000)
    finally:
        for fd in waiting:
            os.close(fd)
