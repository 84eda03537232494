"""``session.json``: what a running session tells the processes that reach it (its CLI
clients, MCP servers, a restarted supervisor), and where sessions live.

Rules:

1. A session's directory holds ``session.json`` (:class:`SessionInfo`, written privately by
   its supervisor); ``<state dir>/live/<session id>.json`` points at each running one.
2. A supervisor is live while its pid runs *and* that process started when the supervisor
   did (:func:`is_live`): a pid alone may have been reused by any process since.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

import msgspec

from actors.records.live import live_dir, state_dir
from actors.runtime import procs
from protocol.core.errors import InvalidArgument
from protocol.core.transport_url import TlsFiles

__all__ = [
    "SessionInfo",
    "is_live",
    "live_dir",
    "load_info",
    "os_failure",
    "private_dir",
    "state_dir",
    "write_private",
]


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    session_dir: str
    mailbox: str
    journal: str
    notifications: str
    parent_pid: int
    #: the supervisor's start time (:func:`actors.runtime.procs.start_time`): with its pid,
    #: what tells the live supervisor from a process that reused its pid
    parent_start: str | None = None
    created_at: float
    client_token: str
    version: int = 1
    #: the supervisor's command socket, when it runs ``shepherd`` calls itself
    #: (:mod:`actors.runtime.command_socket`; ``shepherd serve`` does)
    command_socket: str | None = None
    #: where the journal and the record of delivery live: ``file`` (the session directory) or
    #: ``nats`` (the transport's servers; :mod:`actors.session.records`)
    records: str = "file"
    #: the directory of the session's NATS authority (``serve --nats-auth``), if any: a client
    #: logs in as the account's parent user
    nats_auth: str | None = None
    #: the TLS files of the session's ``tls://`` servers (``serve --nats-ca``, ``--nats-cert``,
    #: ``--nats-key``), if any: a client builds its TLS context from them
    #: (:mod:`actors.transports.nats.tls`)
    nats_tls: TlsFiles | None = None
    #: whether the supervisor exports traces (``serve --otel``, the ``OTEL_*`` variables): a
    #: task's trace id (:func:`~protocol.core.tracecontext.task_trace_id`) then names spans
    traced: bool = False


def load_info(session_dir: Path) -> SessionInfo:
    try:
        return msgspec.json.decode((session_dir / "session.json").read_bytes(), type=SessionInfo)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidArgument(f"{session_dir}/session.json cannot be read: {exc}") from None


def is_live(info: SessionInfo) -> bool:
    """Is the supervisor that wrote ``info`` still running? Its pid alone may have been reused
    by any process since: the start time it recorded must match too."""
    started = procs.start_time(info.parent_pid)
    if info.parent_start is None:  # written without it: a live pid is taken as live (safe)
        return started is not None
    return started == info.parent_start


def os_failure(exc: OSError, wanted: Path | None = None) -> InvalidArgument:
    """What a caller is told of an OS error on a path it gave or implied (a session directory
    under a regular file, on a read-only file system, ...): the path and the cause, typed.
    ``wanted``: the path asked for, when the error is about another (a parent of it)."""
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    if wanted is not None and str(wanted) not in paths:
        paths.insert(0, str(wanted))
    cause = exc.strerror or str(exc) or type(exc).__name__
    head, *others = paths or ["a path"]
    return InvalidArgument(f"{head} cannot be used: {': '.join([*others, cause])}")


def private_dir(path: Path) -> None:
    """``path`` (and its parents) made if missing, ours and 0700: a session's records are
    nobody else's to read. One that cannot be made is ``invalid_argument`` (:func:`os_failure`).

    An existing directory is made private only when that cannot take anything from anyone:
    it is already 0700, empty, or a session's (it has ``session.json``). Any other, say
    ``--session-dir /etc`` given by mistake as root, is refused and left as it was."""
    try:
        existed = path.is_dir()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
        if st.st_uid != os.getuid():
            raise InvalidArgument(f"{path} belongs to another user")
        if stat.S_IMODE(st.st_mode) == 0o700:
            return
        if existed and any(path.iterdir()) and not (path / "session.json").exists():
            raise InvalidArgument(
                f"{path} is a directory that is neither empty nor a session's: it would be "
                "made private (0700); give a new or empty directory"
            )
        os.chmod(path, 0o700)
    except OSError as exc:
        raise os_failure(exc, path) from None


def write_private(path: Path, data: bytes) -> None:
    """``data`` in ``path`` (0600), whole or not at all: written beside it under a name of its
    own (two writers of one path never share a temporary file), synced, renamed."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
