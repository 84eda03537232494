"""The actor runtime: pykka actors on a shared dispatcher, with supervision at the boundary.

Every Shepherd actor subclasses :class:`ShepherdActor` (a ``pykka.Actor``) and is started with
``runtime.spawn(Cls, ...)``. The runtime supplies pykka's three hooks (inbox, future, loop)
through a small subclass made once per runtime and class, so the *same* actor classes run on:

- :class:`ThreadedRuntime` (production): a fixed pool of worker threads. An actor with mail is
  scheduled on the pool; a worker handles its messages one at a time (per-actor
  serialisation is kept: an actor is never on two workers at once). Thousands of actors
  cost a few threads, not one each.
- :class:`~actors.simulation.SimRuntime` (tests): one thread, a seeded choice of the next
  ready actor, virtual time.

Supervision: pykka stops an actor for good when a ``tell`` handler raises, and drops its
queued tells. Here a failing handler is logged and reported through
:meth:`ShepherdActor.on_handler_error`; the actor keeps running (DESIGN §10). ``ask``
callers get the exception through their future, as in pykka.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pykka
from loguru import logger
from pykka._envelope import Envelope

from actors.clock import Clock, SystemClock
from actors.idsource import IdSource

__all__ = ["Runtime", "RuntimeInbox", "ShepherdActor", "ThreadedRuntime", "tell_quietly"]

A = TypeVar("A", bound="ShepherdActor")


class _Start:
    """First message of every actor: runs ``on_start`` in the actor's own context."""


_START = _Start()


class RuntimeInbox:
    """An actor's mailbox. ``put`` schedules the actor on its runtime when it gains mail."""

    __slots__ = ("_actor", "_items", "_lock", "_runtime", "_scheduled")

    def __init__(self, runtime: Runtime) -> None:
        self._items: deque[Envelope[Any]] = deque()
        self._lock = threading.Lock()
        self._runtime = runtime
        self._actor: ShepherdActor | None = None
        self._scheduled = False

    def bind(self, actor: ShepherdActor) -> None:
        self._actor = actor

    def put(self, envelope: Envelope[Any], /) -> None:
        runtime = self._runtime
        runtime.before_put(self, envelope)
        with self._lock:
            self._items.append(envelope)
            if self._scheduled or self._actor is None:
                return
            self._scheduled = True
        runtime.schedule(self._actor)

    def get(self) -> Envelope[Any]:
        with self._lock:
            return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def __len__(self) -> int:
        return len(self._items)

    def take(self) -> Envelope[Any] | None:
        """Pop the next envelope, or clear the scheduled mark if there is none."""
        with self._lock:
            if self._items:
                return self._items.popleft()
            self._scheduled = False
            return None

    def release(self) -> bool:
        """After a batch: True if the actor must be scheduled again (it still has mail)."""
        with self._lock:
            if self._items:
                return True
            self._scheduled = False
            return False


