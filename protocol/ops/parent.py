"""The parent's operations: ``shepherd COMMAND``, ``Supervisor.call``, the ``Session``
methods and the parent's tools (see :mod:`protocol.ops`)."""

from __future__ import annotations

from typing import Any

from protocol.calls import api, views
from protocol.calls.answers import READ_PAGES, STATUS_PAGES
from protocol.ops.spawn import SPAWN, check_params
from protocol.ops.spec import Param, Tool, entry, respell

__all__ = [
    "CANCEL",
    "CLOSE",
    "DELEGATE",
    "FAIL",
    "MESSAGE",
    "MESSAGE_PARAMS",
    "PROMPT",
    "READ",
    "RESULT",
    "SHUTDOWN",
    "SPAWN",
    "STATUS",
    "WAIT",
    "WAIT_TIMED_OUT",
    "WATCH",
    "ShutdownArgs",
]

#: ``shepherd wait``'s exit status when its timeout passed with ids still pending (as
#: ``timeout(1)`` does)
WAIT_TIMED_OUT = 124

_AGENT = "Agent name or agent id"
#: the fields a parent's and a child's ``message`` share, meaning the same on both sides
MESSAGE_PARAMS: dict[str, Param] = {
    "message": Param(description="The message text", cli="text"),
    "thread_id": Param(description="Conversation thread id", cli="--thread", metavar="ID"),
    "reply_to": Param(
        description="Message id of the question this answers", cli="--reply-to", metavar="ID"
    ),
    "expects_reply": Param(
        description="True when you need an answer (default false)", cli="--expects-reply"
    ),
}
_DEADLINE_MINUTES = (
    "Deadline in minutes (at most 10080, 7 days); the task times out after it. "
    "Leave it out for no deadline"
)


DELEGATE = entry(
    "delegate",
    api.DelegateArgs,
    help="give an agent a tracked task",
    view=views.delegated,
    params={
        "target": respell(_AGENT, cli="agent"),
        "task": Param(description="The task, in full: what to do and when it is done", cli="text"),
        "timeout_minutes": Param(
            description=_DEADLINE_MINUTES,
            cli="--timeout",
            metavar="MINUTES",
            help="task deadline (at most 10080: 7 days)",
        ),
        # --- budgets
        "max_turns": Param(
            description=(
                "Most turns the agent may run for the task (1 to 100000); the next turn "
                "ends the task as failed (budget_exceeded)"
            ),
            cli="--max-turns",
            metavar="N",
            help="most turns for the task (1-100000)",
        ),
        "max_tokens": Param(
            description=(
                "Most tokens the task may use (1 to 10^12), as the agent reports them; "
                "capped by what the session's budget has left"
            ),
            cli="--max-tokens",
            metavar="N",
            help="most tokens for the task (1-10^12; capped by the session's remainder)",
        ),
        "max_cost": Param(
            description=(
                "Most cost in US dollars the task may spend (above 0, at most 1000000); "
                "capped by what the session's budget has left"
            ),
            cli="--max-cost",
            metavar="USD",
            help="most cost for the task, US dollars (at most 1000000)",
        ),
        "max_minutes": Param(
            description=(
                "Most wall time in minutes (at most 10080); past it the task ends as "
                "failed (budget_exceeded), unlike a timeout"
            ),
            cli="--max-minutes",
            metavar="M",
            help="most minutes for the task (at most 10080)",
        ),
        **check_params("this task (default: the agent's, from spawn --verify)"),
        # --- admission (serve --max-running)
        "priority": Param(
            description=(
                "Its place among queued tasks when the session caps how many run at once "
                "(serve --max-running): higher first, then first queued first (-1000 to 1000, "
                "default 0)"
            ),
            cli="--priority",
            metavar="N",
            help="queue priority: higher first (-1000 to 1000, default 0)",
        ),
        "timeout_from": Param(
            description=(
                "Where its deadline counts from: 'delegate' (default: the time in the queue "
                "counts) or 'start' (from when it is handed to the agent)"
            ),
            cli="--timeout-from",
            help="where the deadline counts from (default delegate)",
        ),
    },
    tool=Tool(
        description=(
            "Give an agent a task and return its task id at once (it does not wait for the "
            "work). An agent has at most one active task. The task ends only when the agent "
            "calls shepherd_done (or the task is cancelled, fails or times out); an idle agent "
            "is not a finished task. Use shepherd_watch to be told when it ends."
        ),
        prompt_snippet="Delegate a task to an agent; returns a task id immediately",
    ),
)

MESSAGE = entry(
    "message",
    api.MessageArgs,
    help="send a message (follow-up, or --steer)",
    view=views.messaged,
    params={
        **MESSAGE_PARAMS,
        "target": respell(_AGENT, cli="target"),
        "task_id": Param(description="Task this message is about", cli="--task", metavar="ID"),
        "steer": Param(
            description="Interrupt the agent's current turn instead of queueing (default false)",
            cli="--steer",
        ),
        "reply_timeout_s": (
            "Seconds the request stays open before it times out (at most 604800, 7 days)"
        ),
    },
    tool=Tool(
        description=(
            "Send an asynchronous message to an agent; returns once accepted, never waits for "
            "an answer. Set expects_reply to open a request (its answer arrives later as a "
            "notification). Answer an agent's question by setting reply_to to its message id. "
            "Messages queue until the agent is idle unless steer interrupts it."
        ),
        prompt_snippet=(
            "Send an asynchronous message to an agent (answers arrive as notifications)"
        ),
    ),
)

