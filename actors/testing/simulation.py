"""The deterministic simulation runtime.

One thread runs everything. At each step a seeded RNG picks which *ready* actor (one with
mail) handles its next message, so one seed gives one interleaving, message for message,
and many seeds explore many. Time is a :class:`~actors.runtime.clock.VirtualClock` that only moves
when the simulation runs out of ready actors and jumps to the next timer (or when a test
advances it). ``ask(...).get()`` on a simulated actor runs the simulation until the answer is
there, so the same edge code (the Session API) works on both runtimes.

Fault hooks (:class:`Faults`) act on *envelopes* crossing the simulated transport
(:class:`SimTransport`): drop, duplicate, delay (which also reorders). Timers can be fired
early or late (:meth:`SimRuntime.jitter_timers`). Crashing an agent is the simulated
agent's job (see ``actors/testing/simagent.py``).

Every step is appended to :attr:`SimRuntime.trace`; a failing test prints the seed, and
``pytest ... --sim-seed=N`` (see tests/conftest.py) replays it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pykka

from actors.runtime.clock import VirtualClock
from actors.runtime.ids import IdSource
from actors.runtime.inbox import Envelope, RuntimeInbox
from actors.runtime.runtime import FOREVER_S, Runtime, RuntimeFuture, ShepherdActor
from actors.runtime.transport import Handler, SenderGate, Subscription
from protocol.core.errors import InvalidHandle
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope

__all__ = ["Faults", "SimInbox", "SimRuntime", "SimTransport", "Stalled"]


class Stalled(pykka.Timeout):
    """The simulation has nothing left to run, and the awaited answer never came."""


class SimInbox(RuntimeInbox):
    """An inbox on the simulation: an ask's future gets the simulation as its driver, so
    waiting for the answer runs the simulation (there is no other thread to run it)."""

    __slots__ = ("_answer",)

    def __init__(self, runtime: SimRuntime, actor: ShepherdActor) -> None:
        super().__init__(runtime, actor)
        self._answer = runtime.answer

    def put(self, envelope: Envelope, /) -> None:
        future = envelope.reply_to
        if isinstance(future, RuntimeFuture):
            future.driver = self._answer
        super().put(envelope)


@dataclass
class Faults:
    """Probabilities of faults on each envelope crossing the simulated transport."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    max_delay_s: float = 0.5
    #: inboxes whose traffic may be faulted (None: all)
    only: frozenset[str] | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


