"""Claims without work: a ``completed`` done from a task that shows no sign of having worked.

Rules:

1. **Work is what the session sees of it**: the tool calls the agent's adapter reports for
   the task (the scripted, Pi and ACP adapters report them; a command agent's turn is one
   opaque process, so it reports none), and, for an agent in a git worktree, the files the
   task changed there (listed once it settled: :mod:`protocol.session.worktree_events`).
2. **A claim without work is told, once, and taken.** A ``completed`` done (not one that an
   acceptance check verified: the check is its evidence) from a task that made no tool call
   and, in a worktree, changed no file, is told to the parent as an ``unverified_claim``
   notice, with the task's counts and time; the task completes all the same. Nothing is said
   of an agent whose work cannot be seen (a command agent outside a worktree), nor after a
   parent restart, when the task's count before it is not known.
3. **``spawn --require-evidence`` refuses it instead**: that agent's ``completed`` with no
   tool call during its task is refused (``no_evidence``), told to the agent in its receipt;
   the task stays open for it to work and say done again. Only adapters that report tool
   calls take the option (a command agent is refused it at spawn: use ``--verify``).
"""

from __future__ import annotations

from typing import Final

import msgspec

from protocol.calls import api
from protocol.core.errors import InvalidArgument, NoEvidence
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskRecord, TaskState
from protocol.records.worktrees import WorktreeChanges
from protocol.session.effects import Effect, Notify
from protocol.session.state import AgentRow, Ctx, SessionState, TurnStats

__all__ = [
    "REPORTS_TOOLS",
    "check_spawn",
    "counted",
    "diffed",
    "refused",
    "restored",
    "settled",
]

#: the adapters that report their agent's tool calls (rule 1)
REPORTS_TOOLS: Final = frozenset({"scripted", "pi-rpc", "acp"})


def check_spawn(args: api.SpawnArgs) -> None:
    """Rule 3: ``--require-evidence`` only where tool calls are reported."""
    if args.require_evidence and args.adapter not in REPORTS_TOOLS:
        raise InvalidArgument(
            f"spawn: require_evidence: the {args.adapter} adapter reports no tool calls, so "
            "every claim would be refused; give its tasks an acceptance check (--verify)"
        )


def counted(s: SessionState, row: AgentRow) -> None:
    """A tool call of ``row``'s agent: one more for its open task (rule 1)."""
    task_id = row.active_task
    if task_id is None:
        return
    stats = s.turn_stats.get(task_id, TurnStats())
    if stats.tool_calls is not None:
        s.turn_stats[task_id] = msgspec.structs.replace(stats, tool_calls=stats.tool_calls + 1)


def _calls(s: SessionState, task_id: str) -> int | None:
    return s.turn_stats.get(task_id, TurnStats()).tool_calls


def refused(s: SessionState, row: AgentRow, record: TaskRecord) -> None:
    """Rule 3, on the agent's ``completed`` (raises ``no_evidence``)."""
    if not row.options.get("require_evidence") or record.check is not None:
        return
    if _calls(s, record.task_id) == 0:
        raise NoEvidence(
            f"task {record.task_id}: completed refused: no tool call was seen during the "
            "task (this agent must show its work: run what the task needs, then say done)"
        )


def settled(s: SessionState, before: TaskRecord, after: TaskRecord, cx: Ctx) -> list[Effect]:
    """Rule 2, when the agent's own claim settled the task (before its counts are dropped)."""
    if after.state is not TaskState.COMPLETED or after.check is not None:
        return []
    row = s.agents.get(after.agent_id)
    if row is None:
        return []
    calls = _calls(s, after.task_id)
    reports = row.adapter in REPORTS_TOOLS
    if calls is None or (calls and reports):
        return []
    if row.options.get("worktree"):  # judged once its changes are listed
        s.unproven[after.task_id] = calls if reports else None
        return []
    if not reports:
        return []
    return [_told(s, after, cx, calls, None)]


def diffed(s: SessionState, record: TaskRecord, changes: WorktreeChanges, cx: Ctx) -> list[Effect]:
    """Rule 2 for an agent in a worktree: its task's changes are listed."""
    if record.task_id not in s.unproven:
        return []
    calls = s.unproven.pop(record.task_id)
    if changes.count or changes.error is not None:
        return []
    return [_told(s, record, cx, calls, changes)]


def restored(s: SessionState, task_id: str) -> None:
    """After a parent restart: the open task's tool calls before it are not known."""
    stats = s.turn_stats.get(task_id, TurnStats())
    s.turn_stats[task_id] = msgspec.structs.replace(stats, tool_calls=None)


def _told(
    s: SessionState,
    record: TaskRecord,
    cx: Ctx,
    calls: int | None,
    changes: WorktreeChanges | None,
) -> Notify:
    name = s.name_of(record.agent_id)
    started = record.started_at if record.started_at is not None else record.created_at
    result = record.result
    ended = result.completed_at if result is not None else cx.now
    seen = ["no tool call" if calls == 0 else "its tool calls unknown"]
    if changes is not None:
        seen.append(f"no file changed in its worktree ({changes.branch})")
    usage = result.usage if result is not None else None
    turns = f", {usage.turns} turn{'s' if usage.turns != 1 else ''}" if usage else ""
    text = (
        f"{name} said task {record.task_id} completed after {ended - started:.1f} s{turns} "
        f"with {' and '.join(seen)}: its claim was taken without evidence. Check its work "
        "(shepherd read, its worktree), or give such tasks an acceptance check (--verify), or "
        "refuse such claims (spawn --require-evidence)."
    )
    note = Notice(
        created_at=cx.now,
        code="unverified_claim",
        text=text,
        agent_id=record.agent_id,
        task_id=record.task_id,
    )
    return Notify(note=note)
