"""The scripted agent's interpreter: a sans-IO machine that turns deliveries into effects.

Rules:
- :class:`ScriptMachine` never does IO itself: the caller performs each effect it returns.
  The same machine drives the in-process simulated agent and the real ``shepherd-child``
  bridge.
- Deliveries that arrive while the script is busy queue; a ``steer`` jumps the queue.
- ``await reply`` is satisfied by a reply, or by the notice that closes one of the script's own
  questions without a reply (it timed out, its recipient is gone, it could not be delivered);
  any other notice (a wait cycle, a stale wait, a refusal) waits for ``await any``.
- When the parent ends the script's task (cancel, fail, deadline),
  :meth:`ScriptMachine.cancel_task` leaves it: the task's queued deliveries are dropped, the
  running step is abandoned, the turn ends, and the script goes to the next ``await task``
  step (after the current one, else back to the one that took the task), ready for the next
  task.

The steps themselves, and how a script is parsed, are :mod:`protocol.scripted.script`.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import msgspec

from protocol.scripted.script import (
    AwaitKind,
    AwaitStep,
    DoneStep,
    ExitStep,
    MessageStep,
    ReplyStep,
    RunStep,
    SayStep,
    Script,
    SleepStep,
)

__all__ = [
    "Delivered",
    "Effect",
    "Exit",
    "Output",
    "RunCommand",
    "ScriptMachine",
    "SendDone",
    "SendMessage",
    "SendReply",
    "Sleep",
    "TurnEnd",
    "TurnStart",
]

DeliveryKind = Literal["task", "message", "reply", "notice"]


class Delivered(msgspec.Struct, frozen=True, kw_only=True):
    """Something that reached the agent: a task, a message, a reply or a notice."""

    kind: DeliveryKind
    text: str
    message_id: str = ""
    sender_id: str = ""
    task_id: str | None = None
    expects_reply: bool = False
    steer: bool = False
    #: a notice that closes one of this agent's own questions without a reply (the driver
    #: knows which message ids were its questions)
    closes_request: bool = False


class TurnStart(msgspec.Struct, frozen=True):
    pass


class TurnEnd(msgspec.Struct, frozen=True):
    pass


class Output(msgspec.Struct, frozen=True):
    text: str


class RunCommand(msgspec.Struct, frozen=True):
    command: str


class SendMessage(msgspec.Struct, frozen=True, kw_only=True):
    to: str
    text: str
    task_id: str | None
    expects_reply: bool
    steer: bool


class SendReply(msgspec.Struct, frozen=True, kw_only=True):
    to: str
    text: str
    reply_to: str
    task_id: str | None


class SendDone(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str | None
    status: Literal["completed", "blocked", "failed"]
    summary: str | None
    cancel_requests: bool


class Sleep(msgspec.Struct, frozen=True):
    seconds: float


class Exit(msgspec.Struct, frozen=True):
    code: int


Effect = (
    TurnStart | TurnEnd | Output | RunCommand | SendMessage | SendReply | SendDone | Sleep | Exit
)


def _matches(want: AwaitKind, item: Delivered) -> bool:
    if want == "any":
        return True
    if item.kind == "notice":  # only a question closed without a reply ends a wait for one
        return want == "reply" and item.closes_request
    return want == item.kind


class ScriptMachine:
    """Runs a :class:`Script`. Feed it deliveries and completions; it returns effects.

    The caller performs each effect. After a :class:`RunCommand` or :class:`Sleep` the
    machine is *busy* until :meth:`resume`. ``{last}`` is always the text of the last
    *delivery* (a command's output is reported as a tool result, not remembered).
    :class:`Exit` and the end of the script stop it.
    """

    def __init__(self, script: Script) -> None:
        self._steps = script.steps
        self._pc = 0
        self._queue: deque[Delivered] = deque()
        self._busy = False
        self._in_turn = False
        self.finished = False
        self.last_text = ""
        self.last_request: Delivered | None = None
        self.task_id: str | None = None
        #: the script took a task and has not said done for it
        self.task_open = False
        self.waiting_for: AwaitKind | None = None

    @property
    def idle(self) -> bool:
        return not self._in_turn

    @property
    def queued(self) -> int:
        return len(self._queue)

    def start(self) -> list[Effect]:
        return self._advance()

    def deliver(self, item: Delivered) -> list[Effect]:
        if item.steer:
            self._queue.appendleft(item)
        else:
            self._queue.append(item)
        if self._busy or self.finished:
            return []
        return self._advance()

    def resume(self) -> list[Effect]:
        if not self._busy:
            return []
        self._busy = False
        return self._advance()

    def cancel_task(self, task_id: str) -> list[Effect]:
        """The parent ended ``task_id``: drop its queued deliveries and, if the script is
        working on it, leave it for the next ``await task`` step (see the module rules)."""
        self._queue = deque(item for item in self._queue if item.task_id != task_id)
        if self.finished or self.task_id != task_id or not self.task_open:
            return []
        self.task_open = False
        self.task_id = None
        self._busy = False  # a command or sleep still running is abandoned
        self._pc = self._next_task_step()
        effects: list[Effect] = []
        if self._in_turn:
            self._in_turn = False
            effects.append(TurnEnd())
        return effects + self._advance()

    def _next_task_step(self) -> int:
        """The first ``await task`` step from the current one on, else the last one before
        it (the step that took the task), else the current step."""
        takes_task = [isinstance(step, AwaitStep) and step.kind == "task" for step in self._steps]
        for index in range(self._pc, len(takes_task)):
            if takes_task[index]:
                return index
        for index in range(min(self._pc, len(takes_task)) - 1, -1, -1):
            if takes_task[index]:
                return index
        return self._pc

    def _fill(self, text: str) -> str:
        return text.replace("{last}", self.last_text)

    def _take(self, want: AwaitKind) -> Delivered | None:
        for item in self._queue:
            if _matches(want, item):
                self._queue.remove(item)
                return item
        return None

    def _consume(self, item: Delivered) -> None:
        self.last_text = item.text
        if item.kind == "task":
            self.task_id = item.task_id
            self.task_open = True
        if item.expects_reply:
            self.last_request = item

    def _done(self, step: DoneStep) -> SendDone:
        self.task_open = False
        return SendDone(
            task_id=self.task_id,
            status=step.status,
            summary=self._fill(step.summary) if step.summary else None,
            cancel_requests=step.cancel_requests,
        )

    def _advance(self) -> list[Effect]:
        effects: list[Effect] = []

        def begin() -> None:
            if not self._in_turn:
                self._in_turn = True
                effects.append(TurnStart())

        while True:
            if self._pc >= len(self._steps):
                if self._in_turn:
                    self._in_turn = False
                    effects.append(TurnEnd())
                self.finished = True
                self.waiting_for = None
                return effects
            step = self._steps[self._pc]
            if isinstance(step, AwaitStep):
                item = self._take(step.kind)
                if item is None:
                    if self._in_turn:
                        self._in_turn = False
                        effects.append(TurnEnd())
                    self.waiting_for = step.kind
                    return effects
                self.waiting_for = None
                self._consume(item)
                self._pc += 1
                begin()
                continue
            begin()
            self._pc += 1
            match step:
                case SayStep(text):
                    effects.append(Output(self._fill(text)))
                case RunStep(command):
                    self._busy = True
                    effects.append(RunCommand(command))
                    return effects
                case SleepStep(seconds):
                    self._busy = True
                    effects.append(Sleep(seconds))
                    return effects
                case MessageStep():
                    effects.append(
                        SendMessage(
                            to=step.to,
                            text=self._fill(step.text),
                            task_id=self.task_id,
                            expects_reply=step.expects_reply,
                            steer=step.steer,
                        )
                    )
                case ReplyStep(text=text):
                    request = self.last_request
                    if request is None:
                        effects.append(Output("script error: reply step with no request to answer"))
                    else:
                        effects.append(
                            SendReply(
                                to=request.sender_id,
                                text=self._fill(text),
                                reply_to=request.message_id,
                                task_id=self.task_id,
                            )
                        )
                        self.last_request = None
                case DoneStep():
                    effects.append(self._done(step))
                case ExitStep(code):
                    self.finished = True
                    effects.append(Exit(code))
                    return effects
