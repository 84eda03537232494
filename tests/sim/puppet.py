"""A puppet agent: the test speaks for a simulated agent by publishing envelopes as it."""

from __future__ import annotations

from typing import Any

from actors.runtime.transport import PARENT_INBOX
from actors.testing import SimSession
from protocol.core.ids import PARENT_ID, IdKind
from protocol.wire.envelopes import (
    AnyEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)
from tests.sim.scenarios import broker


class Puppet:
    def __init__(self, session: SimSession, name: str) -> None:
        self.session = session
        self.name = name
        entry = broker(session).agents[broker(session).names[name]]
        self.agent_id = entry.agent_id
        self.capability = entry.capability
        self.sent: list[AnyEnvelope] = []

    def _base(self, **fields: Any) -> dict[str, Any]:
        return {
            "message_id": self.session.runtime.ids.new(IdKind.MESSAGE),
            "session_id": self.session.session_id,
            "sender_id": self.agent_id,
            "created_at": self.session.runtime.clock.now(),
            "capability": self.capability,
            **fields,
        }

    def publish(self, env: AnyEnvelope) -> AnyEnvelope:
        self.sent.append(env)
        self.session.transport.publish(PARENT_INBOX, env)
        return env

    def done(
        self, task_id: str, status: str = "completed", summary: str = "ok", **kw: Any
    ) -> AnyEnvelope:
        return self.publish(
            TaskDoneEnvelope(
                **self._base(
                    target_id=PARENT_ID, task_id=task_id, status=status, summary=summary, **kw
                )
            )
        )

    def ask(self, target: str, text: str = "question?", **kw: Any) -> AnyEnvelope:
        return self.publish(
            MessageEnvelope(**self._base(target_id=target, content=text, expects_reply=True, **kw))
        )

    def say(self, target: str, text: str = "fyi", **kw: Any) -> AnyEnvelope:
        return self.publish(MessageEnvelope(**self._base(target_id=target, content=text, **kw)))

    def reply(self, target: str, reply_to: str, text: str = "answer") -> AnyEnvelope:
        return self.publish(
            ReplyEnvelope(**self._base(target_id=target, content=text, reply_to=reply_to))
        )

    def runtime(self, event: str, **kw: Any) -> AnyEnvelope:
        return self.publish(RuntimeEnvelope(**self._base(target_id=PARENT_ID, event=event, **kw)))

    def acks(self) -> list[Any]:
        driver = self.session.sim_launcher.driver(self.name)
        return list(driver.acks)

    def ack_for(self, env: AnyEnvelope) -> Any:
        matches = [a for a in self.acks() if a.ack_for == env.message_id]
        assert len(matches) == 1, f"expected one ack for {env.message_id}, got {matches}"
        return matches[0]
