"""The on-disk journal: ``journal.jsonl``, append-only, one tagged record per line.

A record is written (and, by default, fsynced) before the actor that wrote it tells anyone
about it, so a result that was ever notified is always found again after a restart. The file
is an :class:`~actors.records.jsonlines.JsonLinesFile`: a torn tail left by a crash is cut off (and
kept aside) when the journal is opened, before anything is appended, and a record that cannot
be read is reported by line, never skipped in silence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from actors.records.jsonlines import JsonLinesFile, LineProblem
from protocol.records.journal import Record, decode_line, encode_line
from protocol.records.tasks import TaskRecord

__all__ = ["FileJournal"]


class FileJournal:
    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._file = JsonLinesFile(path, fsync=fsync)

    @property
    def problems(self) -> list[LineProblem]:
        """Torn or unreadable lines found when the journal was opened and read."""
        return self._file.problems

    def append(self, record: msgspec.Struct) -> None:
        line = encode_line(record)
        settles = isinstance(record, TaskRecord) and record.terminal
        self._file.append(line, torn_point="settle.torn_journal" if settles else None)

    def append_many(self, records: Sequence[msgspec.Struct]) -> None:
        """Several records in one write and one fsync (a batch operation's, or a run of a
        rule's effects): all of them are durable before the caller tells anyone."""
        lines = [encode_line(r) for r in records]
        settles = any(isinstance(r, TaskRecord) and r.terminal for r in records)
        self._file.append_many(lines, torn_point="settle.torn_journal" if settles else None)

    def read(self) -> list[Record]:
        """Every record that can be read, in order (each one that cannot is reported)."""
        return self._file.read(decode_line)

    def close(self) -> None:
        self._file.close()
