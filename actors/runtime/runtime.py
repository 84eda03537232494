"""The actor runtime: pykka actors on a shared dispatcher, with supervision at the boundary.

Every Shepherd actor subclasses :class:`ShepherdActor` (a ``pykka.Actor``) and is started with
``runtime.spawn(Cls, ...)``, which hands the actor its runtime before ``__init__`` runs. The
actor then fills pykka's three hooks from that runtime: its inbox (``_create_actor_inbox``:
the runtime's), its futures (``_create_future``: a :class:`RuntimeFuture`) and its loop
(``_start_actor_loop``: the first message, handled when the runtime schedules it, for an actor
whose class has an ``on_start``: one without costs no message to start). No class is made per
runtime, so the *same* actor classes, the very same objects, run on:

- :class:`ThreadedRuntime` (production): a fixed pool of worker threads. An actor with mail is
  scheduled on the pool; a worker handles its messages one at a time (per-actor
  serialisation is kept: an actor is never on two workers at once). Thousands of actors
  cost a few threads, not one each.
- :class:`~actors.testing.simulation.SimRuntime` (tests): one thread, a seeded choice of the next
  ready actor, virtual time.

Every runtime offers :meth:`Runtime.wait_until` (block until a predicate holds: on threads a
wait on a condition the workers signal, on the simulation a run that jumps virtual time from
timer to timer), so code at the edge waits the same way on both.

Supervision: pykka stops an actor for good when a ``tell`` handler raises, and drops its
queued tells. Here a failing handler is logged and reported through
:meth:`ShepherdActor.on_handler_error`; the actor keeps running. ``ask`` callers get the
exception through their future, as in pykka.

pykka's private names used here (checked against pykka 4.2.0, 4.3.0, 4.4.x and 4.5.0, the
range ``pyproject.toml`` allows): ``pykka.messages._ActorStop``, to answer a stop request
that reaches an actor already stopped the way pykka's own loop does (pykka offers no public
way to recognise one), the four fields ``pykka.Actor.__init__`` sets (``actor_urn``,
``actor_inbox``, ``actor_stopped``, ``_actor_ref``), which :class:`ShepherdActor` sets
itself, and ``ActorRef._actor_weakref``, which pykka's proxy calls for the actor (a ref here
is the actor's inbox, which answers it with the actor it holds, with no weak reference).
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pykka
from pykka._envelope import Envelope as _PykkaEnvelope  # what ActorRef.tell puts

from actors.runtime.clock import Clock, SystemClock
from actors.runtime.future import RuntimeFuture
from actors.runtime.ids import IdSource
from actors.runtime.inbox import Envelope, RuntimeInbox
from actors.runtime.log import logger

__all__ = [
    "Runtime",
    "RuntimeFuture",
    "ShepherdActor",
    "ThreadedRuntime",
    "tell_quietly",
]

A = TypeVar("A", bound="ShepherdActor")

#: ``wait_until`` without a timeout on the simulation: a virtual year, longer than any deadline
#: a user can set (seven days), and still an end if something keeps setting timers
FOREVER_S = 365 * 86_400.0


class _Start:
    """First message of every actor: runs ``on_start`` in the actor's own context."""


_START = _Start()
_STOP = pykka.messages._ActorStop()

#: the messages pykka's ``Actor._handle_receive`` handles itself (a stop, the proxy's three)
_PYKKA_MESSAGES = frozenset(
    {
        pykka.messages._ActorStop,
        pykka.messages.ProxyCall,
        pykka.messages.ProxyGetAttr,
        pykka.messages.ProxySetAttr,
    }
)


