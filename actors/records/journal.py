"""The journal: durable task / request / agent records, written before anyone is told.

:class:`MemoryJournal` keeps records in memory (the simulation, embedded use). The on-disk,
append-only ``journal.jsonl`` with restart replay is ``actors/records/journal_file.py``.
"""

from __future__ import annotations

import threading
from typing import Protocol

import msgspec

__all__ = ["Journal", "MemoryJournal"]


class Journal(Protocol):
    def append(self, record: msgspec.Struct) -> None:
        """Persist ``record`` before returning (the caller notifies only afterwards)."""


class MemoryJournal:
    def __init__(self) -> None:
        self.records: list[msgspec.Struct] = []
        self._lock = threading.Lock()

    def append(self, record: msgspec.Struct) -> None:
        with self._lock:
            self.records.append(record)
