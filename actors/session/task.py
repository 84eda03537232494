"""TaskActor: one delegated task's presence in the runtime, from delegation to settlement.

The task's facts (its record, state, pending requests, result) have one owner: the session's
state, changed only by the rules (:mod:`protocol.session.tasks`). This actor owns what the
rules cannot hold:

- **its deadline's timer.** When it fires, the actor hands the ``TaskDeadline`` event to the
  broker, whose rules settle the task ``timed_out`` if it is still open (a deadline that lost
  a race with the agent's ``done`` changes nothing). What reached the broker before that
  event (a question the agent asked in its last moment) is handled first, as part of the task.
- **its working note**, ``artifacts/<task>.md``, written while the task runs, off the
  broker's thread, in the order the rules asked for it.

It is spawned by the ``OpenNote`` effect, and at settlement (``FinaliseNote``) it writes the
note's ending, drops its timer and stops itself: a session holds one actor per *open* task,
never one per task it ever ran.

After a parent restart an open task gets its actor again, taking over the note it already
has (``OpenNote(restored=True)``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pykka

from actors.records.notes import TaskNotes
from actors.runtime.clock import TimerHandle
from actors.runtime.log import logger
from actors.runtime.runtime import ShepherdActor, tell_quietly
from actors.session.messages import ArmDeadline, DeadlineDue, DisarmDeadline, NoteLine, SettleNote
from protocol.tasks import TaskRecord

__all__ = ["TaskActor"]


class TaskActor(ShepherdActor):
    def __init__(
        self,
        record: TaskRecord,
        notes: TaskNotes | None,
        broker: pykka.ActorRef[Any],
        *,
        restored: bool,
    ) -> None:
        super().__init__()
        self.task_id = record.task_id
        self._record = record  # as delegated: the note's header, written once
        self._notes = notes
        self._broker = broker
        self._restored = restored
        self._deadline: TimerHandle | None = None

    def on_start(self) -> None:
        if not self._restored:
            self._write("open", lambda notes: notes.open(self._record))

    def on_receive(self, message: Any) -> Any:
        match message:
            case ArmDeadline(delay=delay, event=event):
                self._disarm()
                due = DeadlineDue(event=event)
                fire = functools.partial(tell_quietly, self.actor_ref, due)
                self._deadline = self.clock.call_later(delay, fire)
            case DeadlineDue(event=event):
                self._deadline = None
                tell_quietly(self._broker, event)
            case DisarmDeadline():
                self._disarm()
            case NoteLine(line=line):
                self._write("append", lambda notes: notes.append(self.task_id, line))
            case SettleNote(record=record):
                self._write("finalise", lambda notes: notes.finalise(record))
                self._disarm()
                self.stop()
            case _:
                return super().on_receive(message)
        return None

    def on_stop(self) -> None:
        self._disarm()

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _write(self, what: str, write: Callable[[TaskNotes], None]) -> None:
        """A note that cannot be written is logged: the note is a convenience for people, the
        journal is the record (a full disk must not stop the task)."""
        if self._notes is None:
            return
        try:
            write(self._notes)
        except OSError:
            logger.opt(exception=True).error("task note of {}: {} failed", self.task_id, what)
