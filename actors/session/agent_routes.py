"""The broker's routes to the agent actors (:mod:`actors.session.agent`).

``SpawnAgent`` starts an :class:`~actors.session.agent.AgentActor` (or, after a parent
restart, one that adopts the bridge that outlived the old parent) and keeps its address, by
agent id, for the session's life: an agent's actor outlives its process as the read model of
its last output. ``Deliver``, ``Forward`` and ``StopAgent`` are routed to it; a ``read`` is
answered with a future of its output (:func:`~actors.session.runs.read_output`).
"""

from __future__ import annotations

from typing import Any

import pykka

from actors.runtime.runtime import Runtime, tell_quietly
from actors.runtime.transport import Transport
from actors.session import messages
from actors.session.agent import AgentActor, AgentSpec, Launcher
from actors.session.runs import Run, read_output
from protocol.session import effects as fx

__all__ = ["AgentRoutes"]


class AgentRoutes:
    def __init__(
        self,
        runtime: Runtime,
        broker: pykka.ActorRef[Any],
        launcher: Launcher,
        transport: Transport,
        session_id: str,
        output_lines: int,
    ) -> None:
        self._runtime = runtime
        self._broker = broker
        self._launcher = launcher
        self._transport = transport
        self._session_id = session_id
        self._output_lines = output_lines
        self._actors: dict[str, pykka.ActorRef[Any]] = {}  # agent id -> its actor

    def spawn(self, effect: fx.SpawnAgent, _: Run) -> None:
        spec = AgentSpec(
            agent_id=effect.agent_id,
            name=effect.name,
            session_id=self._session_id,
            capability=effect.capability,
            adapter=effect.adapter,
            options=effect.options,
        )
        self._actors[effect.agent_id] = self._runtime.spawn(
            AgentActor,
            spec,
            self._launcher,
            self._transport,
            self._broker,
            self._output_lines,
            effect.adopt,
            effect.pid,
            effect.exited,
        )

    def tell(self, agent_id: str, message: Any) -> None:
        ref = self._actors.get(agent_id)
        if ref is not None:
            tell_quietly(ref, message)

    def deliver(self, effect: fx.Deliver, _: Run) -> None:
        self.tell(effect.agent_id, messages.Deliver(envelope=effect.envelope))

    def forward(self, effect: fx.Forward, _: Run) -> None:
        self.tell(effect.agent_id, effect.envelope)

    def stop(self, effect: fx.StopAgent, _: Run) -> None:
        self.tell(effect.agent_id, messages.CloseAgent())

    def output(self, effect: fx.AnswerFromOutput) -> Any:
        """The future of a ``read``'s answer."""
        return read_output(self._actors.get(effect.agent_id), effect)
