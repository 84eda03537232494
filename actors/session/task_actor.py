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
- it owns its deadline, its budget and its stale wait: a timer of its own, armed for
  :func:`~protocol.session.task_budget.alarm` (the earliest of its deadline, its minutes'
  end, their soft share not yet warned of, and, while it waits, the point where its wait is
  stale and not yet told: :mod:`protocol.session.task_stale`; again when a ``Start`` sets one
  counted from the start), cancelled once it has settled. When it goes off the actor tells
  itself, and decides it like any other message
  (:func:`~protocol.session.task_budget.rang`, then
  :func:`~protocol.session.task_stale.rang`); what it decided goes to the broker as a report
  the broker did not route (``call`` :data:`OWN`).
  What the task spent the session counts and tells it (``Spent``): past a limit of its
  budget it fails the task, past the soft share of one it warns (once per limit: its
  :class:`~protocol.session.task_budget.Soft`), and it keeps the total for the result of an
  ending it decides itself;
- once the broker has taken its settlement (journaled, handed to the watchers) it retires
  the actor (:meth:`~actors.runtime.runtime.Runtime.retire`: stopped after the mail it has).
  A task settled in an agent's git worktree lives on until git has listed what it changed:
  the actor adds the changes to its result (``Listed``), and the result goes to the watchers
  with them. Until it is retired an ending that comes late still finds it, and is answered
  with the result that won.

After a parent restart the broker starts an actor for each open task, from the record the
journal's fold rebuilt (:func:`protocol.session.restore.resume`): the same class, the same
rules.
"""

from __future__ import annotations

import functools
from typing import Any

import pykka

from actors.runtime.clock import TimerHandle
from actors.runtime.runtime import ShepherdActor, tell_quietly
from protocol.records.tasks import TaskRecord
from protocol.records.usage import Usage
from protocol.session import task as rules
from protocol.session import task_budget as budget
from protocol.session import task_stale
from protocol.session.task_budget import Soft
from protocol.session.task_stale import Stale

__all__ = ["OWN", "Routed", "TaskActor", "TaskReport"]

#: the ``call`` of a report on something the task decided of its own (its timer): nothing
#: the broker routed, so nothing it counts as in flight
OWN = -1


class Routed:
    """A message routed to a task, for the parent's call numbered ``call`` (0: none)."""

    __slots__ = ("call", "message")

    def __init__(self, message: rules.TaskMessage, call: int) -> None:
        self.message = message
        self.call = call


class TaskReport:
    """What a task decided of one routed message, for the broker: every routed message is
    answered with one (``report`` None: the rules had nothing to say), so the broker knows
    when all it routed is decided; ``call`` as routed (:data:`OWN`: not routed, the task's
    own timer)."""

    __slots__ = ("call", "report")

    def __init__(self, report: budget.AnyReport | None, call: int) -> None:
        self.report = report
        self.call = call


class _Due:
    """The task's timer went off, for the deadline it was armed for."""

    __slots__ = ("deadline",)

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline


class TaskActor(ShepherdActor):
    runs_in_place = True  # pure rules and one tell: run by whoever tells it, at once

    def __init__(
        self,
        record: TaskRecord,
        broker: pykka.ActorRef[Any],
        usage: Usage | None = None,
        soft: Soft | None = None,
        stale: Stale | None = None,
    ) -> None:
        super().__init__()
        self.record = record
        self._broker = broker
        self._usage = usage
        #: its soft warnings (a task with a budget), as its rules keep them
        self.soft = soft
        #: its stale waits: how long a wait may last untold, and the episode told of
        self.stale = stale
        #: the deadline its timer is armed for, and the timer (None: none armed)
        self.armed: float | None = None
        self._timer: TimerHandle | None = None
        self._arm()

    def on_receive(self, routed: Any) -> Any:
        if type(routed) is Routed:
            message = routed.message
            if type(message) is rules.Spent:
                self._usage = message.usage
            self.record, self.soft, report = budget.told(self.record, self.soft, message)
            self._arm()
            tell_quietly(self._broker, TaskReport(report, routed.call))
            return None
        if type(routed) is _Due:
            if routed.deadline == self.armed:  # else a timer since replaced: its mail crossed
                self._timer = self.armed = None
                now = self.clock.now()
                self.record, self.soft, report = budget.rang(
                    self.record, self.soft, routed.deadline, now, self._usage
                )
                if report is None:  # no end, no soft share: its wait may be stale
                    self.stale, report = task_stale.rang(
                        self.record, self.stale, routed.deadline, now
                    )
                self._arm()
                if report is not None:
                    tell_quietly(self._broker, TaskReport(report, OWN))
            return None
        return super().on_receive(routed)

    def _arm(self) -> None:
        """The timer armed for the task's deadline, the end or the soft share of its
        minutes, or the stale point of its wait (:func:`protocol.session.task_budget.alarm`)."""
        deadline = budget.alarm(self.record, self.soft, self.stale)
        if deadline == self.armed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.armed = deadline
        if deadline is not None:
            tell = functools.partial(tell_quietly, self.actor_ref, _Due(deadline))
            self._timer = self.clock.call_later(max(0.0, deadline - self.clock.now()), tell)

    def on_stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
