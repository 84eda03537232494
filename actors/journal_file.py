"""The on-disk journal: ``journal.jsonl``, append-only, one tagged record per line.

A record is written (and, by default, fsynced) before the actor that wrote it tells anyone
about it, so a result that was ever notified is always found again after a restart. The file
is an :class:`~actors.jsonlines.JsonLinesFile`: a torn tail left by a crash is cut off (and
kept aside) when the journal is opened, before anything is appended, and a record that cannot
be read is reported by line, never skipped in silence.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from actors.jsonlines import JsonLinesFile, LineProblem
from protocol.journal import AgentExitRecord, AgentRecord, PromptRecord, WatcherRecord
from protocol.requests import RequestRecord
from protocol.tasks import TaskRecord

__all__ = ["FileJournal", "JournalEntry"]


class JournalEntry(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    record: msgspec.Raw


_TYPES: dict[type[msgspec.Struct], str] = {
    TaskRecord: "task",
    RequestRecord: "request",
    AgentRecord: "agent",
    AgentExitRecord: "agent_exit",
    PromptRecord: "prompt",
    WatcherRecord: "watcher",
}
_DECODE: dict[str, type[msgspec.Struct]] = {v: k for k, v in _TYPES.items()}
_ENCODER = msgspec.json.Encoder()
_ENTRY = msgspec.json.Decoder(JournalEntry)


def _decode(line: bytes) -> msgspec.Struct:
    entry = _ENTRY.decode(line)
    kind = _DECODE.get(entry.type)
    if kind is None:
        raise ValueError(f"unknown record type {entry.type!r}")
    return msgspec.json.decode(entry.record, type=kind)


class FileJournal:
    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._file = JsonLinesFile(path, fsync=fsync)

    @property
    def problems(self) -> list[LineProblem]:
        """Torn or unreadable lines found when the journal was opened and read."""
        return self._file.problems

    def append(self, record: msgspec.Struct) -> None:
        kind = _TYPES.get(type(record))
        if kind is None:
            raise TypeError(f"cannot journal {type(record).__name__}")
        line = b'{"type":"' + kind.encode() + b'","record":' + _ENCODER.encode(record) + b"}\n"
        settles = isinstance(record, TaskRecord) and record.terminal
        self._file.append(line, torn_point="settle.torn_journal" if settles else None)

    def read(self) -> list[msgspec.Struct]:
        """Every record that can be read, in order (each one that cannot is reported)."""
        return self._file.read(_decode)

    def close(self) -> None:
        self._file.close()
