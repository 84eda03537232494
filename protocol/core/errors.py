"""Errors with machine-readable codes.

Every error Shepherd reports to a caller is a :class:`ShepherdError` whose ``code`` names the
condition (``invalid_handle``, ``agent_busy``, ...). Across a process boundary an error travels
as an :class:`ErrorInfo` Struct, never as a pickled exception; :func:`error_from_info` turns it
back into the matching exception class, so a CLI client raises the same type the parent did.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

__all__ = [
    "AgentBusy",
    "DuplicateIds",
    "ErrorInfo",
    "ForbiddenSender",
    "GitFailed",
    "InboxFull",
    "InvalidArgument",
    "InvalidEnvelope",
    "InvalidHandle",
    "InvalidTransition",
    "LimitExceeded",
    "MixedIds",
    "NoEvidence",
    "SandboxUnavailable",
    "SessionBusy",
    "SessionUnavailable",
    "ShepherdError",
    "Unreachable",
    "UnresolvedRequests",
    "error_from_info",
]


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The wire form of an error: ``{"code": ..., "message": ...}``."""

    code: str
    message: str


class ShepherdError(Exception):
    """Base of every error Shepherd raises on purpose. ``code`` is stable and machine-readable."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def info(self) -> ErrorInfo:
        return ErrorInfo(code=self.code, message=self.message)


class InvalidHandle(ShepherdError):
    """An id or name does not name a live thing of the expected kind in this session."""

    code = "invalid_handle"


class InvalidTransition(ShepherdError):
    """A state machine was asked to make a move its table does not allow."""

    code = "invalid_transition"


class AgentBusy(ShepherdError):
    """The agent already has an active delegated task."""

    code = "agent_busy"


class UnresolvedRequests(ShepherdError):
    """``done(completed)`` while the task still waits for replies."""

    code = "unresolved_requests"


class NoEvidence(ShepherdError):
    """A ``completed`` done with no evidence of work (no tool call during its task), refused
    because its agent was spawned with ``--require-evidence``."""

    code = "no_evidence"


class MixedIds(ShepherdError):
    """One watch/wait call named ids of different kinds (task ids and prompt ids)."""

    code = "mixed_ids"


class DuplicateIds(ShepherdError):
    """One watch/wait call named the same id twice."""

    code = "duplicate_ids"


class ForbiddenSender(ShepherdError):
    """A sender tried to act for someone else (another agent's task, id or capability)."""

    code = "forbidden_sender"


class InvalidArgument(ShepherdError):
    """An argument is missing, empty, of the wrong shape or out of range."""

    code = "invalid_argument"


class InvalidEnvelope(ShepherdError):
    """An envelope failed decoding or validation (schema, session, size, capability)."""

    code = "invalid_envelope"


class LimitExceeded(ShepherdError):
    """A configured limit (size, queue depth, count) would be exceeded."""

    code = "limit_exceeded"


class InboxFull(LimitExceeded):
    """The target inbox holds its limit of unread envelopes: back-pressure, not a bad
    envelope. The same code as any limit; a publisher may try again once the reader caught up."""


class DiskFull(LimitExceeded):
    """No space left where the envelope was to be written (``ENOSPC``, ``EDQUOT``): it may pass
    once space is freed, so a sender that must not lose what it sends (a child's ``done``)
    tries the same envelope again for a bounded time. The same code as any limit."""


class GitFailed(ShepherdError):
    """git failed at something the call asked for (its words are in the message); nothing the
    call would have changed was changed."""

    code = "git_failed"


class SandboxUnavailable(ShepherdError):
    """An agent asked for a sandbox (``spawn --sandbox``) that cannot be made here (no
    bubblewrap, no user namespaces, no process-count group): it is refused, never started
    without one."""

    code = "sandbox_unavailable"


class SessionUnavailable(ShepherdError):
    """No live session could be found or reached."""

    code = "session_unavailable"


class Unreachable(SessionUnavailable):
    """The session cannot be reached for a moment (a NATS stream electing its leader, a server
    restarting, no file descriptor free): the same envelope may be tried again, and a sender
    waits it out for a bounded time before it gives up. The same code as any unavailability."""


class SessionBusy(ShepherdError):
    """The session already has a live parent supervisor (named in the message): a second one
    is refused before it read or wrote anything of the session. One parent per session."""

    code = "session_busy"


_BY_CODE: dict[str, type[ShepherdError]] = {
    cls.code: cls
    for cls in (
        InvalidHandle,
        InvalidTransition,
        AgentBusy,
        UnresolvedRequests,
        MixedIds,
        DuplicateIds,
        ForbiddenSender,
        InvalidArgument,
        InvalidEnvelope,
        LimitExceeded,
        SessionUnavailable,
        SessionBusy,
        GitFailed,
        SandboxUnavailable,
    )
}


def error_from_info(info: ErrorInfo) -> ShepherdError:
    """Rebuild the typed exception for a wire error (unknown codes give the base class)."""
    cls = _BY_CODE.get(info.code)
    if cls is None:
        err = ShepherdError(info.message)
        err.code = info.code  # type: ignore[misc]  # keep the peer's code even if we lack a class
        return err
    return cls(info.message)
