"""Drives a :class:`~protocol.script.ScriptMachine` as an agent: effects in, envelopes out.

The same driver runs inside the simulation (``actors/simagent.py``) and inside the real
``shepherd-child`` bridge. It is single-threaded: every call into it (an envelope arriving,
a command finishing, a sleep ending) must come from the owner's one thread; asynchronous
completions are handed back through ``post``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from loguru import logger

from actors.clock import Clock
from actors.idsource import IdSource
from protocol import script as sc
from protocol.envelopes import (
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
from protocol.ids import PARENT_ID, IdKind

__all__ = ["AgentIdentity", "CommandRunner", "ScriptedDriver"]

#: run(command, done) — start the command; call done(output, exit_code) when it finishes
CommandRunner = Callable[[str, Callable[[str, int], None]], None]


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
    ) -> None:
        self.machine = machine
        self.identity = identity
        self._publish = publish
        self._clock = clock
        self._ids = ids
        self._run_command = run_command
        self._post = post
        self._on_exit = on_exit
        self.acks: list[AckEnvelope] = []
        self.received: list[AnyEnvelope] = []
        self.exited: int | None = None
        self.duplicates = 0
        self._seen: set[str] = set()
        self._log = logger.bind(agent=identity.name or identity.agent_id)

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
                item = sc.Delivered(
                    kind="reply",
                    text=env.content,
                    message_id=env.message_id,
                    sender_id=env.sender_id,
                    task_id=env.task_id,
                    steer=env.delivery == "steer",
                )
            case NoticeEnvelope():
                item = sc.Delivered(
                    kind="notice", text=env.text, message_id=env.message_id, sender_id=env.sender_id
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
            case ControlEnvelope():
                self._emit_runtime("output", text=f"[shepherd] {env.action}: {env.reason or ''}")
                return
            case _:
                return
        self._perform(self.machine.deliver(item))

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
                    self._clock.call_later(seconds, lambda: self._post(self._resume))
                case sc.SendMessage():
                    self._send(
                        MessageEnvelope,
                        target_id=effect.to,
                        content=effect.text,
                        task_id=effect.task_id,
                        expects_reply=effect.expects_reply,
                        delivery="steer" if effect.steer else "follow_up",
                    )
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
        def done(output: str, exit_code: int) -> None:
            self._post(lambda: self._command_done(command, output, exit_code))

        return done

    def _command_done(self, command: str, output: str, exit_code: int) -> None:
        if self.exited is not None:
            return
        self._emit_runtime(
            "tool_result",
            tool="bash",
            command=command,
            output=output,
            exit_code=exit_code,
            is_error=exit_code != 0,
        )
        self._perform(self.machine.resume())

    def _resume(self) -> None:
        if self.exited is None:
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

    def _send(self, cls: type[Envelope], **fields: Any) -> None:
        self._publish(cls(**self._base(), **fields))  # type: ignore[arg-type]

    def _emit_runtime(self, event: str, **fields: Any) -> None:
        self._publish(RuntimeEnvelope(**self._base(), target_id=PARENT_ID, event=event, **fields))  # type: ignore[arg-type]
