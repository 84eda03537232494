"""The session mailbox on disk: its layout, file names and the file operations that keep it
private and safe against planted entries.

Rules:
- Layout: ``<root>/inbox/<owner>/{tmp,new,cur}``, the inbox's doorbell ``<owner>/bell`` (a
  FIFO, :mod:`actors.transports.mailbox.bell`) and ``<root>/quarantine/``; every directory 0700
  (:data:`DIR_MODE`), every file 0600 (:data:`FILE_MODE`). ``owner`` is ``parent``, an
  agent id, or a client's message id (:data:`INBOX_RE`).
- Names are ``<stamp:020d>.<pid>.<seq>.<message_id>.json`` (:data:`NAME_RE`); the stamp
  strictly increases per process, even if the clock repeats or steps back, so name order is
  publish order for every publisher.
- Files are created exclusively and never through a link (:data:`WRITE_FLAGS`), read
  ``O_NOFOLLOW | O_NONBLOCK`` and re-checked with ``fstat`` (:func:`read_file`); a directory
  we use must be ours and not a symlink, and a directory we create in must be ours or
  root's and not writable by others unless sticky.
- A file left in ``tmp/`` for :data:`ABANDONED_TMP_S` was abandoned by a writer that died
  mid-publish (a live publish renames it away within microseconds): the inbox's reader removes
  it (:func:`sweep_abandoned`). It was never accepted, so nothing accepted is lost.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import threading
from pathlib import Path

from actors.runtime.transport import PARENT_INBOX
from protocol.core.errors import (
    DiskFull,
    InvalidArgument,
    InvalidEnvelope,
    InvalidHandle,
    LimitExceeded,
    SessionUnavailable,
    ShepherdError,
    Unreachable,
)
from protocol.wire.envelopes import AnyEnvelope, encode_envelope, validate_addresses

__all__ = [
    "ABANDONED_TMP_S",
    "DIR_MODE",
    "FILE_MODE",
    "INBOX_RE",
    "NAME_RE",
    "READ_FLAGS",
    "WRITE_FLAGS",
    "check_inbox_dirs",
    "check_parent",
    "check_private",
    "default_runtime_dir",
    "describe",
    "encode_publishable",
    "envelope_file_name",
    "fsync_dir",
    "inbox_name",
    "make_private_dir",
    "move_unread",
    "read_file",
    "shown",
    "sweep_abandoned",
    "write_all",
    "write_error",
]
# ---------------------------------------------------------------------- layout and names

DIR_MODE = 0o700
FILE_MODE = 0o600
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NAME_RE = re.compile(r"\d{20}\.\d{1,10}\.\d{1,20}\.(shepherd-message-[0-9a-f]{8,64})\.json")
INBOX_RE = re.compile(r"parent|shepherd-(?:agent|message)-[0-9a-f]{8,64}")


def default_runtime_dir() -> Path:
    """Where session mailboxes go: a memory filesystem when there is one.

    Inboxes churn small files. Measured on a 2-core host: publishing (create in ``tmp/``,
    write, rename into ``new/``) runs ~42k/s on tmpfs, but ~2-5k/s on ext4, where a create
    costs 0.3-0.65 ms after heavy deletes. The journal and task notes, which must survive a
    reboot, stay on disk.

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
    import tempfile  # the last resort only: a short-lived command does not load it

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


def envelope_file_name(message_id: str, now_ns: int) -> str:
    """The name of a new envelope file in ``tmp/`` and then ``new/`` (see the module rules)."""
    stamp, seq = _STAMPS.next(now_ns)
    return f"{stamp:020d}.{os.getpid()}.{seq}.{message_id}.json"


def inbox_name(owner: object) -> str:
    """``owner`` if it is a legal inbox name, else ``invalid_handle``."""
    if not isinstance(owner, str) or INBOX_RE.fullmatch(owner) is None:
        raise InvalidHandle(
            f"{shown(owner)} is not an inbox name ({PARENT_INBOX!r}, an agent id or a message id)"
        )
    return owner


def encode_publishable(inbox: str, envelope: AnyEnvelope, session_id: str, max_bytes: int) -> bytes:
    """What every transport checks before it accepts ``envelope`` for ``inbox``, and its bytes:
    a legal inbox name, well-formed ids (they end up in names: checked before any I/O), this
    session's, and within ``max_envelope_bytes``."""
    inbox_name(inbox)
    validate_addresses(envelope)
    if envelope.session_id != session_id:
        raise InvalidEnvelope(f"envelope is for session {envelope.session_id}, not this one")
    data = encode_envelope(envelope)
    if len(data) > max_bytes:
        raise LimitExceeded(
            f"envelope is {len(data)} bytes, over the {max_bytes}-byte limit (max_envelope_bytes)"
        )
    return data


