"""The on-disk journal: ``journal.jsonl``, append-only, one tagged record per line.

A record is written (and, by default, fsynced) before the actor that wrote it tells anyone
about it, so a result that was ever notified is always found again after a restart.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import msgspec

from protocol.journal import AgentExitRecord, AgentRecord, PromptRecord, WatcherRecord
from protocol.requests import RequestRecord
from protocol.tasks import TaskRecord

__all__ = ["FileJournal", "JournalEntry", "read_journal"]


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


class FileJournal:
    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._fsync = fsync
        self._lock = threading.Lock()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        self._fd = fd

    def append(self, record: msgspec.Struct) -> None:
        kind = _TYPES.get(type(record))
        if kind is None:
            raise TypeError(f"cannot journal {type(record).__name__}")
        line = b'{"type":"' + kind.encode() + b'","record":' + _ENCODER.encode(record) + b"}\n"
        with self._lock:
            os.write(self._fd, line)
            if self._fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_journal(path: Path) -> list[msgspec.Struct]:
    """Every complete record in order (a torn last line, from a crash mid-write, is skipped)."""
    records: list[msgspec.Struct] = []
    decoder = msgspec.json.Decoder(JournalEntry)
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                entry = decoder.decode(line)
                records.append(msgspec.json.decode(entry.record, type=_DECODE[entry.type]))
            except (msgspec.DecodeError, KeyError):
                continue
    return records