class ShepherdActor(pykka.Actor):
    """Base of every actor. Subclasses implement ``on_receive`` (or proxy methods).

    ``self.runtime`` gives the clock (``self.clock``), ids and spawning; it is set before
    ``__init__`` runs. Do not call ``start()``: use ``runtime.spawn(Cls, ...)``.
    """

    runtime: Runtime
    label: str
    #: a sender running on a worker may run this actor's turn at once, on its own thread
    #: (:meth:`ThreadedRuntime.schedule`): for actors whose handlers are short and never
    #: block (a task's rules), never for one that writes files or waits
    runs_in_place: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ``getattr``, not a look in ``__dict__``: that makes the instance's dict a separate
        # object, one more for the garbage collector to walk per actor
        if getattr(self, "runtime", None) is None:
            raise TypeError(f"start {type(self).__name__} with runtime.spawn(), not start()")
        # pykka.Actor.__init__'s four fields, set here rather than by it: its urn is a uuid4,
        # a read of the kernel's random source that hands the interpreter lock over (at
        # 10,000 tasks, each with its actor, that was most of what starting them cost), and
        # its stopped flag an Event (about 0.8 KB). The label, unique in its runtime, names
        # the actor instead, and a flag says it stopped.
        self.label = self.runtime.next_label(type(self).__name__)
        self.actor_urn = f"urn:shepherd:{id(self.runtime):x}:{self.label}"
        self.actor_inbox = self._create_actor_inbox()  # type: ignore[assignment]
        # the inbox says it stopped, and is the actor's ref too (one object, not three)
        self.actor_stopped = self.actor_inbox  # type: ignore[assignment]
        self._actor_ref = self.actor_inbox  # type: ignore[assignment]
        # set here, in the same order for every actor, not first in ``_process``: the
        # instances of a class then share one table of attribute names (a task's actor
        # costs about 0.7 KB less)
        self._reply = None
        self._reply_taken = False

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    #: the reply future of the message being handled (None: a ``tell``, or taken)
    _reply: pykka.Future[Any] | None = None
    _reply_taken = False

    def answer_later(self) -> pykka.Future[Any] | None:
        """Take the reply of the message being handled: its answer is then not what the handler
        returns, but what the actor sets on this future later (``set``, ``set_exception``), so
        whoever asked waits for that, and gets a plain value. None for a ``tell``."""
        reply, self._reply = self._reply, None
        self._reply_taken = True
        return reply

    @classmethod
    def start(cls: type[A], *args: Any, **kwargs: Any) -> pykka.ActorRef[A]:
        raise TypeError(f"start {cls.__name__} with runtime.spawn(), not start()")

    # --- pykka's three hooks, filled from the runtime this actor was spawned on ---------------

    def _create_actor_inbox(self) -> RuntimeInbox:  # type: ignore[override]
        # pykka declares this hook static (an actor *type* picks its inbox) but calls it on the
        # instance, once, in Actor.__init__ (pykka 4.2.0-4.5.0). As an instance method it gets
        # this actor's runtime, so no class has to be made per runtime to carry it.
        return self.runtime.new_inbox(self)

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        # Static in pykka and called on the class (ActorRef.ask): the same future on every
        # runtime; the simulation's inbox gives an ask's future its driver when it is put.
        return RuntimeFuture()

    def _start_actor_loop(self) -> None:
        if type(self).on_start is not pykka.Actor.on_start:  # nothing to run: no first message
            self.actor_ref.tell(_START)

    def _stop(self) -> None:
        # pykka's, without its registry (a runtime's actors are never in it: see Runtime.spawn)
        # and its debug line, which formatted the actor's name at every stop
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())
        self.runtime.untrack(self)

    # --- the loop body, shared by every runtime -------------------------------------------

    def _process(self, envelope: Envelope) -> None:
        if self.actor_stopped.is_set():
            self._refuse(envelope)
            return
        message = envelope.message
        try:
            if message is _START:
                self.on_start()
                return
            self._reply, self._reply_taken = envelope.reply_to, False
            response = self._handle_receive(message)
            if envelope.reply_to is not None and not self._reply_taken:
                envelope.reply_to.set(response)
        except Exception as exc:
            reply = envelope.reply_to
            if reply is not None:
                # a reply taken to answer later, by a handler that then failed: it fails now
                if not self._reply_taken or not getattr(reply, "done", False):
                    reply.set_exception()
                return
            logger.opt(exception=True).bind(actor=self.label).error(
                "handler failed for {message}", message=type(message).__name__
            )
            try:
                self.on_handler_error(exc, message)
            except Exception:
                logger.opt(exception=True).bind(actor=self.label).error("on_handler_error failed")
        except BaseException:
            self._stop()
            raise
        if self.actor_stopped.is_set():
            self._drain_after_stop()

    def _handle_receive(self, message: Any) -> Any:
        # pykka's checks four message types of its own before ``on_receive``; most mail here
        # is none of them, so one lookup of its type decides
        if type(message) in _PYKKA_MESSAGES:
            return super()._handle_receive(message)
        return self.on_receive(message)

    def _refuse(self, envelope: Envelope) -> None:
        if envelope.reply_to is None:
            return
        # A stop request that finds the actor stopped is answered as pykka's own loop does
        # (Actor._actor_loop_teardown): ``stop()`` then says True, "was being stopped".
        if isinstance(envelope.message, pykka.messages._ActorStop):
            envelope.reply_to.set(None)
            return
        envelope.reply_to.set_exception(
            exc_info=(
                pykka.ActorDeadError,
                pykka.ActorDeadError(f"{self.label} stopped before handling the message"),
                None,
            )
        )

    def _drain_after_stop(self) -> None:
        # pop, not take: the mark stays with the loop that runs this actor, which clears it
        inbox: RuntimeInbox = self.actor_inbox  # type: ignore[assignment]  # its runtime's
        while (envelope := inbox.pop()) is not None:
            self._refuse(envelope)

    def on_handler_error(self, exc: Exception, message: Any) -> None:
        """Hook: a ``tell`` handler raised. The actor keeps running. Override to report."""


