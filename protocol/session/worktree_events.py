"""What git said about an agent's worktree, back in the session's rules (rules 1 and 2 of
:mod:`protocol.session.worktrees`: the task handed over once its start is recorded; the
result handed to its watchers once its changes are listed)."""

from __future__ import annotations

import msgspec

from protocol.records.journal import TaskChangesRecord
from protocol.records.notifications import Notice
from protocol.records.worktrees import WorktreeChanges, WorktreeProbed
from protocol.session import claims, collisions, tasks, watchers
from protocol.session.effects import Deliver, Effect, Journal, Notify
from protocol.session.state import Ctx, SessionState

__all__ = ["probed", "replay_changes"]


def probed(s: SessionState, event: WorktreeProbed, cx: Ctx) -> list[Effect]:
    if event.kind == "live":  # a turn's end, read for live edit collisions
        return collisions.probed(s, event, cx)
    record = s.tasks.get(event.task_id)
    if record is None:
        return []
    effects: list[Effect] = []
    if event.error is not None:
        what = "where it stood at the task's start" if event.kind == "snapshot" else "its changes"
        text = (
            f"git failed on {s.name_of(event.agent_id)}'s worktree ({what}, task "
            f"{event.task_id}): {event.error}"
        )
        note = Notice(
            created_at=cx.now,
            code="worktree_failed",
            text=text,
            agent_id=event.agent_id,
            task_id=event.task_id,
        )
        effects.append(Notify(note=note))
    if event.kind == "snapshot":
        if record.terminal:
            return effects
        if event.snapshot is not None:
            s.snapshots[event.task_id] = event.snapshot
        envelope = tasks.task_envelope(s, record, cx)
        return [*effects, Deliver(agent_id=record.agent_id, envelope=envelope)]
    if event.task_id not in s.diffing or record.result is None:
        return effects
    s.diffing.discard(event.task_id)
    if event.changed_files is not None:
        s.worktree_changed[event.agent_id] = event.changed_files
    changes = event.changes
    if changes is None:  # git failed: the result says so
        row = s.agents.get(event.agent_id)
        opts = row.options if row is not None else {}
        changes = WorktreeChanges(
            branch=str(opts.get("branch", "")),
            path=str(opts.get("cwd", "")),
            error=event.error or "no changes were listed",
        )
    result = msgspec.structs.replace(record.result, changes=changes)
    s.tasks[event.task_id] = record = msgspec.structs.replace(record, result=result)
    journal = Journal(record=TaskChangesRecord(task_id=event.task_id, changes=changes))
    told = claims.diffed(s, record, changes, cx)
    return [*effects, journal, *told, *watchers.hand_over(s, result, cx)]


def replay_changes(s: SessionState, record: TaskChangesRecord) -> None:
    """A task's changes read back from the journal: its result carries them again."""
    task = s.tasks.get(record.task_id)
    if task is None or task.result is None:
        return
    result = msgspec.structs.replace(task.result, changes=record.changes)
    s.tasks[record.task_id] = msgspec.structs.replace(task, result=result)