class SimRuntime(Runtime):
    def __init__(self, seed: int, *, faults: Faults | None = None, trace: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.vclock = VirtualClock()
        super().__init__(self.vclock, IdSource(seed=seed ^ 0x5EED))
        self.faults = faults or Faults()
        self._ready: list[ShepherdActor] = []
        self.trace: list[tuple[int, float, str, str]] | None = [] if trace else None
        self.steps = 0
        self.invariant_checks: list[Callable[[], None]] = []

    # --- runtime hooks
    def new_inbox(self, actor: ShepherdActor) -> RuntimeInbox:
        return SimInbox(self, actor)

    def new_future(self) -> RuntimeFuture[Any]:
        return RuntimeFuture(self.answer)

    def schedule(self, actor: ShepherdActor) -> None:
        self._ready.append(actor)

    def answer(self, future: RuntimeFuture[Any]) -> None:
        """Run (without moving time) until ``future`` is set: what ``get`` on it means here."""
        while not future.done:
            if not self.step():
                raise Stalled("simulation is idle and the answer never came")

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Run, jumping virtual time from timer to timer, until ``predicate`` holds (True) or
        ``timeout`` virtual seconds pass with it false (False; ``None``: :data:`FOREVER_S`)."""
        return self.run_until(predicate, max_time=FOREVER_S if timeout is None else timeout)

    # --- driving
    def step(self) -> bool:
        """Handle one message of one ready actor (seeded choice). False if none is ready."""
        if not self._ready:
            return False
        index = self.rng.randrange(len(self._ready))
        actor = self._ready[index]
        inbox: RuntimeInbox = actor.actor_inbox  # type: ignore[assignment]  # made by new_inbox
        envelope = inbox.take()
        if envelope is None:  # nothing left (should not happen): drop it from the ready list
            self._ready.pop(index)
            return True
        if not inbox.release():
            self._ready.pop(index)
        else:
            # keep the inbox scheduled: take() above did not clear the mark
            pass
        self.steps += 1
        if self.trace is not None:
            self.trace.append(
                (self.steps, self.vclock.now(), actor.label, type(envelope.message).__name__)
            )
        actor._process(envelope)
        for check in self.invariant_checks:
            check()
        return True

    def run_until_idle(self, *, max_steps: int = 1_000_000) -> int:
        """Run ready actors until none is ready. Time does not move."""
        n = 0
        while self.step():
            n += 1
            if n >= max_steps:
                raise RuntimeError(f"seed {self.seed}: no quiescence after {max_steps} steps")
        return n

    def advance(self, seconds: float, *, max_steps: int = 1_000_000) -> None:
        """Let ``seconds`` of virtual time pass, running everything that becomes ready."""
        limit = self.vclock.now() + seconds
        self.run_until_idle(max_steps=max_steps)
        while self.vclock.fire_next(limit):
            self.run_until_idle(max_steps=max_steps)
        self.vclock.jump(limit)

    def run_until(
        self, predicate: Callable[[], bool], *, max_time: float = 3600.0, max_steps: int = 1_000_000
    ) -> bool:
        """Run (jumping time from timer to timer) until ``predicate`` holds or time runs out."""
        limit = self.vclock.now() + max_time
        steps = 0
        while not predicate():
            if self.step():
                steps += 1
                if steps >= max_steps:
                    raise RuntimeError(f"seed {self.seed}: predicate not met in {max_steps} steps")
                continue
            if not self.vclock.fire_next(limit):
                return predicate()
        return True

    def run_all(self, *, max_time: float = 86_400.0) -> None:
        """Run until no actor is ready and no timer is due within ``max_time``."""
        self.run_until(lambda: False, max_time=max_time)

    def jitter_timers(self, spread_s: float) -> None:
        """Fault hook: move every pending timer up to ``spread_s`` earlier or later."""
        self.vclock.jitter_timers(lambda d: d + self.rng.uniform(-spread_s, spread_s))

    def stop_all(self, timeout: float = 5.0) -> None:
        for actor in reversed(self.actors()):
            if actor.actor_ref.is_alive():
                actor.actor_ref.stop(block=False)
        self.run_until_idle()


class _SimSub:
    def __init__(self, transport: SimTransport, inbox: str) -> None:
        self._transport = transport
        self._inbox = inbox

    def cancel(self) -> None:
        self._transport._handlers.pop(self._inbox, None)


class SimTransport:
    """The simulated network between parent and agents, with seeded faults.

    An accepted envelope is handed to the inbox's handler immediately, or (with the delay
    fault) after a random virtual delay, which reorders it behind later ones; the duplicate
    fault hands it over twice; the drop fault loses it (and counts it) — used to show that a
    lost ``done`` never turns into a completion. Like the mailbox's receiver, it authenticates
    and de-duplicates what it hands over (:class:`~actors.runtime.transport.SenderGate`): a
    duplicate copy reaches the receiving side (``delivered`` counts it) and stops there.
    """

    def __init__(self, runtime: SimRuntime, settings: Settings | None = None) -> None:
        self._runtime = runtime
        self._handlers: dict[str, Handler] = {}
        self.delivered = 0
        self.gate = SenderGate((settings or Settings()).dedup_window)

    def admit(self, sender_id: str, session_id: str, capability: str) -> None:
        self.gate.admit(sender_id, session_id, capability)

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        handler = self._handlers.get(inbox)
        if handler is None:
            raise InvalidHandle(f"no inbox {inbox!r} in this session")
        faults = self._runtime.faults
        rng = self._runtime.rng
        eligible = faults.only is None or inbox in faults.only
        if eligible and faults.drop and rng.random() < faults.drop:
            faults.count("drop")
            return
        copies = 1
        if eligible and faults.duplicate and rng.random() < faults.duplicate:
            faults.count("duplicate")
            copies = 2
        for _ in range(copies):
            if eligible and faults.delay and rng.random() < faults.delay:
                faults.count("delay")
                delay = rng.uniform(0.0, faults.max_delay_s)
                self._runtime.clock.call_later(
                    delay, functools.partial(self._hand, inbox, handler, envelope)
                )
            else:
                self._hand(inbox, handler, envelope)

    def _hand(self, inbox: str, handler: Handler, envelope: AnyEnvelope) -> None:
        self.delivered += 1
        checked = self.gate.check(inbox, envelope)
        if checked is not None:
            handler(checked)

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        self._handlers[inbox] = handler
        return _SimSub(self, inbox)

    def close(self) -> None:
        self._handlers.clear()
