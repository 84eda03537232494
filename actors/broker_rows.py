"""The broker's row for one agent (shared by the broker and its restore step)."""

from __future__ import annotations

from typing import Any

import pykka

__all__ = ["AgentEntry"]


class AgentEntry:
    """The broker's row for one agent."""

    __slots__ = (
        "active_task",
        "adapter",
        "agent_id",
        "capability",
        "closed",
        "exit_code",
        "last_active_at",
        "mailbox_wake",
        "name",
        "process_state",
        "ref",
    )

    def __init__(
        self, agent_id: str, name: str, adapter: str, capability: str, ref: pykka.ActorRef[Any]
    ) -> None:
        self.agent_id = agent_id
        self.name = name
        self.adapter = adapter
        self.capability = capability
        self.ref = ref
        self.active_task: str | None = None
        self.closed = False
        self.process_state = "starting"
        self.exit_code: int | None = None
        self.last_active_at: float | None = None
        self.mailbox_wake: str | None = None  # how its bridge is woken, as it last said
