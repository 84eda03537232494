"""The parent's operations: one arguments Struct and one result Struct per operation.

The Python API (``actors.session.Session``), the CLI (``shepherd ...``), the ``call``
envelopes a CLI client sends, and the model-facing tool schemas are all built from these
Structs, so the three surfaces cannot drift apart (DESIGN §6).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

from protocol.envelopes import MailboxWake
from protocol.errors import InvalidArgument
from protocol.requests import RequestRecord
from protocol.tasks import TaskResult, TaskState

__all__ = [
    "AgentStatus",
    "CancelArgs",
    "CloseArgs",
    "CloseResult",
    "DelegateArgs",
    "DelegateResult",
    "FailArgs",
    "MessageArgs",
    "MessageResult",
    "ProcessState",
    "PromptArgs",
    "PromptResult",
    "ReadArgs",
    "ReadResult",
    "ResultArgs",
    "SpawnArgs",
    "SpawnResult",
    "StatusArgs",
    "StatusResult",
    "TaskStatus",
    "WaitArgs",
    "WaitResult",
    "WatchArgs",
    "WatchResult",
    "build_args",
]

ProcessState = Literal["starting", "working", "idle", "exited"]
Adapter = Literal["scripted", "command", "pi-rpc", "simulated"]


A = TypeVar("A", bound="_Args")


def build_args(cls: type[A], **fields: Any) -> A:
    """Build and *validate* operation arguments (direct Struct construction does not check
    types); a bad field is ``invalid_argument`` naming the field."""
    try:
        return msgspec.convert(fields, cls)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{cls.__name__.removesuffix('Args').lower()}: {exc}") from None


class _Args(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class SpawnArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    adapter: Adapter = "scripted"
    script: str | None = None  # path of a script file (scripted adapter)
    cmd: str | None = None  # command template (command adapter), with {message}
    resume_cmd: str | None = None  # template for later turns (command adapter)
    cwd: str | None = None
    description: str | None = None
    pi: str | None = None  # the Pi binary (pi-rpc adapter; default: the project's install)
    models_json: str | None = None  # a Pi models.json to use (pi-rpc adapter)
    provider: str | None = None  # the Pi provider name (pi-rpc adapter)
    model: str | None = None  # the Pi model id (pi-rpc adapter)


class DelegateArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    target: str  # agent id or name
    task: str
    timeout_minutes: float | None = None


class MessageArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    target: str  # agent id, agent name, or "shepherd"
    message: str
    task_id: str | None = None
    thread_id: str | None = None
    reply_to: str | None = None
    expects_reply: bool = False
    steer: bool = False
    reply_timeout_s: float | None = None


class PromptArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Compatibility: the old prompt submission, mapped onto a tracked task."""

    target: str
    prompt: str
    timeout_minutes: float | None = None


class WaitArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    ids: tuple[str, ...]
    timeout_s: float | None = None


class WatchArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    ids: tuple[str, ...]


class StatusArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: str | None = None


class CloseArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: str


class ReadArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: str
    lines: int = 50


class CancelArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    task_id: str
    reason: str | None = None


class ResultArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    task_id: str


class FailArgs(_Args, frozen=True, kw_only=True, forbid_unknown_fields=True):
    task_id: str
    error: str


class SpawnResult(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    name: str
    adapter: str
    process_state: ProcessState


class DelegateResult(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    agent_id: str
    accepted: bool


class MessageResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    message_id: str
    accepted: bool
    request_id: str | None = None
    #: for a reply: the state the request was in when the reply arrived ("pending" = answered now)
    request_state: str | None = None


class PromptResult(msgspec.Struct, frozen=True, kw_only=True):
    #: an alias of ``task_id``: watch and wait resolve it to that task, and only that
    prompt_id: str
    task_id: str
    agent_id: str
    accepted: bool


class WaitResult(msgspec.Struct, frozen=True, kw_only=True):
    ids: tuple[str, ...]
    completed: tuple[TaskResult, ...]
    pending: tuple[str, ...]
    timed_out: bool


class WatchResult(msgspec.Struct, frozen=True, kw_only=True):
    watcher_id: str
    ids: tuple[str, ...]
    pending: tuple[str, ...]
    completed: tuple[TaskResult, ...]


class TaskStatus(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    state: TaskState
    description: str
    created_at: float
    waiting_since: float | None = None
    waiting_age_s: float | None = None
    pending_requests: tuple[RequestRecord, ...] = ()
    stale: bool = False
    result: TaskResult | None = None


class AgentStatus(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    name: str
    adapter: str
    process_state: ProcessState
    closed: bool = False
    task: TaskStatus | None = None
    last_active_at: float | None = None
    exit_code: int | None = None
    #: how the agent's bridge is woken for deliveries (its last report; None: not reported)
    mailbox_wake: MailboxWake | None = None


class StatusResult(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    now: float
    agents: tuple[AgentStatus, ...]
    #: how the parent's own inbox is woken (None: not a filesystem mailbox)
    mailbox_wake: MailboxWake | None = None


class CloseResult(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    closed: bool
    #: the agent's active task, cancelled (rc 130) by the close
    cancelled_task_id: str | None = None


class ReadResult(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    lines: tuple[str, ...]
