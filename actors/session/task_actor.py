"""TaskActor: one task, from ``delegate`` until the session has taken its settlement.

The actor owns the task's record (:class:`~protocol.records.tasks.TaskRecord`: its state, its
pending requests, its result) and is the one place where its waiting transitions and its
settlement are decided. What it does with each message is a rule of
:mod:`protocol.session.task`; this actor calls the rule and sends the broker what it reports:

- the broker routes to it what concerns the task (a request of its agent opened or closed,
  an ending: the agent's ``done``, the parent's cancel or fail, the deadline, the agent's exit
  or close, a failed delivery, a budget), in the order the session decided them; concurrent
  endings meet in this mailbox and the first wins;
- each report goes back to the broker's mailbox, where the session's rules act on it (the
  agent's slot, the request table, the journal, the watchers,
  :func:`protocol.session.settlement.reported`);
- once the broker has taken its settlement (journaled, handed to the watchers) it retires
  the actor (:meth:`~actors.runtime.runtime.Runtime.retire`: stopped after the mail it has).
  Until then an ending that comes late still finds it, and is answered with the result that
  won.

After a parent restart the broker starts an actor for each open task, from the record the
journal's fold rebuilt (:func:`protocol.session.restore.resume`): the same class, the same
rules.
"""

from __future__ import annotations

from typing import Any

import pykka

from actors.runtime.runtime import ShepherdActor, tell_quietly
from protocol.records.tasks import TaskRecord
from protocol.session import task as rules

__all__ = ["Routed", "TaskActor", "TaskReport"]


class Routed:
    """A message routed to a task, for the parent's call numbered ``call`` (0: none)."""

    __slots__ = ("call", "message")

    def __init__(self, message: rules.TaskMessage, call: int) -> None:
        self.message = message
        self.call = call


class TaskReport:
    """What a task decided of one routed message, for the broker: every routed message is
    answered with one (``report`` None: the rules had nothing to say), so the broker knows
    when all it routed is decided; ``call`` as routed."""

    __slots__ = ("call", "report")

    def __init__(self, report: rules.Report | None, call: int) -> None:
        self.report = report
        self.call = call


class TaskActor(ShepherdActor):
    runs_in_place = True  # pure rules and one tell: run by whoever tells it, at once

    def __init__(self, record: TaskRecord, broker: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.record = record
        self._broker = broker

    def on_receive(self, routed: Any) -> Any:
        if type(routed) is not Routed:
            return super().on_receive(routed)
        self.record, report = rules.receive(self.record, routed.message)
        tell_quietly(self._broker, TaskReport(report, routed.call))
        return None
