"""TaskActor: owns one delegated task — its record, its deadline, its settlement.

Thin by design: each message maps to one pure move in ``protocol.tasks`` and its effects.
On settlement the result is journaled *first*, then the broker is told (it frees the agent's
slot, cancels dropped requests, and hands the result to the watchers). The broker stops this
actor once it has the result; anything that reaches it before then is answered with the
stored result (first terminal event wins).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pykka
from loguru import logger

from actors.clock import TimerHandle
from actors.crashpoints import crashpoint
from actors.journal import Journal
from actors.messages import (
    CloseRequest,
    Done,
    DoneOutcome,
    OpenRequest,
    Settle,
    Start,
    TaskChanged,
    TaskDeadline,
)
from actors.notes import TaskNotes
from actors.runtime import ShepherdActor
from protocol import api, tasks
from protocol.errors import ShepherdError
from protocol.tasks import TaskEvent, TaskRecord

__all__ = ["TaskActor"]


class TaskActor(ShepherdActor):
    def __init__(
        self,
        record: TaskRecord,
        broker: pykka.ActorRef[Any],
        journal: Journal,
        notes: TaskNotes | None = None,
    ) -> None:
        super().__init__()
        self.record = record
        self._broker = broker
        self._journal = journal
        self._notes = notes
        self._deadline: TimerHandle | None = None

    def on_start(self) -> None:
        if self.record.deadline_at is not None:
            delay = self.record.deadline_at - self.clock.now()
            self._deadline = self.clock.call_later(delay, self._deadline_passed)

    def _deadline_passed(self) -> None:
        if self.actor_ref.is_alive():
            self.actor_ref.tell(TaskDeadline())

    def on_receive(self, message: Any) -> Any:
        match message:
            case Start():
                self._replace(tasks.start(self.record, self.clock.now()))
            case OpenRequest(request_id=request_id):
                if not self.record.terminal:
                    self._replace(tasks.open_request(self.record, request_id, self.clock.now()))
            case CloseRequest(request_id=request_id):
                self._replace(tasks.close_request(self.record, request_id))
            case Done(envelope=env):
                try:
                    self._settle(
                        tasks.event_for_done(env.status),
                        text=env.summary,
                        error=env.error,
                        cancel_requests=env.cancel_requests,
                        by_agent=True,
                    )
                except ShepherdError as exc:
                    self._broker.tell(DoneOutcome(envelope=env, error=exc.info()))
                else:  # settled now, or earlier (then the stored result is the answer)
                    self._broker.tell(DoneOutcome(envelope=env, result=self.record.result))
            case Settle(event=event, text=text, error=error, report=report):
                changed = self._settle(event, text=text, error=error, cancel_requests=True)
                result = self.record.result
                if not report or result is None:
                    return result
                return api.SettleResult(
                    **msgspec.structs.asdict(result), already_settled=not changed
                )
            case TaskDeadline():
                if not self.record.terminal:
                    self._settle(
                        TaskEvent.TIME_OUT,
                        error="task deadline passed before the agent called done",
                        cancel_requests=True,
                    )
            case "snapshot":
                return self.record
            case _:
                return super().on_receive(message)
        return None

    def _replace(self, record: TaskRecord) -> None:
        if record is self.record:
            return
        self.record = record
        self._broker.tell(TaskChanged(record=record))

    def _settle(
        self,
        event: TaskEvent,
        *,
        text: str | None = None,
        error: str | None = None,
        cancel_requests: bool = False,
        by_agent: bool = False,
    ) -> bool:
        before = self.record
        settled, changed = tasks.settle(
            before, event, self.clock.now(), text=text, error=error, cancel_requests=cancel_requests
        )
        if not changed:
            return False
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        assert settled.result is not None
        crashpoint("settle.before_journal")
        self._journal.append(settled)  # durable before anyone hears of it (DESIGN §1.6)
        crashpoint("settle.after_journal")
        if self._notes is not None:
            try:
                self._notes.finalise(settled)
            except OSError:
                logger.opt(exception=True).error(
                    "task note for {t} not finalised", t=settled.task_id
                )
        self.record = settled
        self._broker.tell(
            TaskChanged(
                record=settled,
                dropped_requests=before.pending_requests,
                settled_by_agent=by_agent,
            )
        )
        return True
