"""NoteWriter: every task's working note, written off the broker's thread, by one actor.

A task's record is its actor's (:mod:`actors.session.task_actor`); its working note,
``artifacts/<task>.md``, is a file for people, written by THIS actor, one for the whole
session, in the order the session's rules asked for it (an actor's mail is handled in order,
so a task's note is opened, appended to and finalised in that order). The broker hands the
writer the note effects of a whole run of effects in one message: a note costs a task's actor
nothing, and a full disk never stops a task (the journal is the record). A note that cannot
be written is logged, and the parent is told (a ``note_not_written`` notice, once per task:
a disk that stays full does not flood it).

After a parent restart an open task's note is taken over as it is (``OpenNote(restored=True)``
writes nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from actors.records.notes import TaskNotes
from actors.runtime.log import logger
from actors.runtime.runtime import ShepherdActor
from protocol.records.notifications import AnyNotification, Notice
from protocol.session.effects import AppendNote, FinaliseNote, OpenNote

__all__ = ["NoteWriter", "NoteWrites"]

NoteEffect = OpenNote | AppendNote | FinaliseNote


class NoteWrites:
    """The note effects of one run of the broker's effects, in order (one message)."""

    __slots__ = ("effects",)

    def __init__(self, effects: Sequence[NoteEffect]) -> None:
        self.effects = effects


class NoteWriter(ShepherdActor):
    def __init__(self, notes: TaskNotes, tell: Callable[[AnyNotification], object]) -> None:
        super().__init__()
        self._notes = notes
        #: the parent's sink (guarded: a failing sink is logged, never raised)
        self._tell = tell
        #: the open tasks whose note failed and the parent was told so (forgotten at finalise)
        self._told: set[str] = set()

    def on_receive(self, message: Any) -> Any:
        if not isinstance(message, NoteWrites):
            return super().on_receive(message)
        for effect in message.effects:
            self._write(effect)
        return None

    def _write(self, effect: NoteEffect) -> None:
        """A note that cannot be written is logged and told to the parent, once per task: the
        note is a convenience for people, the journal is the record (a full disk must not
        stop the task)."""
        notes = self._notes
        task_id = effect.task_id if isinstance(effect, AppendNote) else effect.record.task_id
        try:
            match effect:
                case OpenNote(record=record, restored=False):
                    notes.open(record)
                case AppendNote(line=line):
                    notes.append(task_id, line)
                case FinaliseNote(record=record):
                    notes.finalise(record)
        except OSError as exc:
            what = type(effect).__name__
            logger.opt(exception=True).error("task note of {}: {} failed", task_id, what)
            if task_id not in self._told:
                self._told.add(task_id)
                self._tell(
                    Notice(
                        created_at=self.clock.now(),
                        code="note_not_written",
                        text=(
                            f"the working note of task {task_id} could not be written "
                            f"({exc.strerror or exc!r}); the task goes on, its journal is the "
                            "record, and further failures of this note are only logged"
                        ),
                        task_id=task_id,
                    )
                )
        if isinstance(effect, FinaliseNote):
            self._told.discard(task_id)