def tell_quietly(ref: pykka.ActorRef[Any], message: Any) -> bool:
    """``tell`` that treats a stopped recipient as a normal outcome (returns False)."""
    # pykka's tell, less the exception it raises for a stopped actor only to have it caught
    if ref.actor_stopped.is_set():
        return False
    ref.actor_inbox.put(_PykkaEnvelope(message))
    return True


class Runtime:
    """What every runtime provides: a clock, ids, spawning, scheduling, waiting, stopping."""

    clock: Clock
    ids: IdSource

    def __init__(self, clock: Clock, ids: IdSource) -> None:
        self.clock = clock
        self.ids = ids
        self._actors: dict[int, ShepherdActor] = {}
        self._actors_lock = threading.Lock()
        self._labels: dict[str, int] = {}

    def spawn(self, cls: type[A], *args: Any, **kwargs: Any) -> pykka.ActorRef[A]:
        # The runtime is the actor's before its __init__ runs (pykka's makes the inbox from
        # it). Not registered in pykka's global registry: it is a list with O(n) removal, and
        # the runtime tracks its own actors. on_start runs as the first message.
        actor = cls.__new__(cls)
        actor.runtime = self
        actor.__init__(*args, **kwargs)  # type: ignore[misc]
        actor._start_actor_loop()
        self.track(actor)
        return actor.actor_ref

    def next_label(self, name: str) -> str:
        with self._actors_lock:
            n = self._labels.get(name, 0) + 1
            self._labels[name] = n
        return f"{name}-{n}"

    def track(self, actor: ShepherdActor) -> None:
        with self._actors_lock:
            self._actors[id(actor)] = actor

    def untrack(self, actor: ShepherdActor) -> None:
        with self._actors_lock:
            self._actors.pop(id(actor), None)

    @property
    def actor_count(self) -> int:
        return len(self._actors)

    def actors(self) -> list[ShepherdActor]:
        with self._actors_lock:
            return list(self._actors.values())

    def new_inbox(self, actor: ShepherdActor) -> RuntimeInbox:
        return RuntimeInbox(self, actor)

    def new_future(self) -> RuntimeFuture[Any]:
        """A future an actor sets later (an answer that comes later), waitable at the edge."""
        return RuntimeFuture()

    def retire(self, ref: pykka.ActorRef[Any]) -> None:
        """Stop an actor that has nothing left to do, after the mail it already has (a stop
        message); never waits. A runtime may stop an idle one at once instead."""
        tell_quietly(ref, _STOP)

    # -- supplied by each runtime
    def schedule(self, actor: ShepherdActor) -> None:
        raise NotImplementedError

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Block until ``predicate()`` holds (True) or ``timeout`` seconds pass (False).

        The predicate may read anything actors change; it is checked again whenever an actor
        has handled mail. On the simulation the seconds are virtual, and waiting is running.
        """
        raise NotImplementedError

    def stop_all(self, timeout: float = 5.0) -> None:
        for actor in reversed(self.actors()):
            with contextlib.suppress(pykka.ActorDeadError):
                actor.actor_ref.stop(block=True, timeout=timeout)

    def shutdown(self, timeout: float = 5.0) -> None:
        self.stop_all(timeout)


def _default_workers() -> int:
    return max(2, 2 * (os.cpu_count() or 1))


class ThreadedRuntime(Runtime):
    """Production: a fixed pool of worker threads shared by every actor."""

    BATCH: ClassVar[int] = 64  # messages handled per turn before an actor yields its worker

    def __init__(
        self,
        *,
        workers: int | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
    ) -> None:
        super().__init__(clock or SystemClock(), ids or IdSource())
        self._ready: queue.SimpleQueue[ShepherdActor | None] = queue.SimpleQueue()
        self._here = threading.local()  # on a worker: ``worker``, ``in_place``
        # wait_until: workers signal this after a turn, but only while someone waits
        self._progress = threading.Condition()
        self._waiters = 0
        self._workers = [
            threading.Thread(target=self._work, name=f"shepherd-worker-{i}", daemon=True)
            for i in range(workers or _default_workers())
        ]
        self._closed = False
        for thread in self._workers:
            thread.start()

    def schedule(self, actor: ShepherdActor) -> None:
        # An actor whose class runs in place, given mail by an actor running on a worker, is
        # run by that worker at once (its turn inside the sender's): no hand-over to another
        # thread, no wake-up. The scheduled mark is held here as on any worker, so it still
        # runs alone and in order; only one level deep (what it sends is queued as usual).
        here = self._here
        if actor.runs_in_place and getattr(here, "worker", False) and not here.in_place:
            here.in_place = True
            try:
                self._turn(actor)
            finally:
                here.in_place = False
            return
        self._ready.put(actor)

    def retire(self, ref: pykka.ActorRef[Any]) -> None:
        # Idle (no mail, neither scheduled nor running): its scheduled mark, taken here, makes
        # this thread its worker for the moment, so its stop runs here, alone, at once.
        inbox: RuntimeInbox = ref.actor_inbox  # type: ignore[assignment]  # its runtime's
        actor: ShepherdActor = inbox.actor
        if actor.actor_stopped.is_set() or not inbox.own_if_idle():
            super().retire(ref)
            return
        actor._stop()
        actor._drain_after_stop()
        if inbox.release():  # mail came meanwhile: its turn refuses it
            self._ready.put(actor)

    def _turn(self, actor: ShepherdActor) -> None:
        """One turn of ``actor`` (its worker owns its scheduled mark): up to ``BATCH``
        messages, then scheduled again if it still has mail."""
        inbox: RuntimeInbox = actor.actor_inbox  # type: ignore[assignment]  # its runtime's
        for _ in range(self.BATCH):
            envelope = inbox.take()
            if envelope is None:
                return
            actor._process(envelope)
        if inbox.release():
            self._ready.put(actor)

    def _work(self) -> None:
        self._here.worker = True
        self._here.in_place = False
        while True:
            actor = self._ready.get()
            if actor is None:
                return
            try:
                self._turn(actor)
            except BaseException:  # pragma: no cover - a worker must not die silently
                logger.opt(exception=True).critical("worker crashed; stopping runtime")
                print("shepherd: worker crashed", file=sys.stderr)
                raise
            # read without the lock: a waiter counts itself, under the lock, before its first
            # check, so a change made before this read is seen by that check
            if self._waiters:
                with self._progress:
                    self._progress.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        with self._progress:
            self._waiters += 1
            try:
                return self._progress.wait_for(predicate, timeout=timeout)
            finally:
                self._waiters -= 1

    @property
    def worker_count(self) -> int:
        return len(self._workers)

    def shutdown(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop_all(timeout)
        for _ in self._workers:
            self._ready.put(None)
        for thread in self._workers:
            if thread is not threading.current_thread():
                thread.join(timeout=timeout)
        self.clock.close()


Spawner = Callable[..., pykka.ActorRef[Any]]