def shown(value: object) -> str:
    """``value`` as an error message may quote it: repr, cut at 120 characters."""
    text = repr(value)
    return text if len(text) <= 120 else text[:120] + "…"


def describe(mode: int) -> str:
    """What kind of file ``mode`` is, in words."""
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


# ---------------------------------------------------------------------- directories


def check_private(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise InvalidArgument(f"{path} is a symbolic link; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidArgument(f"{path} is a {describe(st.st_mode)}, not a directory")
    if st.st_uid != os.getuid():
        raise InvalidArgument(f"{path} belongs to uid {st.st_uid}, not to us ({os.getuid()})")


def make_private_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, DIR_MODE)
    st = os.lstat(path)
    check_private(path, st)
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)  # the umask may have taken owner bits; others never get any


def check_parent(path: Path) -> None:
    """Whoever can write the parent can swap our directory: it must be ours or root's, and
    writable by others only if sticky (like /tmp or /dev/shm)."""
    st = os.stat(path)
    if st.st_uid not in (os.getuid(), 0):
        raise InvalidArgument(f"{path} belongs to uid {st.st_uid}; refusing to create in it")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise InvalidArgument(f"{path} is writable by other users and not sticky")


def check_inbox_dirs(
    inbox: str, box_dir: str, new_dir: str
) -> tuple[os.stat_result, os.stat_result]:
    """The ``lstat`` of ``box_dir`` and ``new_dir``, both real directories, or
    ``invalid_handle``."""
    found = []
    for directory in (box_dir, new_dir):
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            raise InvalidHandle(f"no inbox {inbox!r} in this session") from None
        if not stat.S_ISDIR(st.st_mode):  # never write through a symlink planted for an inbox
            kind = describe(st.st_mode)
            raise InvalidHandle(f"inbox {inbox!r} is a {kind}; refusing to write to it")
        found.append(st)
    return found[0], found[1]


# ---------------------------------------------------------------------- files

#: how old a file in ``tmp/`` must be to count as abandoned by a writer that died
ABANDONED_TMP_S = 600.0


def sweep_abandoned(
    tmp_dir: str, now_s: float, max_age_s: float = ABANDONED_TMP_S
) -> list[tuple[str, int]]:
    """Remove the entries of ``tmp_dir`` (never a directory) last modified ``max_age_s`` or
    more before ``now_s``; return the ``(name, size)`` of each one removed."""
    removed: list[tuple[str, int]] = []
    try:
        scan = os.scandir(tmp_dir)
    except OSError:
        return removed
    with scan:
        for entry in scan:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) or now_s - st.st_mtime < max_age_s:
                continue
            try:
                os.unlink(entry.path)
            except OSError:
                continue
            removed.append((entry.name, st.st_size))
    return removed


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_error(inbox: str, exc: OSError) -> ShepherdError:
    if exc.errno == errno.ENOENT:
        return InvalidHandle(f"no inbox {inbox!r} in this session")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"no space left for inbox {inbox!r}: {exc.strerror}")
    if exc.errno in _PASSING:
        return Unreachable(f"cannot write to inbox {inbox!r} now: {exc}")
    return SessionUnavailable(f"cannot write to inbox {inbox!r}: {exc}")


#: errors of a write that may pass by themselves (descriptors, memory, an interrupted call): a
#: publisher tries the same envelope again for a while
_PASSING = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.EINTR, errno.ENOMEM, errno.ENOBUFS}
)


def read_file(path: str, max_bytes: int) -> bytes:
    """Read a regular file without following a link or blocking on a swapped-in FIFO."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidEnvelope("the entry became a symbolic link; it was not followed") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidEnvelope(f"the entry is a {describe(st.st_mode)}, not a regular file")
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


def move_unread(inbox: Path, aside: Path) -> int:
    """The file mailbox's set-aside: every file in ``inbox/new`` moved into ``aside``."""
    new = inbox / "new"
    try:
        names = sorted(os.listdir(new))
    except FileNotFoundError:
        return 0
    if names:
        aside.mkdir(mode=0o700, parents=True, exist_ok=True)
    moved = 0
    for name in names:
        try:
            shutil.move(os.fspath(new / name), os.fspath(aside / name))
        except FileNotFoundError:
            continue
        moved += 1
    return moved
