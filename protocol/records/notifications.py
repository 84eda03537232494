"""What the parent is told, as Structs (the sinks decide how to show them).

Kinds: a task completion for a watcher (coalesced, in the watcher's input order), a child's
message addressed to the Shepherd, and notices. Later monitors add their own kinds here.

Notice codes the broker sends: ``agent_exited`` (an agent's process exited without being
closed: its status and reason, and its task, which failed), ``turn_ended_without_done`` (a
turn ended while the agent's task stayed open with no question pending: once per turn, with
the turn's exit status and the tail of its output), ``request_timed_out`` /
``request_cancelled`` (a question the parent asked closed without a reply),
``not_delivered``, ``approval_requested`` (an agent asks the parent's approval: ``refs`` holds
the request id), ``approval_timed_out`` (one closed unanswered at its deadline, denied),
``budget_soft_limit`` (a task or the session passed the soft share of a limit: ``refs`` holds
the limit, ``max_tokens`` say; no ``task_id`` for the session's) and ``budget_exceeded``.
"""

from __future__ import annotations

import msgspec

from protocol.records.tasks import TaskResult

__all__ = [
    "AgentMessage",
    "AnyNotification",
    "Notice",
    "Notification",
    "StaleWait",
    "TaskCompletion",
    "WaitCycle",
    "WatchdogAlert",
]


class Notification(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    created_at: float


class TaskCompletion(Notification, frozen=True, kw_only=True, tag="task_completion"):
    """Results for one watcher: each watched task's result once, those of tasks ending within
    the coalescing window of the first together, in the order the watcher named the ids."""

    watcher_id: str
    #: the ids the watcher was registered with, normalised, in the caller's order
    ids: tuple[str, ...]
    #: the results delivered by this notification, in the watcher's input order
    results: tuple[TaskResult, ...]
    #: ids of this watcher still pending after this notification
    pending: tuple[str, ...] = ()


class AgentMessage(Notification, frozen=True, kw_only=True, tag="agent_message"):
    """A child's message addressed to the parent (answer one that expects a reply with
    ``message --reply-to``)."""

    message_id: str
    sender_id: str
    content: str
    sender_name: str | None = None
    task_id: str | None = None
    thread_id: str | None = None
    expects_reply: bool = False
    reply_to: str | None = None


class Notice(Notification, frozen=True, kw_only=True, tag="notice"):
    """Something the parent should know, named by ``code`` (``agent_exited``,
    ``turn_ended_without_done``, ``not_delivered``, ``approval_requested``, ...)."""

    code: str
    text: str
    agent_id: str | None = None
    task_id: str | None = None
    refs: tuple[str, ...] = ()


class StaleWait(Notification, frozen=True, kw_only=True, tag="stale_wait"):
    """A task has waited longer than the threshold for a reply (once per waiting episode)."""

    task_id: str
    agent_id: str
    agent_name: str
    description: str
    waiting_since: float
    age_s: float
    request_id: str
    question: str
    recipient_id: str
    recipient_name: str
    recipient_status: str


class WaitCycle(Notification, frozen=True, kw_only=True, tag="wait_cycle"):
    """A request closed a cycle of agents waiting on each other's replies."""

    request_id: str
    cycle: tuple[str, ...]  # agent names, first == last
    agent_ids: tuple[str, ...]


class WatchdogAlert(Notification, frozen=True, kw_only=True, tag="watchdog_alert"):
    """The watchdog thinks an agent is stuck in a loop (it never kills or steers by itself)."""

    agent_id: str
    agent_name: str
    task_id: str | None
    confidence: str
    reasons: tuple[str, ...]
    evidence: tuple[dict[str, object], ...]
    rescue_message: str
    text: str  # the rendered [Watchdog Alert]
    #: the watchdog agent that wrote it (``spawn --role watchdog``; None: the watchdog's rules)
    reported_by: str | None = None


AnyNotification = TaskCompletion | AgentMessage | Notice | StaleWait | WaitCycle | WatchdogAlert
