"""What one run of the broker's effects gathers (:mod:`actors.session.broker`)."""

from __future__ import annotations

from typing import Any

import pykka

from actors.session import messages
from actors.session.messages import WaitFor
from protocol.calls import api
from protocol.records.tasks import TaskResult
from protocol.session import effects as fx

__all__ = ["WATCHDOG_EFFECTS", "Run", "read_output", "split_records"]

WATCHDOG_EFFECTS = (
    fx.WatchdogAgent,
    fx.WatchdogRuntime,
    fx.WatchdogInstruction,
    fx.WatchdogTask,
    fx.WatchdogQuery,
)


class Run:
    """What one run of effects gathers for the actors it tells once, at its end."""

    __slots__ = ("answering", "hands", "later", "notes", "waiting", "watchdog")

    def __init__(self, waiting: WaitFor | None = None, *, answering: bool = False) -> None:
        #: the ``wait`` whose watcher this run starts, if it is one
        self.waiting = waiting
        self.watchdog: list[Any] = []
        self.notes: list[fx.OpenNote | fx.AppendNote | fx.FinaliseNote] = []
        #: watcher id -> the results routed to it, in order, each with when its task ended
        #: (one message to each watcher)
        self.hands: dict[str, list[tuple[TaskResult, float]]] = {}
        #: a parent's call: its answer waits for the tasks it tells (and ``later`` numbers
        #: it once it told one; :mod:`actors.session.task_routes`)
        self.answering = answering
        self.later: int | None = None


def read_output(ref: pykka.ActorRef[Any] | None, effect: fx.AnswerFromOutput) -> Any:
    """The future of a ``read``'s answer: the agent's actor holds its output."""
    agent_id, lines, before = effect.agent_id, effect.lines, effect.before
    try:
        if ref is None:
            raise pykka.ActorDeadError(agent_id)
        return ref.ask(messages.ReadOutput(lines=lines, before=before), block=False)
    except pykka.ActorDeadError:  # gone before a restart: nothing of its output is kept
        return api.ReadResult(agent_id=agent_id, lines=())


def split_records(effects: list[fx.Effect]) -> tuple[list[Any], list[fx.Effect]]:
    """The records of ``effects``' ``Journal`` effects (one write), and the other effects."""
    journal = fx.Journal
    records = [e.record for e in effects if type(e) is journal]
    return records, [e for e in effects if type(e) is not journal]
