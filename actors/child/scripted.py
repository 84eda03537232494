"""Drives a :class:`~protocol.scripted.script_machine.ScriptMachine` as an agent: effects in,
envelopes out.

The same driver runs inside the simulation (``actors/testing/simagent.py``) and inside the real
``shepherd-child`` bridge. It is single-threaded: every call into it (an envelope arriving,
a command finishing, a sleep ending) must come from the owner's one thread; asynchronous
completions are handed back through ``post``.

Rules:
- ``control cancel_task`` (the parent ended the task) stops the task's work: the running
  command is stopped (``stop_commands``), and a completion or sleep that belonged to the work
  left behind is ignored when it comes back (each carries the *epoch* it started in); the
  machine leaves the task (:meth:`~protocol.scripted.script_machine.ScriptMachine.cancel_task`).
  ``hold`` / ``resume`` (:mod:`actors.child.holding`): while held, deliveries wait here, not
  given to the machine, and ``resume`` gives them in arrival order (the simulation's agents
  obey a hold as the bridge's do). Other controls are only told in the agent's output.
- A notice closes one of the script's questions (and so ends an ``await reply``) only when it
  says that request closed without a reply and names one of the script's own questions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from actors.child.holding import Holding
from actors.runtime.clock import Clock
from actors.runtime.ids import IdSource
from actors.runtime.log import logger
from protocol.core.ids import PARENT_ID, IdKind
from protocol.scripted import script_machine as sc
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    ControlEnvelope,
    Envelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)

__all__ = ["AgentIdentity", "CommandRunner", "ScriptedDriver"]

#: run(command, done) — start the command; call done(output, exit_code) when it finishes
CommandRunner = Callable[[str, Callable[[str, int], None]], None]

#: the notice codes that close a request without a reply (see broker_routing)
_CLOSING_CODES = frozenset({"request_timed_out", "request_cancelled", "not_delivered"})


class AgentIdentity(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    session_id: str
    capability: str
    name: str = ""


class ScriptedDriver:
    def __init__(
        self,
        machine: sc.ScriptMachine,
        identity: AgentIdentity,
        *,
        publish: Callable[[AnyEnvelope], None],
        clock: Clock,
        ids: IdSource,
        run_command: CommandRunner,
        post: Callable[[Callable[[], None]], None],
        on_exit: Callable[[int], None],
        stop_commands: Callable[[], None] | None = None,
    ) -> None:
        self.machine = machine
        self.identity = identity
        self._publish = publish
        self._clock = clock
        self._ids = ids
        self._run_command = run_command
        self._post = post
        self._on_exit = on_exit
        self._stop_commands = stop_commands
        #: bumped when the parent ends the task: late completions of older work are ignored
        self._epoch = 0
        #: message ids of this agent's own questions (messages that expect a reply)
        self._questions: set[str] = set()
        self.acks: list[AckEnvelope] = []
        self.received: list[AnyEnvelope] = []
        self.exited: int | None = None
        self.duplicates = 0
        self._seen: set[str] = set()
        self._log = logger.bind(agent=identity.name or identity.agent_id)
        #: the parent's hold, and the deliveries that wait for its resume
        self._holding: Holding[None] = Holding(self._emit_runtime)
        self._held: list[AnyEnvelope] = []

    # -------------------------------------------------------------- inputs

    def start(self) -> None:
        self._emit_runtime("ready", pid=None)
        self._perform(self.machine.start())

    def on_envelope(self, env: AnyEnvelope) -> None:
        if self.exited is not None:
            return
        if env.message_id in self._seen:  # a transport may hand the same envelope over twice
            self.duplicates += 1
            return
        self._seen.add(env.message_id)
        if not self._held_back(env):
            self._take(env)

    def _held_back(self, env: AnyEnvelope) -> bool:
        """``hold`` / ``resume``, and a delivery that waits for the resume: handled here."""
        match env:
            case ControlEnvelope(action="hold"):
                self._holding.hold(env)
            case ControlEnvelope(action="resume"):
                self._holding.resume()
                held, self._held = self._held, []
                for queued in held:
                    if self.exited is None:
                        self._take(queued)
            case TaskEnvelope() | MessageEnvelope() | ReplyEnvelope() | NoticeEnvelope() if (
                self._holding.blocked
            ):
                self._held.append(env)
                self._holding.queued(f"the {env.__struct_config__.tag}")
            case _:
                return False
        return True

    def _take(self, env: AnyEnvelope) -> None:
        self.received.append(env)
        match env:
            case TaskEnvelope():
                item = sc.Delivered(
                    kind="task",
                    text=env.content,
                    message_id=env.message_id,
                    sender_id=env.sender_id,
                    task_id=env.task_id,
                )
            case MessageEnvelope():
                item = sc.Delivered(
                    kind="message",
                    text=env.content,
                    message_id=env.message_id,
                    sender_id=env.sender_id,
                    task_id=env.task_id,
                    expects_reply=env.expects_reply,
                    steer=env.delivery == "steer",
                )
            case ReplyEnvelope():
                self._questions.discard(env.reply_to)
                item = sc.Delivered(
                    kind="reply",
                    text=env.content,
                    message_id=env.message_id,
                    sender_id=env.sender_id,
                    task_id=env.task_id,
                    steer=env.delivery == "steer",
                )
            case NoticeEnvelope():
                closes = env.code in _CLOSING_CODES and env.ref_id in self._questions
                if closes:
                    self._questions.discard(env.ref_id or "")
                item = sc.Delivered(
                    kind="notice",
                    text=env.text,
                    message_id=env.message_id,
                    sender_id=env.sender_id,
                    closes_request=closes,
                )
            case AckEnvelope():
                self.acks.append(env)
                if not env.accepted and env.error is not None:
                    self._emit_runtime(
                        "output",
                        text=f"[shepherd] refused {env.ack_for}: {env.error.code}: "
                        f"{env.error.message}",
                    )
                return
            case ControlEnvelope(action="close"):
                self.exit(0)
                return
            case ControlEnvelope(action="cancel_task", task_id=task_id) if task_id is not None:
                self._emit_runtime("output", text=f"[shepherd] {env.action}: {env.reason or ''}")
                self._cancel_task(task_id)
                return
            case ControlEnvelope():
                self._emit_runtime("output", text=f"[shepherd] {env.action}: {env.reason or ''}")
                return
            case _:
                return
        self._perform(self.machine.deliver(item))

    def _cancel_task(self, task_id: str) -> None:
        machine = self.machine
        working = machine.task_id == task_id and machine.task_open and not machine.finished
        if working:
            self._epoch += 1
            if self._stop_commands is not None:
                self._stop_commands()
        self._perform(machine.cancel_task(task_id))

    def exit(self, code: int) -> None:
        if self.exited is not None:
            return
        self.exited = code
        self._emit_runtime("exit", exit_code=code)
        self._on_exit(code)

    # -------------------------------------------------------------- effects

    def _perform(self, effects: list[sc.Effect]) -> None:
        for effect in effects:
            if self.exited is not None:
                return
            match effect:
                case sc.TurnStart():
                    self._emit_runtime("turn_start")
                case sc.TurnEnd():
                    self._emit_runtime("turn_end")
                case sc.Output(text=text):
                    self._emit_runtime("output", text=text)
                case sc.RunCommand(command=command):
                    self._emit_runtime("tool_call", tool="bash", command=command)
                    self._run_command(command, self._command_done_from_elsewhere(command))
                case sc.Sleep(seconds=seconds):
                    self._sleep(seconds)
                case sc.SendMessage():
                    sent = self._send(
                        MessageEnvelope,
                        target_id=effect.to,
                        content=effect.text,
                        task_id=effect.task_id,
                        expects_reply=effect.expects_reply,
                        delivery="steer" if effect.steer else "follow_up",
                    )
                    if effect.expects_reply:
                        self._questions.add(sent)
                case sc.SendReply():
                    self._send(
                        ReplyEnvelope,
                        target_id=effect.to,
                        content=effect.text,
                        reply_to=effect.reply_to,
                    )
                case sc.SendDone():
                    if effect.task_id is None:
                        self._emit_runtime("output", text="script error: done with no task")
                        continue
                    self._send(
                        TaskDoneEnvelope,
                        target_id=PARENT_ID,
                        task_id=effect.task_id,
                        status=effect.status,
                        summary=effect.summary,
                        cancel_requests=effect.cancel_requests,
                    )
                case sc.Exit(code=code):
                    self.exit(code)

    def _command_done_from_elsewhere(self, command: str) -> Callable[[str, int], None]:
        epoch = self._epoch

        def done(output: str, exit_code: int) -> None:
            self._post(lambda: self._command_done(command, output, exit_code, epoch))

        return done

    def _command_done(self, command: str, output: str, exit_code: int, epoch: int) -> None:
        if self.exited is not None or epoch != self._epoch:
            return  # gone, or the work of a task the parent ended
        self._emit_runtime(
            "tool_result",
            tool="bash",
            command=command,
            output=output,
            exit_code=exit_code,
            is_error=exit_code != 0,
        )
        self._perform(self.machine.resume())

    def _sleep(self, seconds: float) -> None:
        epoch = self._epoch
        self._clock.call_later(seconds, lambda: self._post(lambda: self._resume(epoch)))

    def _resume(self, epoch: int) -> None:
        if self.exited is None and epoch == self._epoch:
            self._perform(self.machine.resume())

    # -------------------------------------------------------------- envelopes

    def _base(self) -> dict[str, Any]:
        return {
            "message_id": self._ids.new(IdKind.MESSAGE),
            "session_id": self.identity.session_id,
            "sender_id": self.identity.agent_id,
            "created_at": self._clock.now(),
            "capability": self.identity.capability,
        }

    def _send(self, cls: type[Envelope], **fields: Any) -> str:
        """Publish one envelope; return its message id."""
        envelope = cls(**self._base(), **fields)
        self._publish(envelope)  # type: ignore[arg-type]
        return envelope.message_id

    def _emit_runtime(self, event: str, **fields: Any) -> None:
        self._publish(RuntimeEnvelope(**self._base(), target_id=PARENT_ID, event=event, **fields))  # type: ignore[arg-type]
