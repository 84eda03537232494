"""The operations' Structs: one arguments Struct and one result Struct per operation.

Each arguments Struct is an :class:`Arguments` of its result type (``DelegateArgs`` is an
``Arguments[DelegateResult]``), so ``Session.run(args)`` is typed by the Struct alone. Every field's
bounds are the annotated types of :mod:`protocol.core.limits`, enforced by :func:`build_args`
(``msgspec.convert``), which every surface goes through before anything is sent or done. What
the surfaces *say* about each operation (its command line, help, tool text, human rendering) is
the operation table, :mod:`protocol.ops`.
"""

from __future__ import annotations

import re
from typing import Any, Generic, Literal, TypeVar

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.core.limits import (
    ApproveRules,
    BudgetCost,
    BudgetMinutes,
    BudgetTokens,
    BudgetTurns,
    Cursor,
    DeadlineMinutes,
    DeadlineSeconds,
    Handle,
    IdList,
    LineCount,
    NodeName,
    OptionalText,
    OptionText,
    Priority,
    RefName,
    Text,
    TimeoutFrom,
    VerifyAttempts,
    VerifyCommand,
    VerifyTimeout,
)
from protocol.records.checks import Check
from protocol.records.requests import RequestRecord
from protocol.records.sandbox import EnvNames, SandboxPaths, SandboxPids, SandboxTmpMb, SandboxView
from protocol.records.tasks import TaskResult, TaskState
from protocol.records.usage import Budget, Usage
from protocol.wire.envelopes import MailboxWake

__all__ = [
    "AgentRole",
    "AgentStatus",
    "Arguments",
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
    "SettleResult",
    "SpawnArgs",
    "SpawnOptions",
    "SpawnResult",
    "StatusArgs",
    "StatusResult",
    "StatusSummary",
    "TaskStatus",
    "WaitArgs",
    "WaitResult",
    "WatchArgs",
    "WatchResult",
    "build_args",
    "convert_args",
]

ProcessState = Literal["starting", "working", "idle", "exited"]
Adapter = Literal["scripted", "command", "pi-rpc", "acp", "simulated"]
#: what an agent is for: a ``worker`` (the default) does tasks; a ``watchdog`` may also read the
#: watchdog's view of the session and alert the parent (``shepherd-child watchdog-*``), and
#: nothing more (protocol.session.watchdog_queries)
AgentRole = Literal["worker", "watchdog"]


