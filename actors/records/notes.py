"""Task notes: one working note per delegated task (never per message).

A note is opened when the task is delegated, gains a line when the task asks a question and
one when the question closes (the reply, an approval's outcome, a timeout), and is finalised
exactly once with the result when the task settles. :class:`FileTaskNotes` writes
``<session>/artifacts/<task_id>.md``; :class:`MemoryTaskNotes` keeps them in memory.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol

from protocol.records.tasks import TaskRecord

__all__ = ["FileTaskNotes", "MemoryTaskNotes", "TaskNotes"]


class TaskNotes(Protocol):
    def open(self, record: TaskRecord) -> None: ...

    def append(self, task_id: str, line: str) -> None: ...

    def finalise(self, record: TaskRecord) -> None: ...


def _header(record: TaskRecord) -> str:
    return (
        f"# Task {record.task_id}\n\n"
        f"- agent: {record.agent_name or record.agent_id} ({record.agent_id})\n"
        f"- created: {record.created_at:.3f}\n\n"
        f"## Description\n\n{record.description}\n\n## Log\n\n"
    )


def _footer(record: TaskRecord) -> str:
    result = record.result
    assert result is not None
    lines = [
        "\n## Result\n",
        f"- status: {result.status}",
        f"- return code: {result.return_code}",
        f"- settled: {result.completed_at:.3f}",
    ]
    if result.text:
        lines.append(f"- summary: {result.text}")
    if result.error:
        lines.append(f"- error: {result.error}")
    return "\n".join(lines) + "\n"


class MemoryTaskNotes:
    def __init__(self) -> None:
        self.notes: dict[str, str] = {}
        self.finalised: dict[str, int] = {}
        self._lock = threading.Lock()

    def open(self, record: TaskRecord) -> None:
        with self._lock:
            self.notes.setdefault(record.task_id, _header(record))

    def append(self, task_id: str, line: str) -> None:
        with self._lock:
            if task_id in self.notes and task_id not in self.finalised:
                self.notes[task_id] += f"- {line}\n"

    def finalise(self, record: TaskRecord) -> None:
        with self._lock:
            count = self.finalised.get(record.task_id, 0)
            self.finalised[record.task_id] = count + 1
            if count == 0:
                self.notes[record.task_id] = self.notes.get(
                    record.task_id, _header(record)
                ) + _footer(record)


class FileTaskNotes:
    """``artifacts/<task_id>.md``; a ``.final`` marker makes finalisation happen once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _path(self, task_id: str) -> Path:
        return self.directory / f"{task_id}.md"

    def _write(self, path: Path, text: str, flags: int) -> None:
        fd = os.open(path, flags | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def open(self, record: TaskRecord) -> None:
        with self._lock:
            path = self._path(record.task_id)
            if not path.exists():
                self._write(path, _header(record), os.O_CREAT | os.O_EXCL)

    def append(self, task_id: str, line: str) -> None:
        with self._lock:
            path = self._path(task_id)
            if path.exists() and not path.with_suffix(".final").exists():
                self._write(path, f"- {line}\n", os.O_APPEND)

    def finalise(self, record: TaskRecord) -> None:
        with self._lock:
            marker = self._path(record.task_id).with_suffix(".final")
            try:
                self._write(marker, "", os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                return
            path = self._path(record.task_id)
            if not path.exists():
                self._write(path, _header(record), os.O_CREAT | os.O_EXCL)
            self._write(path, _footer(record), os.O_APPEND)
