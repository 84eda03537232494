"""What the session's rules ask the world to do: frozen Structs, run in order by the broker.

A rule never does I/O. It returns a list of effects, and the caller (the broker actor, or a
test) runs them in the order given. The order is part of the rule: a ``Journal`` comes before
any effect that tells someone about what it records (a result is durable before anyone hears
of it), and an ``Answer`` is the value the caller of an operation gets.

==================  ==========================================================================
effect              what running it means
==================  ==========================================================================
``Journal``         append the record to the journal (durable before the next effect runs)
``Notify``          hand a notification to the parent's sink (a watcher's ``TaskCompletion`` is
                    its actor's to hand, to its caller)
``Deliver``         publish an envelope into an agent's inbox (stamped with its capability)
``Publish``         publish a receipt into a one-shot inbox (already stamped)
``Forward``         show a runtime event to the agent's actor (its output, for ``read``)
``SpawnAgent``      start the agent's process (or adopt its running bridge after a restart)
``StopAgent``       close the agent's process
``StartTimer``      after ``delay`` seconds, hand ``event`` back to the rules (one per key)
``CancelTimer``     forget the timer with that key (its event may still arrive: rules ignore
                    an event that no longer applies)
``OpenNote`` ...    the task's working note: opened (or taken over after a restart), a line
                    appended, finalised (written off the rules' thread, in this order)
``SpawnWatcher``    a watcher's actor starts, from the state given: its notifications go to
                    its caller (the operation's)
``HandOver``        a settled task's result goes to a watcher's actor (the watcher's rules,
                    :mod:`protocol.session.watcher`, take it once and coalesce)
``SpawnTask``       a task's actor starts, owning the record given (:mod:`protocol.session.task`)
``TellTask``        route a message to a task's actor (it decides; its report comes back to the
                    session's rules: :func:`protocol.session.settlement.reported`)
``StopTask``        the session took the task's settlement: its actor stops
``Story``           one human line about the lifecycle (``shepherd demo``, ``serve --verbose``)
``Log``             a log line
``Answer``          the answer to the operation being handled
``AnswerFromOutput`` the answer is a page of the agent's output (its actor holds it): the
                    broker answers with a future of it
``Watchdog*``       tell the watchdog what happened (it observes; it never decides here)
``RunCheck``        run a task's acceptance check off the broker's thread, in its agent's
                    directory and its own process group; its end comes back as a
                    ``CheckDone`` event (:mod:`protocol.session.checks`)
``StopCheck``       kill the process group of a task's running check (nothing if none runs)
``WatchdogQuery``   a watchdog agent's question: the watchdog answers it in the receipt given
                    (:mod:`protocol.session.watchdog_queries`), in order after what it was told
``ProbeWorktree``   run git in an agent's worktree, off the broker's thread: where it stands
                    when a task is handed over (``snapshot``), or what the task changed and
                    what overlaps when it settled (``diff``); the answer comes back as a
                    ``WorktreeProbed`` event (:mod:`protocol.session.worktrees`)
==================  ==========================================================================

Timer events (``RequestTimeout``, ``CooldownDue``, …; and a watcher's own
``Flush``) are data too: a ``StartTimer`` carries the event the rules get back,
and ``key`` names the timer. A task's deadline, and the point where its wait is stale, are
its actor's own timer (:mod:`protocol.session.task`, rule 5;
:mod:`protocol.session.task_stale`), as a watcher's window is the watcher's.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.records.checks import Check
from protocol.records.journal import MergeRecord
from protocol.records.notifications import AnyNotification
from protocol.records.tasks import TaskRecord, TaskResult
from protocol.records.usage import Usage
from protocol.records.worktrees import Snapshot, WorktreeRef
from protocol.session.state import WatcherState
from protocol.session.task import TaskMessage
from protocol.session.task_budget import Soft
from protocol.session.task_stale import Stale
from protocol.wire.envelopes import AckEnvelope, AnyEnvelope, RuntimeEnvelope

__all__ = [
    "Answer",
    "AnswerFromOutput",
    "AppendNote",
    "CancelTimer",
    "CooldownDue",
    "Deliver",
    "Effect",
    "FinaliseNote",
    "Flush",
    "Forward",
    "HandOver",
    "Journal",
    "Log",
    "Notify",
    "OpenNote",
    "PaceDue",
    "ProbeMerge",
    "ProbeWorktree",
    "Publish",
    "RequestTimeout",
    "RetryDue",
    "RunCheck",
    "SessionTimer",
    "SpawnAgent",
    "SpawnTask",
    "SpawnWatcher",
    "StartTimer",
    "StopAgent",
    "StopCheck",
    "StopTask",
    "Story",
    "TellTask",
    "TimerEvent",
    "TimerKey",
    "WatchdogAgent",
    "WatchdogInstruction",
    "WatchdogQuery",
    "WatchdogRuntime",
    "WatchdogTask",
]

#: what names a timer: its kind and the id it is about
TimerKey = tuple[str, str]


class Effect(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Journal(Effect, frozen=True, kw_only=True):
    record: msgspec.Struct


class Notify(Effect, frozen=True, kw_only=True):
    note: AnyNotification


class Deliver(Effect, frozen=True, kw_only=True):
    agent_id: str
    envelope: AnyEnvelope


class Publish(Effect, frozen=True, kw_only=True):
    inbox: str
    envelope: AnyEnvelope


class Forward(Effect, frozen=True, kw_only=True):
    agent_id: str
    envelope: RuntimeEnvelope


class SpawnAgent(Effect, frozen=True, kw_only=True):
    agent_id: str
    name: str
    adapter: str
    capability: str
    options: dict[str, Any] = {}
    #: after a restart: take over the bridge that outlived the old parent (never a second one)
    adopt: bool = False
    pid: int | None = None
    #: after a restart: the process is known to be gone (its actor only keeps its output)
    exited: bool = False


class StopAgent(Effect, frozen=True, kw_only=True):
    agent_id: str


class OpenNote(Effect, frozen=True, kw_only=True):
    record: TaskRecord
    #: after a restart: the note exists and is taken over as it is
    restored: bool = False


class AppendNote(Effect, frozen=True, kw_only=True):
    task_id: str
    line: str


class FinaliseNote(Effect, frozen=True, kw_only=True):
    record: TaskRecord


class SpawnWatcher(Effect, frozen=True, kw_only=True):
    watcher: WatcherState

    @property
    def watcher_id(self) -> str:
        return self.watcher.watcher_id


class HandOver(Effect, frozen=True, kw_only=True):
    watcher_id: str
    result: TaskResult
    #: when the task ended, as far as its window counts (:mod:`protocol.session.watcher`):
    #: when its agent said ``done``, or when it settled
    opened: float


class SpawnTask(Effect, frozen=True, kw_only=True):
    record: TaskRecord
    #: what it spent already (a task restored after a restart): its actor keeps it
    usage: Usage | None = None
    #: its soft warnings (a task with a budget: :mod:`protocol.session.task_budget`)
    soft: Soft | None = None
    #: its stale waits (:mod:`protocol.session.task_stale`)
    stale: Stale | None = None

    @property
    def task_id(self) -> str:
        return self.record.task_id


class TellTask(Effect, frozen=True, kw_only=True):
    task_id: str
    message: TaskMessage


class StopTask(Effect, frozen=True, kw_only=True):
    task_id: str


class Story(Effect, frozen=True, kw_only=True):
    text: str


class Log(Effect, frozen=True, kw_only=True):
    text: str
    level: Literal["info", "warning"] = "info"


class Answer(Effect, frozen=True, kw_only=True):
    value: Any


class AnswerFromOutput(Effect, frozen=True, kw_only=True):
    agent_id: str
    lines: int
    before: int | None = None


# --- timers: the event each one hands back


class RequestTimeout(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str

    @property
    def key(self) -> TimerKey:
        return ("reply", self.request_id)


class Flush(msgspec.Struct, frozen=True, kw_only=True):
    watcher_id: str

    @property
    def key(self) -> TimerKey:
        return ("flush", self.watcher_id)


# --- model providers (protocol.session.providers)


class CooldownDue(msgspec.Struct, frozen=True, kw_only=True):
    """A provider's rate-limit cool-down ends at ``until`` (one that was extended since has a
    later timer: this one changes nothing)."""

    provider: str
    until: float

    @property
    def key(self) -> TimerKey:
        return ("cooldown", self.provider)


class RetryDue(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's turn that its provider failed is run again (its ``attempt``-th retry)."""

    agent_id: str
    #: what the attempts are counted for: the agent's task, or the agent outside a task
    counted: str
    attempt: int

    @property
    def key(self) -> TimerKey:
        return ("retry", self.agent_id)


