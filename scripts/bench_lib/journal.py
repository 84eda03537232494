"""The journal's durable records per second, one writer with group commit beside one record
per write (``bench.py --only journal``).

A stand-in for the broker (:class:`Decider`: the broker's hold-and-release, without the rules)
takes ``callers`` concurrent calls, each of which must be answered only once its one record is
durable, the way a ``delegate`` or a ``done`` is. Two ways of writing, on the same journal in
the same run:

- ``group_commit``: the records go to the session's :class:`JournalWriter` and the calls are
  held until it says they are durable; what arrives while a write runs goes in the next one.
- ``one_per_write``: the decider appends each call's record itself before it answers (the
  broker before the writer existed): one write, one fsync or one NATS round trip, per record.

Journals: the file journal (``journal.jsonl``, fsync'd) and ``--journal nats`` (one
``nats-server``, ``sync_interval: always``, started here).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import pykka

from actors.records.journal import append_all
from actors.records.journal_file import FileJournal
from actors.runtime.runtime import ShepherdActor, ThreadedRuntime, tell_quietly
from actors.session.journal_writer import Append, Committed, JournalWriter
from protocol.core.ids import IdKind, make_id
from protocol.records.journal import AgentCloseRecord

WAIT_S = 300.0


class Decider(ShepherdActor):
    """Each call is one record; its answer comes once the record is durable."""

    def __init__(self, journal: Any, group_commit: bool) -> None:
        super().__init__()
        self._journal = journal
        self._group = group_commit
        self._writer: pykka.ActorRef[Any] | None = None
        self._held: deque[tuple[int, pykka.Future[Any] | None]] = deque()
        self._ticket = 0

    def on_start(self) -> None:
        if self._group:
            self._writer = self.runtime.spawn(JournalWriter, self._journal, self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Committed):
            while self._held and self._held[0][0] <= message.upto:
                _, reply = self._held.popleft()
                if reply is not None:
                    reply.set(True)
            return None
        record = message
        if not self._group:
            append_all(self._journal, [record])
            return True
        self._ticket += 1
        assert self._writer is not None
        tell_quietly(self._writer, Append(self._ticket, [record]))
        self._held.append((self._ticket, self.answer_later()))
        return None


def _records(n: int) -> list[AgentCloseRecord]:
    return [AgentCloseRecord(agent_id=make_id(IdKind.AGENT, f"{i:016x}"), at=0.0) for i in range(n)]


def _measure(journal: Any, group_commit: bool, callers: int, n: int) -> dict[str, Any]:
    runtime = ThreadedRuntime(workers=2)
    try:
        decider = runtime.spawn(Decider, journal, group_commit)
        records = _records(n)
        share = n // callers
        start = threading.Barrier(callers + 1)

        def call(mine: list[AgentCloseRecord]) -> None:
            start.wait(WAIT_S)
            for record in mine:
                assert decider.ask(record, timeout=WAIT_S) is True

        threads = [
            threading.Thread(target=call, args=(records[i * share : (i + 1) * share],))
            for i in range(callers)
        ]
        for thread in threads:
            thread.start()
        start.wait(WAIT_S)
        began = time.perf_counter()
        for thread in threads:
            thread.join(WAIT_S)
        elapsed = time.perf_counter() - began
        return {"records_per_s": share * callers / elapsed, "records": share * callers}
    finally:
        runtime.shutdown()


def journal_job(params: dict[str, Any]) -> dict[str, Any]:
    """``params``: ``journal`` (file | nats), ``group_commit``, ``callers``, ``n``."""
    kind, group = params["journal"], params["group_commit"]
    callers, n = params["callers"], params["n"]
    with tempfile.TemporaryDirectory(prefix="shepherd-journal-bench-") as tmp:
        root = Path(tmp)
        if kind == "file":
            journal: Any = FileJournal(root / "journal.jsonl")
            try:
                return {**params, **_measure(journal, group, callers, n)}
            finally:
                journal.close()
        from actors.transports.nats.journal import NatsJournal
        from actors.transports.nats.server import start_server

        server = start_server(root / "nats")
        try:
            journal = NatsJournal([server.url], make_id(IdKind.SESSION, "b" * 16))
            try:
                return {**params, **_measure(journal, group, callers, n)}
            finally:
                journal.close()
        finally:
            server.kill()
