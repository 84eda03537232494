"""What git said about an agent's worktree, back in the session's rules (rules 1 and 2 of
:mod:`protocol.session.worktrees`: the task handed over once its start is recorded; the
result handed to its watchers once its changes are listed)."""

from __future__ import annotations

import msgspec

from protocol.records.journal import TaskChangesRecord
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskRecord
from protocol.records.worktrees import WorktreeChanges, WorktreeProbed
from protocol.session import claims, collisions, tasks, watchers
from protocol.session import task as one_task
from protocol.session.effects import Deliver, Effect, Journal, Notify, StopTask, TellTask
from protocol.session.state import Ctx, SessionState

__all__ = ["Diffed", "listed", "probed", "replay_changes"]


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
    # the result is the task's: its actor adds the changes, then the session goes on (listed)
    told = one_task.Listed(changes=changes, then=Diffed(changes=changes))
    return [*effects, TellTask(task_id=event.task_id, message=told)]


class Diffed(msgspec.Struct, frozen=True, kw_only=True):
    """After a settled task's actor added its worktree changes to its result: what the
    session does (:func:`listed`)."""

    changes: WorktreeChanges


def listed(s: SessionState, record: TaskRecord, changes: WorktreeChanges, cx: Ctx) -> list[Effect]:
    """The task's result carries its changes (its actor's record, ``record``): journaled, told
    to the tools' claims, handed to its watchers; its actor, done, stops."""
    s.diffing.discard(record.task_id)
    result = record.result
    assert result is not None
    journal = Journal(record=TaskChangesRecord(task_id=record.task_id, changes=changes))
    told = claims.diffed(s, record, changes, cx)
    handed = watchers.hand_over(s, result, result.completed_at)
    return [journal, *told, *handed, StopTask(task_id=record.task_id)]


def replay_changes(s: SessionState, record: TaskChangesRecord) -> None:
    """A task's changes read back from the journal: its result carries them again."""
    task = s.tasks.get(record.task_id)
    if task is None or task.result is None:
        return
    result = msgspec.structs.replace(task.result, changes=record.changes)
    s.tasks[record.task_id] = msgspec.structs.replace(task, result=result)
