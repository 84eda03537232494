"""The journal: durable task / request / agent records, written before anyone is told.

:class:`MemoryJournal` keeps records in memory (the simulation, embedded use). The on-disk,
append-only ``journal.jsonl`` with restart replay is ``actors/records/journal_file.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import msgspec

__all__ = ["Journal", "MemoryJournal", "append_all"]


class Journal(Protocol):
    def append(self, record: msgspec.Struct) -> None:
        """Persist ``record`` before returning (the caller notifies only afterwards)."""


def append_all(journal: Journal, records: Sequence[msgspec.Struct]) -> None:
    """Persist ``records`` in order before returning: in one write (one fsync) when the
    journal can (``append_many``), else one by one."""
    many = getattr(journal, "append_many", None)
    if many is not None and len(records) > 1:
        many(records)
        return
    for record in records:
        journal.append(record)


class MemoryJournal:
    def __init__(self) -> None:
        self.records: list[msgspec.Struct] = []
        self._lock = threading.Lock()

    def append(self, record: msgspec.Struct) -> None:
        with self._lock:
            self.records.append(record)

    def append_many(self, records: Sequence[msgspec.Struct]) -> None:
        with self._lock:
            self.records.extend(records)