class SpawnResult(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    name: str
    adapter: str
    process_state: ProcessState


class DelegateResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    task_id: str
    agent_id: str
    accepted: bool
    agent_name: str | None = None
    # --- budgets
    #: the limits the task got (None: none); capped by what the session's budget had left
    budget: Budget | None = None
    #: the limits lowered to the session's remainder (``max_tokens``, ``max_cost``)
    clamped: tuple[str, ...] = ()
    # --- admission (``serve --max-running``): no slot was free; it waits, at this place
    queued: bool = False
    queue_place: int | None = None


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
    #: a preview of the task text (see ``description_chars``)
    description: str
    created_at: float
    waiting_since: float | None = None
    waiting_age_s: float | None = None
    pending_requests: tuple[RequestRecord, ...] = ()
    stale: bool = False
    result: TaskResult | None = None
    #: the task text's full length in characters, when ``description`` is only its beginning
    description_chars: int | None = None
    #: the agent's turns that ended while this task stayed open, without done or a question
    turns_without_done: int = 0
    #: when the last of them ended, and its exit status (None: the adapter gives none)
    last_turn_ended_at: float | None = None
    last_turn_exit_code: int | None = None
    # --- budgets
    usage: Usage | None = None
    budget: Budget | None = None
    # --- acceptance checks
    #: the check a ``completed`` done must pass, and its attempts begun
    check: Check | None = None
    attempt: int = 0
    #: ``queued``: its place in the queue, from 1 (serve --max-running)
    queue_place: int | None = None
    #: the tool calls its agent reported for it (None: not known, since a parent restart)
    tool_calls: int | None = 0


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
    #: the agent's bridge process while it runs (None once it exited: the pid may be anyone's
    #: by then). It leads its own process group: ``kill -TERM -- -PID`` stops the agent and
    #: everything it started.
    pid: int | None = None
    # --- budgets
    #: what the agent spent over all its turns and tasks
    usage: Usage | None = None
    # --- worktrees
    #: an agent in a git worktree: its branch, and how many paths its worktree has changed
    #: since the branch's base (as of its last task's end; ``shepherd worktrees`` counts now)
    branch: str | None = None
    changed_files: int | None = None
    # --- agents on other hosts
    #: the ``shepherd node`` it runs on (None: the parent's host); ``pid`` is then on that host
    node: str | None = None
    #: what the agent is for (``worker``, or ``watchdog``: it may read the watchdog's view)
    role: AgentRole = "worker"
    #: its sandbox (``spawn --sandbox``; None: it runs unsandboxed)
    sandbox: SandboxView | None = None


class StatusSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Counts over every agent of the session, whatever the page holds."""

    agents: int = 0
    #: agents per process state (starting / working / idle / exited)
    processes: dict[str, int] = {}
    #: active or last tasks per task state
    tasks: dict[str, int] = {}
    # --- budgets
    #: what the whole session spent, and its budget (None: none)
    usage: Usage | None = None
    budget_tokens: int | None = None
    budget_cost: float | None = None
    # --- admission (serve --max-running): tasks holding a slot, waiting for one, the cap;
    # the providers cooling down after a rate limit, and until when
    running: int = 0
    queued: int = 0
    max_running: int | None = None
    cooldowns: dict[str, float] = {}
    #: the providers paced since a rate limit: the turns per second the session starts for each
    paced: dict[str, float] = {}
    #: the nodes' own caps (``shepherd node --max-running``), as their beats tell them
    node_caps: dict[str, int] = {}


class StatusResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    session_id: str
    now: float
    #: this page's agents, from ``cursor`` on
    agents: tuple[AgentStatus, ...]
    cursor: int = 0
    #: more agents follow: ask again with this cursor
    next_cursor: int | None = None
    summary: StatusSummary | None = None
    #: damaged lines found when the session was resumed: torn tails cut off and records
    #: that could not be read, in the journal and the notifications file (each was logged)
    journal_problems: int = 0
    #: how the parent's own inbox is woken (None: not a filesystem mailbox)
    mailbox_wake: MailboxWake | None = None


class SettleResult(TaskResult, frozen=True, kw_only=True):
    """The answer to ``cancel`` / ``fail``: the task's result, and whether it had settled
    before this call (then the result is the earlier one and nothing changed)."""

    already_settled: bool = False


class CloseResult(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    closed: bool
    #: the agent's active task, cancelled (rc 130) by the close
    cancelled_task_id: str | None = None
    #: an agent in a git worktree: where it is, and whether the close removed it (only a
    #: clean one is removed; a kept one stays there, and a notification says why)
    worktree_path: str | None = None
    worktree_removed: bool | None = None
    worktree_kept_because: str | None = None


class ReadResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    agent_id: str
    #: oldest first; a line too long for an answer is cut, saying how long it was
    lines: tuple[str, ...]
    #: the line number of ``lines[0]`` (numbers count every line the agent ever printed)
    first: int = 0
    #: older lines are still kept: ask again with ``before`` = this
    next_cursor: int | None = None


# ----------------------------------------------------------------------------- arguments

R = TypeVar("R")
A = TypeVar("A", bound="Arguments[Any]")


def build_args(cls: type[A], **fields: Any) -> A:
    """Build and *validate* operation arguments (direct Struct construction does not check
    types or bounds); a bad field is ``invalid_argument`` naming the field and the bound."""
    # the operation's name: DelegateManyArgs -> delegate_many
    words = "".join(f"_{c}" if c.isupper() else c for c in cls.__name__.removesuffix("Args"))
    return convert_args(cls, fields, words.removeprefix("_").lower())


#: a value quoted in a validation message (an enum's), cut: the answer never echoes a huge input
_LONG_VALUE = re.compile(r"'([^']{80})[^']+'")


def _cut_value(match: re.Match[str]) -> str:
    return f"'{match.group(1)}…'"


def convert_args(cls: type[A], fields: Any, what: str) -> A:
    """``fields`` (a mapping) as ``cls``, checked; a bad field is ``invalid_argument`` saying
    ``what`` was called."""
    try:
        args: A = msgspec.convert(fields, cls)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{what}: {_LONG_VALUE.sub(_cut_value, str(exc))}") from None
    except (OverflowError, RecursionError) as exc:  # an integer beyond 64 bits, a deep nest
        raise InvalidArgument(f"{what}: {exc}") from None
    return args


class Arguments(msgspec.Struct, Generic[R], frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An operation's arguments; ``R`` is the type of its answer (what ``Session.run`` returns
    for it), so the Struct alone says what the operation takes and gives."""


class SpawnOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``spawn`` takes beside the name: the one list of them, so ``spawn_many``
    (:mod:`protocol.calls.api_batch`), which takes each for all its names, cannot drift from it."""

    adapter: Adapter = "scripted"
    script: OptionText | None = None  # path of a script file (scripted adapter)
    cmd: OptionText | None = None  # command template (command adapter), with {message}
    resume_cmd: OptionText | None = None  # template for later turns (command adapter)
    cwd: OptionText | None = None
    description: OptionalText | None = None
    pi: OptionText | None = None  # the Pi binary (pi-rpc adapter; default: the project's install)
    models_json: OptionText | None = None  # a Pi models.json to use (pi-rpc adapter)
    provider: OptionText | None = None  # the Pi provider name (pi-rpc adapter)
    model: OptionText | None = None  # the Pi model id (pi-rpc adapter)
    acp_cmd: OptionText | None = None  # an ACP agent's command line (acp adapter)
    # --- a git worktree of its own (protocol.records.worktrees; made by the session's edge, which
    # fills repo, branch, base and cwd with what it made: they are journaled with the agent)
    worktree: bool = False
    repo: OptionText | None = None  # the repository (default: the session's working directory)
    branch: RefName | None = None  # default shepherd/<session>/<name>
    base: RefName | None = None  # the new branch's start (default the repository's HEAD)
    #: Pi tool calls that need the parent's approval first, ``TOOL:GLOB`` (pi-rpc adapter;
    #: see protocol.session.approvals)
    approve: ApproveRules | None = None
    #: the ``shepherd node`` to start it on (``any``: the least-loaded live node; None: this
    #: host, as the parent's own child). Only over NATS (protocol.wire.nodes)
    node: NodeName | None = None
    #: its tasks' acceptance check when they give none (protocol.records.checks)
    verify: VerifyCommand | None = None
    verify_attempts: VerifyAttempts | None = None
    verify_timeout_s: VerifyTimeout | None = None
    #: refuse the agent's ``completed`` when its task made no tool call (protocol.session.claims)
    require_evidence: bool = False
    #: ``watchdog``: the agent may ask the parent for the watchdog's view and alert it
    role: AgentRole = "worker"
    # --- a sandbox (protocol.records.sandbox; made by actors.child.sandbox)
    sandbox: bool = False
    sandbox_rw: SandboxPaths | None = None
    sandbox_net: bool = False
    sandbox_pids: SandboxPids | None = None
    sandbox_tmp_mb: SandboxTmpMb | None = None
    env: EnvNames | None = None


class SpawnArgs(
    Arguments[SpawnResult], SpawnOptions, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    name: Handle


class DelegateArgs(
    Arguments[DelegateResult], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    target: Handle  # agent id or name
    task: Text
    #: None: the session's default (no deadline unless the settings give one)
    timeout_minutes: DeadlineMinutes | None = None
    # --- budgets (None: no limit of that kind, but the session's budget still caps tokens/cost)
    max_turns: BudgetTurns | None = None
    max_tokens: BudgetTokens | None = None
    max_cost: BudgetCost | None = None
    max_minutes: BudgetMinutes | None = None
    # --- the acceptance check of a ``completed`` done (None: the agent's, from its spawn)
    verify: VerifyCommand | None = None
    verify_attempts: VerifyAttempts | None = None
    verify_timeout_s: VerifyTimeout | None = None
    # --- admission (``serve --max-running``): queue priority (None: 0), deadline start
    priority: Priority | None = None
    timeout_from: TimeoutFrom | None = None


class MessageArgs(Arguments[MessageResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    target: Handle  # agent id, agent name, or "shepherd"
    message: Text
    task_id: Handle | None = None
    thread_id: Handle | None = None
    reply_to: Handle | None = None
    expects_reply: bool = False
    steer: bool = False
    reply_timeout_s: DeadlineSeconds | None = None


class PromptArgs(Arguments[PromptResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Compatibility: the old prompt submission, mapped onto a tracked task."""

    target: Handle
    prompt: Text
    timeout_minutes: DeadlineMinutes | None = None


class WaitArgs(Arguments[WaitResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    ids: IdList
    #: None: wait until every id has settled
    timeout_s: DeadlineSeconds | None = None


class WatchArgs(Arguments[WatchResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    ids: IdList


class StatusArgs(Arguments[StatusResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: Handle | None = None
    #: the page's first agent (spawn order); a partial answer gives the next page's cursor
    cursor: Cursor = 0


class CloseArgs(Arguments[CloseResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: Handle


class ReadArgs(Arguments[ReadResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: Handle
    lines: LineCount = 50
    #: only lines older than this line number (the ``next_cursor`` of the previous page)
    before: Cursor | None = None


class CancelArgs(Arguments[SettleResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    task_id: Handle
    reason: Text | None = None


class ResultArgs(
    Arguments[TaskResult | None], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    task_id: Handle


class FailArgs(Arguments[SettleResult], frozen=True, kw_only=True, forbid_unknown_fields=True):
    task_id: Handle
    error: Text
