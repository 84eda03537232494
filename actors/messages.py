"""Messages between actors inside one parent process (never on the wire).

Frozen Structs: cheap to build and safe to share between threads.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.envelopes import (
    AnyEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)
from protocol.tasks import TaskEvent, TaskRecord, TaskResult

__all__ = [
    "AgentExited",
    "AgentStateChanged",
    "CloseAgent",
    "CloseRequest",
    "Deliver",
    "DeliveryFailed",
    "Done",
    "DoneOutcome",
    "Flush",
    "Inbound",
    "OpenRequest",
    "ParentCall",
    "ProcessExited",
    "ReadOutput",
    "RequestTimeout",
    "Settle",
    "StaleDue",
    "Start",
    "TaskChanged",
    "TaskDeadline",
    "TurnEnded",
    "WatchDeliver",
    "WatchWith",
    "WatchdogAgent",
    "WatchdogCall",
    "WatchdogInstruction",
    "WatchdogRuntime",
    "WatchdogTask",
    "WatcherFinished",
]


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    pass


# --- broker inputs
class Inbound(_Msg, frozen=True, kw_only=True):
    """An envelope that arrived in the parent's inbox."""

    envelope: AnyEnvelope


class ParentCall(_Msg, frozen=True, kw_only=True):
    """An operation from the Python API / CLI (an ``*Args`` Struct from protocol.api)."""

    args: Any


class TaskChanged(_Msg, frozen=True, kw_only=True):
    record: TaskRecord
    #: requests the task dropped when it settled (the broker cancels them)
    dropped_requests: tuple[str, ...] = ()
    #: the agent's own ``done`` settled it (anything else: the agent must stop its work)
    settled_by_agent: bool = False


class DoneOutcome(_Msg, frozen=True, kw_only=True):
    envelope: TaskDoneEnvelope
    error: Any = None  # ErrorInfo | None
    result: TaskResult | None = None


class AgentStateChanged(_Msg, frozen=True, kw_only=True):
    agent_id: str
    process_state: str
    at: float
    exit_code: int | None = None


class AgentExited(_Msg, frozen=True, kw_only=True):
    agent_id: str
    exit_code: int | None  # None: the status cannot be known (an adopted or vanished bridge)
    closing: bool
    #: why, when the parent did not ask for it (the agent's last error, its log's end, or
    #: why it is gone when more is known than an exit status)
    reason: str | None = None
    #: the process never said ``ready``
    before_ready: bool = False


class TurnEnded(_Msg, frozen=True, kw_only=True):
    """One of an agent's turns ended (the broker decides whether the parent must know)."""

    agent_id: str
    started_at: float | None
    ended_at: float
    exit_code: int | None = None
    is_error: bool = False
    #: the last lines the turn printed, each cut short
    tail: tuple[str, ...] = ()


class DeliveryFailed(_Msg, frozen=True, kw_only=True):
    envelope: AnyEnvelope
    error: Any  # ErrorInfo


class RequestTimeout(_Msg, frozen=True, kw_only=True):
    request_id: str


class StaleDue(_Msg, frozen=True, kw_only=True):
    task_id: str
    waiting_since: float


class WatchWith(_Msg, frozen=True, kw_only=True):
    """Register a watcher whose notifications go to ``sink`` (``wait`` at the edge)."""

    ids: tuple[str, ...]
    sink: Any


class WatcherFinished(_Msg, frozen=True, kw_only=True):
    watcher_id: str


# --- task inputs
class Start(_Msg, frozen=True, kw_only=True):
    pass


class OpenRequest(_Msg, frozen=True, kw_only=True):
    request_id: str


class CloseRequest(_Msg, frozen=True, kw_only=True):
    request_id: str


class Done(_Msg, frozen=True, kw_only=True):
    envelope: TaskDoneEnvelope


class Settle(_Msg, frozen=True, kw_only=True):
    event: TaskEvent
    text: str | None = None
    error: str | None = None
    #: answer with an ``api.SettleResult`` (was it this event that settled the task?)
    report: bool = False


class TaskDeadline(_Msg, frozen=True, kw_only=True):
    pass


# --- watcher inputs
class WatchDeliver(_Msg, frozen=True, kw_only=True):
    result: TaskResult


class Flush(_Msg, frozen=True, kw_only=True):
    pass


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
    answer is an :class:`~actors.agent.OutputPage`."""

    lines: int
    before: int | None = None


# --- watchdog inputs (from the broker)
class WatchdogAgent(_Msg, frozen=True, kw_only=True):
    """An agent joined the session (or its process state changed)."""

    agent_id: str
    name: str
    description: str | None = None
    process_state: str = "starting"
    at: float
    #: how the agent runs (``command``, ``pi-rpc``, ...): what its output lines are
    adapter: str | None = None


class WatchdogRuntime(_Msg, frozen=True, kw_only=True):
    """A runtime event of an agent (tool call/result, output, turn start/end)."""

    agent_id: str
    envelope: RuntimeEnvelope
    at: float


class WatchdogInstruction(_Msg, frozen=True, kw_only=True):
    """The agent received a new instruction (a task or a message): a new evidence window."""

    agent_id: str
    kind: str  # "task" | "message" | "reply"
    text: str
    task_id: str | None
    at: float


class WatchdogTask(_Msg, frozen=True, kw_only=True):
    """The agent's active task changed (None when it settled)."""

    agent_id: str
    task_id: str | None


class WatchdogCall(_Msg, frozen=True, kw_only=True):
    """An operation on the watchdog (``shepherd watchdog ...`` and the watchdog tools)."""

    op: str
    args: dict[str, Any] = {}


Routed = MessageEnvelope | ReplyEnvelope
