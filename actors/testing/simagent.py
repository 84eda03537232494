"""Simulated agents: a scripted agent living in the simulation instead of a child process.

:class:`SimLauncher` is the :class:`~actors.session.agent.Launcher` of a simulated session: for each
spawned agent it starts a :class:`SimAgentActor` that subscribes to the agent's inbox on the
:class:`~actors.testing.simulation.SimTransport` and publishes to the parent inbox — exactly the
traffic a real ``shepherd-child`` bridge produces. Commands (``run`` steps) are answered by a
deterministic fake. :meth:`SimLauncher.crash` kills an agent the way SIGKILL would: no last
word, just an exit status observed by the parent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from actors.child.scripted import AgentIdentity, ScriptedDriver
from actors.runtime.runtime import Runtime, ShepherdActor, tell_quietly
from actors.runtime.transport import PARENT_INBOX, GatedTransport
from actors.session.agent import AgentHandle, AgentSpec
from protocol.core.errors import InvalidArgument
from protocol.scripted.script import Script, parse_script
from protocol.scripted.script_machine import ScriptMachine
from protocol.wire.envelopes import AnyEnvelope

__all__ = ["FakeCommands", "SimAgentActor", "SimLauncher"]

#: command -> (output, exit_code); the default echoes the command
FakeCommands = Callable[[str], tuple[str, int]]


def _echo(command: str) -> tuple[str, int]:
    return f"ran: {command}", 0


class _Call:
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn


class _Crash:
    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


class SimAgentActor(ShepherdActor):
    def __init__(
        self,
        spec: AgentSpec,
        script: Script,
        transport: GatedTransport,
        on_exit: Callable[[int], None],
        commands: FakeCommands,
        command_time_s: float,
    ) -> None:
        super().__init__()
        self.spec = spec
        self._transport = transport
        self._on_exit_cb = on_exit
        self._commands = commands
        self._command_time_s = command_time_s
        self.driver = ScriptedDriver(
            ScriptMachine(script),
            AgentIdentity(
                agent_id=spec.agent_id,
                session_id=spec.session_id,
                capability=spec.capability,
                name=spec.name,
            ),
            publish=self._publish,
            clock=self.runtime.clock,
            ids=self.runtime.ids,
            run_command=self._run,
            post=self._post,
            on_exit=self._exit,
        )
        self._sub = transport.subscribe(spec.agent_id, self._incoming)

    def _incoming(self, env: AnyEnvelope) -> None:
        tell_quietly(self.actor_ref, env)

    def _publish(self, env: AnyEnvelope) -> None:
        self._transport.publish(PARENT_INBOX, env)

    def _post(self, fn: Callable[[], None]) -> None:
        tell_quietly(self.actor_ref, _Call(fn))

    def _run(self, command: str, done: Callable[[str, int], None]) -> None:
        output, code = self._commands(command)
        self.clock.call_later(self._command_time_s, lambda: done(output, code))

    def _exit(self, code: int) -> None:
        self._sub.cancel()
        self._on_exit_cb(code)
        self.stop()

    def on_start(self) -> None:
        self.driver.start()

    def on_receive(self, message: Any) -> Any:
        match message:
            case _Call(fn=fn):
                fn()
            case _Crash(code=code):
                if self.driver.exited is None:
                    self.driver.exited = code  # no last word: SIGKILL
                    self._exit(code)
            case _:
                self.driver.on_envelope(message)
        return None


class _SimHandle:
    def __init__(self, ref: pykka.ActorRef[SimAgentActor]) -> None:
        self.ref = ref

    def stop(self) -> None:
        tell_quietly(self.ref, _Crash(0))


class SimLauncher:
    """Starts simulated scripted agents; scripts are registered by agent name."""

    def __init__(
        self,
        runtime: Runtime,
        transport: GatedTransport,
        *,
        commands: FakeCommands = _echo,
        command_time_s: float = 0.05,
    ) -> None:
        self._runtime = runtime
        self._transport = transport
        self._commands = commands
        self._command_time_s = command_time_s
        self.scripts: dict[str, Script] = {}
        self.agents: dict[str, pykka.ActorRef[SimAgentActor]] = {}
        self.exits: dict[str, int] = {}

    def spawn_options(
        self, name: str, adapter: str, script: Any, options: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """Every agent is a simulated one; its script (an object or its dict) is registered
        under its name."""
        if script is not None:
            if isinstance(script, str):
                raise InvalidArgument("a simulated agent takes a script object, not a path")
            self.scripts[name] = script if isinstance(script, Script) else parse_script(script)
        return "simulated", options

    def launch(self, spec: AgentSpec, on_exit: Callable[[int], None]) -> AgentHandle:
        # what a real launcher's registration does: the agent may publish to the parent
        self._transport.admit(spec.agent_id, spec.session_id, spec.capability)
        script = self.scripts.get(spec.name, Script(steps=()))
        fired = False

        def exit_once(code: int) -> None:
            nonlocal fired
            if fired:
                return
            fired = True
            self.exits[spec.name] = code
            on_exit(code)

        ref = self._runtime.spawn(
            SimAgentActor,
            spec,
            script,
            self._transport,
            exit_once,
            self._commands,
            self._command_time_s,
        )
        self.agents[spec.name] = ref
        return _SimHandle(ref)

    def adopt(
        self, spec: AgentSpec, pid: int | None, on_exit: Callable[[int], None]
    ) -> AgentHandle:
        raise InvalidArgument("simulated agents cannot be adopted by another parent")

    def crash(self, name: str, code: int = 137) -> None:
        """Kill the agent as SIGKILL would (fault injection)."""
        tell_quietly(self.agents[name], _Crash(code))

    def driver(self, name: str) -> ScriptedDriver:
        actor = self.agents[name]._actor_weakref()  # the simulation is single-threaded
        assert actor is not None
        return actor.driver
