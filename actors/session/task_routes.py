"""The broker's routes to the task actors, and the parent's calls waiting for their tasks.

The broker (:mod:`actors.session.broker`) runs three effects of the session's rules here:

- ``SpawnTask`` starts a :class:`~actors.session.task_actor.TaskActor` owning the record given,
  and keeps its address, by task id;
- ``TellTask`` routes a message to it;
- ``StopTask``: the session took the task's settlement; its actor stops, its address is
  forgotten.

**A parent's call is answered once every task it told has decided**, and the session has
acted on what each reported: after ``cancel``, ``close`` or a ``reply`` returns, ``status``
shows what they did. Each ``TellTask`` of a call's run (``Run.answering``) is routed with the
call's number (:class:`~actors.session.task_actor.Routed`; the task answers every routed
message with a :class:`~actors.session.task_actor.TaskReport` carrying it); the run's answer
and its reply are kept under that number (:meth:`defer`) until the last of those reports has
been acted on (:meth:`reported`). What the session decides of each of those reports is
gathered into ONE run once the last is in (the records of a batch's settlements in one journal
write, one message per watcher), which keeps its place among the held runs from the first
report on (nothing decided later overtakes it). The answer is then the report's own (a
cancel's or a fail's settlement), else the run's.

A route to a task whose actor is gone is never expected (the session routes only to tasks its
read model shows open, and stops an actor only once it shows it settled): it is logged, and
a call waiting for it is not left waiting.
"""

from __future__ import annotations

import itertools
from typing import Any

import pykka

from actors.runtime.runtime import Runtime, tell_quietly
from actors.session.runs import Run
from actors.session.task_actor import OWN, Routed, TaskActor, TaskReport
from protocol.session import effects as fx
from protocol.session.task_budget import AnyReport

__all__ = ["Call", "TaskRoutes"]


class Call:
    """A call whose answer waits: for how many reports, its reply, the run's answer; and,
    while its tasks report, what the session decided of each (one run once the last is in:
    the place it keeps among the held runs, and its effects)."""

    __slots__ = ("answer", "effects", "held", "owed", "reply")

    def __init__(self) -> None:
        self.owed = 0
        self.reply: pykka.Future[Any] | None = None
        self.answer: Any = None
        self.held: Any = None
        self.effects: list[fx.Effect] = []


class TaskRoutes:
    def __init__(self, runtime: Runtime, broker: pykka.ActorRef[Any], log: Any) -> None:
        self._runtime = runtime
        self._broker = broker
        self._log = log
        #: task id -> its actor, while it runs
        self._actors: dict[str, pykka.ActorRef[Any]] = {}
        #: call number -> the call waiting for its tasks' reports
        self._calls: dict[int, Call] = {}
        self._numbers = itertools.count(1)
        #: messages routed whose report has not been acted on yet (every routed message is
        #: reported: a task answers each with a ``TaskReport``)
        self.in_flight = 0

    def __len__(self) -> int:
        """How many task actors run."""
        return len(self._actors)

    def spawn(self, effect: fx.SpawnTask, _: Run) -> None:
        record = effect.record
        actor = self._runtime.spawn(
            TaskActor, record, self._broker, effect.usage, effect.soft, effect.stale
        )
        self._actors[record.task_id] = actor

    def tell(self, effect: fx.TellTask, run: Run) -> None:
        message = effect.message
        call = 0  # none: the message is reported all the same (``in_flight``)
        if run.answering:
            if run.later is None:
                run.later = next(self._numbers)
                self._calls[run.later] = Call()
            call = run.later
        ref = self._actors.get(effect.task_id)
        if ref is None or not tell_quietly(ref, Routed(message, call)):
            self._log.error("no actor for task {}: {} not routed", effect.task_id, message)
            return
        self.in_flight += 1
        if call:
            self._calls[call].owed += 1

    def stop(self, effect: fx.StopTask, _: Run) -> None:
        ref = self._actors.pop(effect.task_id, None)
        if ref is not None:
            self._runtime.retire(ref)

    def defer(self, number: int, reply: pykka.Future[Any] | None, answer: Any) -> bool:
        """Keep the reply and the answer of the run that numbered the call ``number``; False
        if nothing is owed to it any more (it answers now)."""
        call = self._calls[number]
        if call.owed == 0:
            del self._calls[number]
            return False
        call.reply, call.answer = reply, answer
        return True

    def reported(self, told: TaskReport) -> tuple[AnyReport | None, Call | None, bool]:
        """What a task reported of a message routed to it (None: nothing); the call it
        answers to, if any, and whether it is the last report that call waited for (then the
        call is forgotten here)."""
        if told.call == OWN:  # decided by the task alone (its deadline): nothing was routed
            return told.report, None, False
        self.in_flight -= 1
        report = told.report
        call = self._calls.get(told.call) if told.call else None
        if call is None:
            return report, None, False
        call.owed -= 1
        if call.owed > 0:
            return report, call, False
        del self._calls[told.call]
        return report, call, True

    def fail(self, error: Exception) -> None:
        """The session stopped deciding: every call still waiting is told ``error``."""
        calls, self._calls = self._calls, {}
        for call in calls.values():
            if call.reply is not None:
                call.reply.set_exception((type(error), error, None))
