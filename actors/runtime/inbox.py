"""Where an actor's mail waits, the flag that says it stopped, and its address: one object,
:class:`RuntimeInbox`, the per-actor part of the runtime (:mod:`actors.runtime.runtime`), kept
small because every actor has one."""

from __future__ import annotations

import queue
import threading
from typing import Any, Protocol

import pykka

__all__ = ["Envelope", "RuntimeInbox", "Scheduler"]


class Scheduler(Protocol):
    """What an inbox needs of its runtime: to schedule its actor when it gains mail."""

    def schedule(self, actor: Any) -> None: ...


class Envelope(Protocol):
    """What an inbox holds: pykka's envelope (its class is private), read-only here."""

    @property
    def message(self) -> Any: ...

    @property
    def reply_to(self) -> pykka.Future[Any] | None: ...


#: the queue every inbox reads until its first mail (never put into), the mark every inbox
#: shows until then (never taken: not scheduled), and the lock that makes an inbox's own
#: queue and mark once
_NO_MAIL_YET: queue.SimpleQueue[Any] = queue.SimpleQueue()
_NOT_MARKED_YET = threading.Lock()
_FIRST_MAIL = threading.Lock()


class RuntimeInbox(pykka.ActorRef[Any]):
    """An actor's mailbox, which is also its ref (its ``actor_ref``: what others tell and ask)
    and its stopped flag (``actor_stopped``). ``put`` schedules the actor on its runtime when
    it gains mail.

    One object for the three: each object an actor has is one more for the garbage collector
    to walk, and at 10,000 tasks created at once (each with its actor) a separate ref was
    enough to tip the burst into a full collection. pykka's ``ActorRef`` holds four fields and
    a weak reference to the actor; here its fields are read from the inbox (the actor's class
    and urn from the actor it holds, the inbox and the flag are itself), and pykka's proxy,
    which calls ``_actor_weakref()`` for the actor, gets the actor the inbox holds.

    No lock on the way in or out: ``SimpleQueue.put`` / ``get_nowait`` are thread-safe (and an
    empty one costs about 170 bytes, an empty ``deque`` about 770: at 10,000 watchers, that was
    a third of what each cost); the "scheduled"
    mark is a lock used only as an atomic test-and-set (``acquire(blocking=False)``), never
    waited on. Whoever sets the mark schedules the actor, and the worker that runs it owns the
    mark (it alone pops) until it clears it. A contended inbox (many senders, one actor) then
    costs no lock convoy, which on a few cores under the GIL was most of the time spent.
    """

    __slots__ = (
        "_actor",
        "_items",
        "_mark",
        "_runtime",
        "_stopped",
        "actor_inbox",
        "actor_stopped",
    )

    def __init__(self, runtime: Scheduler, actor: Any) -> None:
        # its own queue and mark come with its first mail (or the first owner): until then it
        # shares a queue that stays empty and a mark never taken (many actors, a task's, wait
        # long for their first message, and each of these is an object for the garbage
        # collector to walk: at 10,000 tasks created at once, 20,000 more)
        self._items: queue.SimpleQueue[Envelope] = _NO_MAIL_YET
        self._mark = _NOT_MARKED_YET  # held: the actor is scheduled or running
        self._runtime = runtime
        self._actor = actor
        self._stopped = False
        # pykka's fields of a ref that every tell reads: itself, as slots (read faster than
        # a property, on every message)
        self.actor_inbox = self  # type: ignore[assignment]
        self.actor_stopped = self  # type: ignore[assignment]

    # --- the ref (pykka's ``ActorRef`` fields, read-only here) -------------------------------

    # pykka's other two, read seldom: read-only properties
    @property
    def actor_class(self) -> type[Any]:  # type: ignore[override]
        return type(self._actor)

    @property
    def actor_urn(self) -> str:  # type: ignore[override]
        urn: str = self._actor.actor_urn
        return urn

    def _actor_weakref(self) -> Any:  # type: ignore[override]  # what pykka's proxy calls
        return self._actor

    def __bool__(self) -> bool:  # a ref is true, whatever its mail (``__len__`` counts mail)
        return True

    # --- the stopped flag --------------------------------------------------------------------

    # The actor's ``actor_stopped`` too: pykka only sets it and asks whether it is set, and
    # nothing here waits on it, so a flag serves. A ``threading.Event`` costs a condition, its
    # deque and two locks (about 0.8 KB an actor), and an object of its own is one more for
    # the garbage collector to walk per actor: at 10,000 tasks, each walk is 10,000 longer.

    def set(self) -> None:
        """The actor stopped."""
        self._stopped = True

    def is_set(self) -> bool:
        """Whether the actor stopped."""
        return self._stopped

    @property
    def actor(self) -> Any:
        """The actor whose mailbox this is."""
        return self._actor

    def put(self, envelope: Envelope, /) -> None:
        items = self._items
        if items is _NO_MAIL_YET:
            with _FIRST_MAIL:  # once per inbox: two first senders make one queue
                items = self._items
                if items is _NO_MAIL_YET:
                    self._own_mark()  # first: whoever sees the queue sees the mark
                    items = self._items = queue.SimpleQueue()
        items.put(envelope)
        if self._mark.acquire(False):
            self._runtime.schedule(self._actor)

    def get(self) -> Envelope:
        return self._items.get_nowait()

    def pop(self) -> Envelope | None:
        """The next envelope, or None; the mark is left as it is (its owner only: mail seen
        is still there to get)."""
        items = self._items
        return None if items.empty() else items.get_nowait()

    def empty(self) -> bool:
        return self._items.empty()

    def __len__(self) -> int:
        return self._items.qsize()

    @property
    def idle(self) -> bool:
        """No mail, and the actor neither scheduled nor running (a reading: true only until
        the next ``put``)."""
        return self._items.empty() and not self._mark.locked()

    def take(self) -> Envelope | None:
        """Pop the next envelope, or clear the scheduled mark if there is none (its owner
        only: after None, the caller no longer owns the actor)."""
        # only the owner pops, so mail seen here is still there to get: no ``Empty`` raised
        # at the end of every turn
        items = self._items
        if not items.empty():
            return items.get_nowait()
        return items.get_nowait() if self._unmark() else None

    def own_if_idle(self) -> bool:
        """Take the scheduled mark if the actor has no mail and is neither scheduled nor
        running: the caller then owns it (as a worker does) until :meth:`release`."""
        if not self._items.empty():
            return False
        if self._mark is _NOT_MARKED_YET:
            with _FIRST_MAIL:
                self._own_mark()
        if not self._mark.acquire(False):
            return False
        if self._items.empty():
            return True
        if self._unmark():  # mail came as the mark was taken: it is run as usual
            self._runtime.schedule(self._actor)
        return False

    def release(self) -> bool:
        """After a batch: True if the actor must be scheduled again (it still has mail)."""
        return not self._items.empty() or self._unmark()

    def _own_mark(self) -> None:
        """Give this inbox a mark of its own, if it has none yet (under ``_FIRST_MAIL``)."""
        if self._mark is _NOT_MARKED_YET:
            self._mark = threading.Lock()

    def _unmark(self) -> bool:
        """Clear the mark; True if mail came meanwhile and the mark was taken back (the caller
        still owns the actor). A ``put`` that found the mark set before it was cleared did not
        schedule the actor: its envelope is seen here."""
        self._mark.release()
        return not self._items.empty() and self._mark.acquire(False)
