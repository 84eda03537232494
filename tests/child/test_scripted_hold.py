"""The scripted driver (the bridge's scripted agent and the simulation's alike) under the
parent's ``hold``: deliveries wait, untouched by the script, until ``resume`` gives them in
arrival order; a duplicate is still dropped; controls still reach the script."""

from __future__ import annotations

import secrets
import time
from typing import Any

from actors.child.scripted import AgentIdentity, ScriptedDriver
from actors.runtime.clock import VirtualClock
from actors.runtime.ids import IdSource
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.scripted.script import load_script_text
from protocol.scripted.script_machine import ScriptMachine
from protocol.wire.envelopes import (
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    RuntimeEnvelope,
    TaskEnvelope,
)

SCRIPT = """{"steps": [{"await": "task"}, {"say": "task: {last}"},
                       {"await": "message"}, {"say": "then: {last}"}]}"""


def new_id(kind: IdKind) -> str:
    return make_id(kind, secrets.token_hex(8))


class Agent:
    def __init__(self) -> None:
        self.session_id = new_id(IdKind.SESSION)
        self.agent_id = new_id(IdKind.AGENT)
        self.published: list[AnyEnvelope] = []
        self.driver = ScriptedDriver(
            ScriptMachine(load_script_text(SCRIPT, toml=False)),
            AgentIdentity(agent_id=self.agent_id, session_id=self.session_id, capability="c"),
            publish=self.published.append,
            clock=VirtualClock(),
            ids=IdSource(),
            run_command=lambda command, done: done("", 0),
            post=lambda fn: fn(),
            on_exit=lambda code: None,
        )
        self.driver.start()

    def base(self) -> dict[str, Any]:
        return {
            "message_id": new_id(IdKind.MESSAGE),
            "session_id": self.session_id,
            "sender_id": PARENT_ID,
            "target_id": self.agent_id,
            "created_at": time.time(),
            "capability": "c",
        }

    def said(self) -> list[str]:
        return [
            e.text or ""
            for e in self.published
            if isinstance(e, RuntimeEnvelope) and e.event == "output"
        ]


def test_a_held_script_gets_its_deliveries_on_resume_in_order() -> None:
    agent = Agent()
    agent.driver.on_envelope(ControlEnvelope(**agent.base(), action="hold", reason="cool-down"))
    task = TaskEnvelope(**agent.base(), task_id=new_id(IdKind.TASK), content="first")
    message = MessageEnvelope(**agent.base(), content="second")
    for env in (task, message, task):  # the task twice: a transport's duplicate
        agent.driver.on_envelope(env)
    assert agent.driver.received == []
    assert agent.said() == [
        "[shepherd] held by the parent: cool-down; no new turn until resume",
        "[shepherd] the task queued: no new turn until resume",
        "[shepherd] the message queued: no new turn until resume",
    ]
    assert agent.driver.duplicates == 1
    agent.driver.on_envelope(ControlEnvelope(**agent.base(), action="resume"))
    assert agent.driver.received == [task, message]
    assert agent.said()[-3:] == ["[shepherd] resumed by the parent", "task: first", "then: second"]


def test_a_cancel_reaches_a_held_script_at_once() -> None:
    agent = Agent()
    agent.driver.on_envelope(ControlEnvelope(**agent.base(), action="hold"))
    cancel = ControlEnvelope(**agent.base(), action="cancel_task", task_id=new_id(IdKind.TASK))
    agent.driver.on_envelope(cancel)
    assert agent.driver.received == [cancel]
