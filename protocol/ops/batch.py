"""The batch operations: many of one parent operation in one call (one broker message, one
journal write; see :mod:`protocol.session.batch`). Entries of the table like those of
:mod:`protocol.ops.parent`, listed after them."""

from __future__ import annotations

from protocol.calls import api_batch, views
from protocol.ops.parent import DELEGATE, SPAWN
from protocol.ops.spec import Param, Tool, entry, respell

__all__ = ["DELEGATE_MANY", "SPAWN_MANY"]


SPAWN_MANY = entry(
    "spawn_many",
    api_batch.SpawnManyArgs,
    help="start several agents of one kind, in one call",
    description=(
        "Each NAME is one spawn with the options given, any option of spawn (at most 100 "
        "per call); with --worktree each agent gets a worktree of its own. A name that "
        "cannot be used (taken, malformed) is reported by its index and the others are "
        "started. Exits 1 when any name was refused."
    ),
    view=views.spawned_many,
    exit_status=lambda data: 1 if data.get("errors") else 0,
    params={
        "names": Param(
            description=(
                "The agents' names, at least one and at most 100, each as spawn's name: "
                "lowercase letter first, then letters, digits, '-' or '_' (at most 32)"
            ),
            cli="names",
            metavar="NAME",
        ),
        # every option of spawn, as spawn says it (both Structs take api.SpawnOptions, so
        # entry() refuses a field without its Param here)
        **{k: v for k, v in SPAWN.params.items() if k != "name"},
        "branch": respell(
            SPAWN.params["branch"],
            description=(
                "The worktree's branch (with worktree and one name only: each agent's worktree "
                "needs its own branch; default shepherd/<session>/<name>)"
            ),
            help="the worktree's branch (--worktree, one NAME only)",
        ),
    },
    tool=Tool(
        description=(
            "Start several agents of one kind in one call (at most 100), each with the same "
            "options, e.g. a team of workers for a fan-out; returns one agent id per name, in "
            "order (null where a name was refused, its error in errors by index: the others "
            "still start). Each starts idle; give them work with shepherd_delegate_many."
        ),
        prompt_snippet="Start several agents with the same options in one call",
    ),
)

DELEGATE_MANY = entry(
    "delegate_many",
    api_batch.DelegateManyArgs,
    help="give many agents a task each, in one call",
    description=(
        "Each --task AGENT TEXT is one delegate (at most 100 per call); an item that cannot be "
        "delegated (unknown or busy agent, ...) is reported by its index and the others go "
        "ahead. For more options per item, or more items than fit a command line, use "
        "'shepherd tool shepherd_delegate_many --args -' with the JSON on standard input. "
        "Exits 1 when any item was refused (the accepted ones are delegated all the same)."
    ),
    view=views.delegated_many,
    exit_status=lambda data: 1 if data.get("errors") else 0,
    params={
        "items": Param(
            description=(
                "The tasks, at least one and at most 100: each names its agent (target: name "
                "or id), its task text, and optionally its own timeout_minutes and budgets "
                "(max_turns, max_tokens, max_cost, max_minutes, as shepherd_delegate's)"
            ),
            cli="--task",
            metavar="AGENT TEXT",
            help="an agent and its task (repeat it, at most 100)",
        ),
        "timeout_minutes": Param(
            description=(
                "Deadline in minutes for every task that gives none (at most 10080, 7 days). "
                "Leave it out for no deadline"
            ),
            cli="--timeout",
            metavar="MINUTES",
            help="deadline of each task without its own (at most 10080)",
        ),
        # delegate's other fields the call takes, as delegate says them: each item's, unless
        # the item gives its own
        **{
            k: v
            for k, v in DELEGATE.params.items()
            if k in api_batch.DelegateManyArgs.__struct_fields__ and k != "timeout_minutes"
        },
        "watch": Param(
            description=(
                "Also watch every accepted task with one watcher (default false): its "
                "completions arrive as notifications, as with shepherd_watch"
            ),
            cli="--watch",
            help="also watch the accepted tasks (one watcher)",
        ),
    },
    tool=Tool(
        description=(
            "Give many agents a task each in one call (at most 100 tasks), e.g. a fan-out over "
            "a team; returns at once with one task id per item, in order (null where an item "
            "was refused, its error in errors by index: the others are still delegated). "
            "Same rules as shepherd_delegate: one active task per agent, so two items for one "
            "agent refuse the second. Set watch to be notified of every accepted task."
        ),
        prompt_snippet="Delegate many tasks in one call; returns their task ids immediately",
    ),
)