class ShepherdActor(pykka.Actor):
    """Base of every actor. Subclasses implement ``on_receive`` (or proxy methods).

    ``self.runtime`` gives the clock (``self.clock``), ids and spawning. Do not call
    ``start()``: use ``runtime.spawn(Cls, ...)``.
    """

    runtime: Runtime
    label: str
    _runtime_for_class: ClassVar[Runtime | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        runtime = type(self)._runtime_for_class
        if runtime is None:
            raise TypeError(f"start {type(self).__name__} with runtime.spawn(), not start()")
        self.runtime = runtime
        super().__init__(*args, **kwargs)
        self.label = runtime.next_label(type(self).__mro__[1].__name__)
        inbox = self.actor_inbox
        assert isinstance(inbox, RuntimeInbox)
        inbox.bind(self)

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    @classmethod
    def start(cls: type[A], *args: Any, **kwargs: Any) -> pykka.ActorRef[A]:
        # Not registered in pykka's global registry: it is a list with O(n) removal, and the
        # runtime tracks its own actors. on_start runs as the first message.
        obj = cls(*args, **kwargs)
        obj._start_actor_loop()
        obj.runtime.track(obj)
        return obj.actor_ref

    # pykka's three hooks are supplied per runtime by Runtime.bind(); these defaults refuse.
    @staticmethod
    def _create_actor_inbox() -> Any:
        raise TypeError("actors must be started by a runtime")

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        raise TypeError("actors must be started by a runtime")

    def _start_actor_loop(self) -> None:
        self.actor_inbox.put(Envelope(_START))

    def _stop(self) -> None:
        super()._stop()
        self.runtime.untrack(self)

    # --- the loop body, shared by every runtime -------------------------------------------

    def _process(self, envelope: Envelope[Any]) -> None:
        if self.actor_stopped.is_set():
            self._refuse(envelope)
            return
        message = envelope.message
        try:
            if message is _START:
                self.on_start()
                return
            response = self._handle_receive(message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception as exc:
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
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

    def _refuse(self, envelope: Envelope[Any]) -> None:
        if envelope.reply_to is None:
            return
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
        inbox = self.actor_inbox
        assert isinstance(inbox, RuntimeInbox)
        while (envelope := inbox.take()) is not None:
            self._refuse(envelope)

    def on_handler_error(self, exc: Exception, message: Any) -> None:
        """Hook: a ``tell`` handler raised. The actor keeps running. Override to report."""


def tell_quietly(ref: pykka.ActorRef[Any], message: Any) -> bool:
    """``tell`` that treats a stopped recipient as a normal outcome (returns False)."""
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        return False
    return True


class Runtime:
    """What every runtime provides: a clock, ids, spawning, scheduling, stopping."""

    clock: Clock
    ids: IdSource

    def __init__(self, clock: Clock, ids: IdSource) -> None:
        self.clock = clock
        self.ids = ids
        self._bound: dict[type[ShepherdActor], type[ShepherdActor]] = {}
        self._actors: dict[int, ShepherdActor] = {}
        self._actors_lock = threading.Lock()
        self._labels: dict[str, int] = {}

    # -- binding classes to this runtime
    def bind(self, cls: type[A]) -> type[A]:
        bound = self._bound.get(cls)
        if bound is None:
            runtime = self
            bound = type(
                cls.__name__,
                (cls,),
                {
                    "__module__": cls.__module__,
                    "__qualname__": cls.__qualname__,
                    "_runtime_for_class": runtime,
                    "_create_actor_inbox": staticmethod(lambda: RuntimeInbox(runtime)),
                    "_create_future": staticmethod(runtime.new_future),
                },
            )
            self._bound[cls] = bound
        return bound  # type: ignore[return-value]

    def spawn(self, cls: type[A], *args: Any, **kwargs: Any) -> pykka.ActorRef[A]:
        return self.bind(cls).start(*args, **kwargs)

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

    # -- supplied by each runtime
    def new_future(self) -> pykka.Future[Any]:
        raise NotImplementedError

    def schedule(self, actor: ShepherdActor) -> None:
        raise NotImplementedError

    def before_put(self, inbox: RuntimeInbox, envelope: Envelope[Any]) -> None:
        """Hook for the simulation (tracing); a no-op in production."""

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
        self._workers = [
            threading.Thread(target=self._work, name=f"shepherd-worker-{i}", daemon=True)
            for i in range(workers or _default_workers())
        ]
        self._closed = False
        for thread in self._workers:
            thread.start()

    def new_future(self) -> pykka.Future[Any]:
        return pykka.ThreadingFuture()

    def schedule(self, actor: ShepherdActor) -> None:
        self._ready.put(actor)

    def _work(self) -> None:
        while True:
            actor = self._ready.get()
            if actor is None:
                return
            inbox = actor.actor_inbox
            assert isinstance(inbox, RuntimeInbox)
            try:
                for _ in range(self.BATCH):
                    envelope = inbox.take()
                    if envelope is None:
                        break
                    actor._process(envelope)
                else:
                    if inbox.release():
                        self._ready.put(actor)
            except BaseException:  # pragma: no cover - a worker must not die silently
                logger.opt(exception=True).critical("worker crashed; stopping runtime")
                print("shepherd: worker crashed", file=sys.stderr)
                raise

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
        close = getattr(self.clock, "close", None)
        if callable(close):
            close()


Spawner = Callable[..., pykka.ActorRef[Any]]
