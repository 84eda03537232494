"""Messages between actors inside one parent process (never on the wire).

Frozen Structs: cheap to build and safe to share between threads. What the broker tells the
watchdog, and the timer events it hands itself, are effects of the session's rules
(:mod:`protocol.session.effects`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.session.effects import (
    WatchdogAgent,
    WatchdogInstruction,
    WatchdogRuntime,
    WatchdogTask,
)
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope, ReplyEnvelope

__all__ = [
    "AgentExited",
    "CloseAgent",
    "Deliver",
    "DeliveryFailed",
    "Drain",
    "Inbound",
    "InboundBatch",
    "ParentCall",
    "ProcessExited",
    "ReadOutput",
    "WaitFor",
    "WatchdogAgent",
    "WatchdogCall",
    "WatchdogInstruction",
    "WatchdogRuntime",
    "WatchdogTask",
    "WorktreeOf",
]


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    pass


# --- broker inputs
class Inbound(_Msg, frozen=True, kw_only=True):
    """An envelope that arrived in the parent's inbox."""

    envelope: AnyEnvelope


class Drain(_Msg, frozen=True, kw_only=True):
    """The session's edge, before it stops: answered once every run the broker decided before
    it has run (its records durable, its effects done). An agent's actor answers it once it
    has handled everything told to it before (its exit, told to the broker)."""


class WorktreeOf(_Msg, frozen=True, kw_only=True):
    """The session's edge asks where an agent's worktree is (``None``: none, or removed)."""

    agent_id: str


class InboundBatch(_Msg, frozen=True, kw_only=True):
    """Envelopes that arrived in the parent's inbox together, in order; the answer is which of
    them failed (message id -> error), or None."""

    envelopes: tuple[AnyEnvelope, ...]


class ParentCall(_Msg, frozen=True, kw_only=True):
    """An operation from the Python API / CLI (an ``*Args`` Struct from protocol.calls.api)."""

    args: Any


class AgentExited(_Msg, frozen=True, kw_only=True):
    agent_id: str
    exit_code: int | None  # None: the status cannot be known (an adopted or vanished bridge)
    closing: bool
    #: why, when the parent did not ask for it (the agent's last error, its log's end, or
    #: why it is gone when more is known than an exit status)
    reason: str | None = None
    #: the process never said ``ready``
    before_ready: bool = False


class DeliveryFailed(_Msg, frozen=True, kw_only=True):
    envelope: AnyEnvelope
    error: Any  # ErrorInfo


class WaitFor(_Msg, frozen=True, kw_only=True):
    """A ``wait``: a watcher (not journaled) that answers ``answer`` once, with a
    ``WaitResult``, when every id is delivered or ``timeout_s`` has passed (the answer is the
    ``WatchResult``; nothing pending: no watcher, the edge answers at once)."""

    ids: tuple[str, ...]
    timeout_s: float | None = None
    answer: Any  # Callable[[api.WaitResult], None], called from the watcher's actor


# --- agent inputs
class Deliver(_Msg, frozen=True, kw_only=True):
    """Publish this envelope into the agent's inbox (stamped with its capability)."""

    envelope: AnyEnvelope


class ProcessExited(_Msg, frozen=True, kw_only=True):
    exit_code: int | None  # None: the status cannot be known (an adopted or vanished bridge)
    reason: str | None = None


class CloseAgent(_Msg, frozen=True, kw_only=True):
    #: said to the agent after "closed by the parent: " (none: nothing more to say)
    reason: str | None = None


class ReadOutput(_Msg, frozen=True, kw_only=True):
    """Ask an agent actor for up to ``lines`` of its output older than line ``before``; the
    answer is an :class:`~protocol.calls.api.ReadResult`."""

    lines: int
    before: int | None = None


class WatchdogCall(_Msg, frozen=True, kw_only=True):
    """An operation on the watchdog (``shepherd watchdog ...`` and the watchdog tools)."""

    op: str
    args: dict[str, Any] = {}


Routed = MessageEnvelope | ReplyEnvelope
