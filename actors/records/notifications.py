"""``notifications.jsonl``: every parent notification, one JSON object per line.

It is what ``shepherd notifications`` and the MCP server follow, and it is the record of
delivery: a completion whose line is in this file was delivered to its watcher, nothing else
was; a stale-wait notice in it was given for its waiting episode. A restarted parent reads it
back (:meth:`NotificationFile.read_deliveries`) so that it hands nothing over twice. The file
is a :class:`~actors.records.jsonlines.JsonLinesFile` (torn tail cut off on open, unreadable lines
reported by number), so a crash mid-write cannot hide a later delivery.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import msgspec

from actors.records.jsonlines import JsonLinesFile, LineProblem
from actors.runtime.crashpoints import crashpoint
from protocol.records.notifications import AnyNotification, Notice, StaleWait, TaskCompletion
from protocol.session.budgets import SESSION_SCOPE

__all__ = ["Deliveries", "NotificationFile", "decode_note", "deliveries", "encode_note"]

_DECODER = msgspec.json.Decoder(AnyNotification)


def encode_note(note: AnyNotification) -> bytes:
    """A notification's line in the record of delivery."""
    return msgspec.json.encode(note) + b"\n"


def decode_note(line: bytes) -> AnyNotification:
    """A line of the record of delivery, read back (``msgspec.DecodeError`` if it is none)."""
    return _DECODER.decode(line)


class Deliveries(NamedTuple):
    """What a record of delivery says was handed over."""

    #: per watcher, the task ids whose completion it delivered
    delivered: dict[str, set[str]]
    #: per task, the request ids its stale-wait notices named
    stale: dict[str, set[str]]
    #: the soft budget warnings given, as (task id or ``session``, limit)
    warned: set[tuple[str, str]]
    #: every notification of the record that could be read, in its order (a restart reads
    #: the record once: what it says was handed over, and what else it needs of it)
    notes: list[AnyNotification]


def deliveries(notes: Iterable[AnyNotification]) -> Deliveries:
    """Read a record of delivery (see :class:`Deliveries`)."""
    found = Deliveries({}, {}, set(), list(notes))
    for note in found.notes:
        if isinstance(note, TaskCompletion):
            found.delivered.setdefault(note.watcher_id, set()).update(
                r.task_id for r in note.results
            )
        elif isinstance(note, StaleWait):
            found.stale.setdefault(note.task_id, set()).add(note.request_id)
        elif isinstance(note, Notice) and note.code == "budget_soft_limit" and note.refs:
            found.warned.add((note.task_id or SESSION_SCOPE, note.refs[0]))
    return found


class NotificationFile:
    """Appends every notification to the file (a sink: the first of the supervisor's, so a
    notification is on record before any other sink shows it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Not fsynced: the file survives a kill of the process (the page cache keeps it);
        # the journal, which is fsynced, holds the results themselves.
        self._file = JsonLinesFile(path, fsync=False)

    @property
    def problems(self) -> list[LineProblem]:
        return self._file.problems

    def __call__(self, note: AnyNotification) -> None:
        line = encode_note(note)
        crashpoint("notify.before_write")
        try:
            self._file.append(line, torn_point="notify.torn_write")
        except ValueError:
            if not self._file.closed:
                raise
            return  # the session is shutting down: nobody follows the file any more
        crashpoint("notify.after_write")

    def read_deliveries(self) -> Deliveries:
        """What the file records as handed over (:func:`deliveries`)."""
        return deliveries(self._file.read(_DECODER.decode))

    def lines(self) -> Iterator[bytes]:
        """Every line of the file as it is, read as it is iterated (it grows with the session);
        none if there is no file yet."""
        try:
            lines = self.path.open("rb")
        except FileNotFoundError:
            return
        with lines:
            yield from lines

    def close(self) -> None:
        self._file.close()
