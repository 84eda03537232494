"""A :class:`~actors.session.session.Session` on the seeded simulation.

``SimSession.simulated(seed)`` builds the same session (the same broker, task, watcher, agent
and watchdog actors) on the one-thread simulation runtime, with the simulated transport and
simulated scripted agents: same seed, same run, message for message. A spawn's ``script`` is a
script object (or its dict), registered with the simulated launcher under the agent's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.session.session import Session
from actors.session.sinks import Sink
from actors.testing.simagent import FakeCommands, SimLauncher
from actors.testing.simulation import Faults, SimRuntime, SimTransport
from protocol.records.settings import Settings

__all__ = ["SimSession"]


class SimSession(Session):
    runtime: SimRuntime
    transport: SimTransport
    launcher: SimLauncher

    @classmethod
    def simulated(
        cls,
        seed: int,
        *,
        faults: Faults | None = None,
        settings: Settings | None = None,
        sink: Sink | None = None,
        commands: FakeCommands | None = None,
        trace: bool = True,
        tap: Callable[[str], None] | None = None,
        spans: Any = None,
    ) -> SimSession:
        runtime = SimRuntime(seed, faults=faults, trace=trace)
        transport = SimTransport(runtime, settings)
        launcher = (
            SimLauncher(runtime, transport, commands=commands)
            if commands
            else SimLauncher(runtime, transport)
        )
        return cls(runtime, transport, launcher, settings=settings, sink=sink, tap=tap, spans=spans)

    @property
    def sim(self) -> SimRuntime:
        return self.runtime

    @property
    def sim_launcher(self) -> SimLauncher:
        return self.launcher
