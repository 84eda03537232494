"""``session.json``: what a running session tells the processes that reach it (its CLI
clients, MCP servers, a restarted supervisor), and where sessions live.

Rules:

1. A session's directory holds ``session.json`` (:class:`SessionInfo`, written privately by
   its supervisor); ``<state dir>/live/<session id>.json`` points at each running one.
2. A supervisor is live while its pid runs *and* that process started when the supervisor
   did (:func:`is_live`): a pid alone may have been reused by any process since.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from actors.records.live import live_dir, state_dir
from actors.runtime import procs
from protocol.errors import InvalidArgument

__all__ = ["SessionInfo", "is_live", "live_dir", "load_info", "state_dir"]


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
