"""Messages between actors inside one parent process (never on the wire).

Frozen Structs: cheap to build and safe to share between threads. What the broker tells the
watchdog, and the timer events it hands itself, are effects of the session's rules
(:mod:`protocol.session.effects`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.envelopes import AnyEnvelope, MessageEnvelope, ReplyEnvelope
from protocol.notifications import TaskCompletion
from protocol.session.effects import (
    TaskDeadline,
    WatchdogAgent,
    WatchdogInstruction,
    WatchdogRuntime,
    WatchdogTask,
)
from protocol.tasks import TaskRecord

__all__ = [
    "AgentExited",
    "ArmDeadline",
    "CloseAgent",
    "DeadlineDue",
    "Deliver",
    "DeliveryFailed",
    "DisarmDeadline",
    "Hand",
    "Inbound",
    "InboundBatch",
    "NoteLine",
    "ParentCall",
    "ProcessExited",
    "ReadOutput",
    "SettleNote",
    "WatchWith",
    "WatchdogAgent",
    "WatchdogCall",
    "WatchdogInstruction",
    "WatchdogRuntime",
    "WatchdogTask",
]


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    pass


# --- broker inputs
class Inbound(_Msg, frozen=True, kw_only=True):
    """An envelope that arrived in the parent's inbox."""

    envelope: AnyEnvelope


class InboundBatch(_Msg, frozen=True, kw_only=True):
    """Envelopes that arrived in the parent's inbox together, in order; the answer is which of
    them failed (message id -> error), or None."""

    envelopes: tuple[AnyEnvelope, ...]


class ParentCall(_Msg, frozen=True, kw_only=True):
    """An operation from the Python API / CLI (an ``*Args`` Struct from protocol.api)."""

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


class WatchWith(_Msg, frozen=True, kw_only=True):
    """Register a watcher whose notifications go to ``sink`` (``wait`` at the edge)."""

    ids: tuple[str, ...]
    sink: Any


# --- task and watcher inputs (from the broker, running the rules' effects)
class ArmDeadline(_Msg, frozen=True, kw_only=True):
    """Hand ``event`` back to the broker in ``delay`` seconds (replacing any earlier one)."""

    delay: float
    event: TaskDeadline


class DeadlineDue(_Msg, frozen=True, kw_only=True):
    """The task's deadline timer fired (the actor's own timer, handed to itself)."""

    event: TaskDeadline


class DisarmDeadline(_Msg, frozen=True, kw_only=True):
    """The task's deadline no longer applies: drop its timer."""


class NoteLine(_Msg, frozen=True, kw_only=True):
    """Append a line to the task's working note."""

    line: str


class SettleNote(_Msg, frozen=True, kw_only=True):
    """The task settled: write the note's ending (``record`` is the settled record), stop."""

    record: TaskRecord


class Hand(_Msg, frozen=True, kw_only=True):
    """Hand this notification to the watcher's caller; nothing pending: the watcher stops."""

    note: TaskCompletion


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
    answer is an :class:`~protocol.api.ReadResult`."""

    lines: int
    before: int | None = None


class WatchdogCall(_Msg, frozen=True, kw_only=True):
    """An operation on the watchdog (``shepherd watchdog ...`` and the watchdog tools)."""

    op: str
    args: dict[str, Any] = {}


Routed = MessageEnvelope | ReplyEnvelope