WATCH = entry(
    "watch",
    api.WatchArgs,
    help="register a watcher for task ids",
    view=views.watched,
    params={
        "ids": Param(
            description="Task ids to watch (at least one, at most 1000)", cli="ids", metavar="ID"
        )
    },
    tool=Tool(
        description=(
            "Subscribe to the completion of one or more tasks. Returns at once with the results "
            "already known and the ids still pending; each pending completion arrives later as "
            "a notification (read them with shepherd_notifications). Never blocks."
        ),
        prompt_snippet=(
            "Be notified when tasks finish (returns immediately; results arrive later)"
        ),
    ),
)

STATUS = entry(
    "status",
    api.StatusArgs,
    help="agents, their process state and their task",
    view=views.render_status,
    pager=STATUS_PAGES,
    params={
        "agent": Param(description="Only this agent (name or id); default all", cli="agent"),
        "cursor": (
            "Start at this agent (default 0); an answer that could not hold every agent "
            "gives next_cursor"
        ),
    },
    tool=Tool(
        description=(
            "Show the session's agents: process state, active task and its state (running, "
            "waiting for a reply, stale), pending requests and the last result."
        ),
        prompt_snippet="Show agents, their tasks and pending requests",
    ),
)

CLOSE = entry(
    "close",
    api.CloseArgs,
    help="close an agent (cancels its task)",
    view=views.closed,
    params={"agent": respell(_AGENT, cli="agent")},
    tool=Tool(
        description=(
            "Stop an agent process. Its active task, if any, is cancelled; the agent's records "
            "stay readable in status."
        ),
        prompt_snippet="Stop an agent (cancels its active task)",
    ),
)

READ = entry(
    "read",
    api.ReadArgs,
    help="an agent's recent output",
    view=views.read_lines,
    pager=READ_PAGES,
    params={
        "agent": respell(_AGENT, cli="agent"),
        "lines": Param(
            description="How many lines (default 50)",
            cli="--lines",
            help="how many of the newest lines",
        ),
        "before": "Only lines older than this line number (next_cursor of the previous answer)",
    },
    tool=Tool(
        description=(
            "Read the last lines of an agent's output (what it printed and its tool calls)."
        ),
        prompt_snippet="Read the last lines of an agent's output",
    ),
)

CANCEL = entry(
    "cancel",
    api.CancelArgs,
    help="cancel a task (130)",
    view=views.settled("cancel"),
    params={
        "task_id": Param(description="The task id", cli="task_id"),
        "reason": Param(description="Why (kept in the task's result)", cli="--reason"),
    },
    tool=Tool(
        description=(
            "Cancel a task: it settles as cancelled (return code 130) and the agent stops "
            "working on it. Cancelling a finished task changes nothing: its existing result is "
            "returned with already_settled true."
        ),
        prompt_snippet="Cancel a delegated task",
    ),
)

FAIL = entry(
    "fail",
    api.FailArgs,
    help="fail a task (1)",
    view=views.settled("fail"),
    params={
        "task_id": Param(description="The task id", cli="task_id"),
        "error": Param(description="Why it failed (the task's error)", cli="--error"),
    },
)


class ShutdownArgs(
    api.Arguments[dict[str, Any]], frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``shutdown``: no arguments (the supervisor answers it, then closes every agent)."""


SHUTDOWN = entry(
    "shutdown",
    ShutdownArgs,
    help="stop the session (closes every agent)",
    view=views.shut_down,
    params={},
    host=True,
)

PROMPT = entry(
    "prompt",
    api.PromptArgs,
    help="compatibility: submit a prompt (mapped onto a task)",
    view=views.prompted,
    params={
        "target": respell(_AGENT, cli="agent"),
        "prompt": Param(description="The prompt: the task's text", cli="text"),
        "timeout_minutes": Param(description=_DEADLINE_MINUTES, cli="--timeout", metavar="MINUTES"),
    },
)

WAIT = entry(
    "wait",
    api.WaitArgs,
    help="block until tasks (or prompt ids) settle",
    description=f"Exits {WAIT_TIMED_OUT} when the timeout passes with ids still pending.",
    view=views.waited,
    blocks=True,
    exit_status=lambda data: WAIT_TIMED_OUT if data.get("timed_out") else 0,
    params={
        "ids": Param(description="Task ids (or prompt ids) to wait for", cli="ids", metavar="ID"),
        "timeout_s": Param(
            description="Give up after this many seconds (at most 604800, 7 days)",
            cli="--timeout",
            metavar="SECONDS",
            help="at most 604800 (7 days)",
        ),
    },
)


RESULT = entry(
    "result",
    api.ResultArgs,
    help="",
    view=lambda data: "no result yet" if data is None else views.settled("result")(data),
    params={"task_id": "The task id"},
)

# approvals (protocol/ops/approvals.py): listed here so they are the parent's entries
from protocol.ops.approvals import APPROVE, DENY  # noqa: E402, F401