class PaceDue(msgspec.Struct, frozen=True, kw_only=True):
    """A paced provider's next token is due (:mod:`protocol.session.pacing`)."""

    provider: str

    @property
    def key(self) -> TimerKey:
        return ("pace", self.provider)


#: the session's timers (the broker's), and every timer (a watcher's ``Flush`` is its own)
SessionTimer = RequestTimeout | CooldownDue | RetryDue | PaceDue
TimerEvent = SessionTimer | Flush


class StartTimer(Effect, frozen=True, kw_only=True):
    delay: float
    event: TimerEvent


class CancelTimer(Effect, frozen=True, kw_only=True):
    key: TimerKey


# --- what the watchdog is told (it observes the session; it never decides anything here)


class WatchdogAgent(Effect, frozen=True, kw_only=True):
    """An agent joined the session (or its process state changed)."""

    agent_id: str
    name: str
    description: str | None = None
    process_state: str = "starting"
    at: float
    #: how the agent runs (``command``, ``pi-rpc``, ...): what its output lines are
    adapter: str | None = None
    #: ``watchdog``: the agent was spawned to watch the others (its target's kind)
    role: str | None = None


class WatchdogRuntime(Effect, frozen=True, kw_only=True):
    """A runtime event of an agent (tool call/result, output, turn start/end)."""

    agent_id: str
    envelope: RuntimeEnvelope
    at: float


