"""JournalWriter: the session's one writer of its journal, with group commit.

The broker decides a run and hands its records here (:class:`Append`, with a ticket); it holds
the rest of the run (what tells anyone of the records) until the writer says the records are
durable (:class:`Committed`). Rules:

- **Group commit.** The first ``Append`` of a burst asks this actor for a ``Flush`` (a message
  to itself, so it comes after every ``Append`` already in the mailbox). A ``Flush`` writes
  everything that arrived since the last one in ONE append (one write and one fsync for the
  file journal; for ``--journal nats`` as few messages as the lines fit, published together).
  So the records that arrive while one write runs go in the next: the more callers at once, the
  more records per write.
- **In order.** Tickets are the broker's, increasing; ``Committed(upto)`` says every ticket up
  to ``upto`` is durable. The broker releases its held runs in ticket order.
- **Fail-stop.** A write that fails is told to the broker once (:class:`JournalFailed`); nothing
  is written after it (the broker stops deciding, as before this actor existed).
- The crash points ``settle.before_journal`` and ``settle.after_journal`` are here, around a
  write that settles a task.
"""

from __future__ import annotations

from typing import Any

import pykka

from actors.records.journal import Journal, append_all
from actors.runtime.crashpoints import crashpoint
from actors.runtime.runtime import ShepherdActor, tell_quietly
from protocol.records.tasks import TaskRecord

__all__ = ["Append", "Committed", "JournalFailed", "JournalWriter"]


class Append:
    """Records of one run of the broker, to be durable before the run tells anyone."""

    __slots__ = ("records", "ticket")

    def __init__(self, ticket: int, records: list[Any]) -> None:
        self.ticket = ticket
        self.records = records


class Committed:
    """Every record of every ticket up to ``upto`` is durable."""

    __slots__ = ("upto",)

    def __init__(self, upto: int) -> None:
        self.upto = upto


class JournalFailed:
    """A write failed: nothing from the first ticket not committed on is durable."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Flush:
    __slots__ = ()


_FLUSH = _Flush()


class JournalWriter(ShepherdActor):
    def __init__(self, journal: Journal, broker: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self._journal = journal
        self._broker = broker
        self._records: list[Any] = []
        self._upto = 0
        self._flush_asked = False
        self._failed = False
        #: writes done and records written (what a benchmark or a test reads)
        self.writes = 0
        self.written = 0

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Append):
            self._records.extend(message.records)
            self._upto = message.ticket
            if not self._flush_asked:
                self._flush_asked = True
                tell_quietly(self.actor_ref, _FLUSH)
            return None
        if message is _FLUSH:
            self._flush()
            return None
        return super().on_receive(message)

    def _flush(self) -> None:
        self._flush_asked = False
        records, self._records = self._records, []
        if self._failed:
            return
        settles = any(isinstance(r, TaskRecord) and r.terminal for r in records)
        if settles:
            crashpoint("settle.before_journal")
        try:
            if records:
                append_all(self._journal, records)
        except Exception as exc:
            self._failed = True
            tell_quietly(self._broker, JournalFailed(exc))
            return
        if settles:
            crashpoint("settle.after_journal")
        self.writes += 1 if records else 0
        self.written += len(records)
        tell_quietly(self._broker, Committed(self._upto))