class WatchdogInstruction(Effect, frozen=True, kw_only=True):
    """The agent received a new instruction (a task or a message): a new evidence window."""

    agent_id: str
    kind: str  # "task" | "message" | "reply"
    text: str
    task_id: str | None
    at: float


class WatchdogTask(Effect, frozen=True, kw_only=True):
    """The agent's active task changed (None when it settled)."""

    agent_id: str
    task_id: str | None


class WatchdogQuery(Effect, frozen=True, kw_only=True):
    """A watchdog agent's question (checked: :mod:`protocol.session.watchdog_queries`): the
    watchdog answers it by publishing ``receipt`` into ``inbox`` with its ``data`` (fitted to
    ``budget`` bytes), or turned into a refusal with the error."""

    asker_id: str
    asker_name: str
    op: str
    #: the agent asked about (its id), if any
    agent_id: str | None = None
    limit: int | None = None
    text: str | None = None
    inbox: str
    receipt: AckEnvelope
    budget: int


# --- agents' git worktrees


class ProbeWorktree(Effect, frozen=True, kw_only=True):
    #: where the worktree stands at a task's start; what the task changed at its end; what it
    #: changed so far, at a turn's end (``live``: :mod:`protocol.session.collisions`)
    kind: Literal["snapshot", "diff", "live"]
    task_id: str
    worktree: WorktreeRef
    #: ``diff``: where the worktree stood when the task started (None: not recorded)
    snapshot: Snapshot | None = None
    #: ``diff``: the other live agents' worktrees, for the overlap
    others: tuple[WorktreeRef, ...] = ()


class ProbeMerge(Effect, frozen=True, kw_only=True):
    """A restarted parent asks git where a merge's ``into`` stands (a ``planned`` merge that
    was not journaled ``done``: :mod:`protocol.session.merges`); its answer is the record
    settled (``done`` or ``abandoned``, with ``found``)."""

    record: MergeRecord


# --- acceptance checks


class RunCheck(Effect, frozen=True, kw_only=True):
    """Run attempt ``attempt`` of ``check`` for a task (its agent's directory: ``cwd``; None:
    the session's own). A check of the same task still running is ended first."""

    task_id: str
    agent_id: str
    agent_name: str
    check: Check
    attempt: int
    cwd: str | None = None


class StopCheck(Effect, frozen=True, kw_only=True):
    task_id: str
