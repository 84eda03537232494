"""The session's records on NATS JetStream: the journal (what
:class:`~actors.records.journal_file.FileJournal` keeps in ``journal.jsonl``) and the record of
delivery (what :class:`~actors.records.notifications.NotificationFile` keeps in
``notifications.jsonl``), kept by the servers, so that a parent started again on another host
finds every result and hands nothing over twice. Each is a stream of lines with one writer:
the rules are :mod:`actors.transports.nats.lines`'s (durable before told; a second supervisor's
append is refused before it told anyone; damage reported by message and line)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from actors.records.jsonlines import LineProblem
from actors.records.notifications import Deliveries, decode_note, deliveries, encode_note
from actors.transports.nats.lines import NatsLines
from protocol.records.journal import Record, decode_line, encode_line
from protocol.records.notifications import AnyNotification

__all__ = ["JOURNAL", "NOTIFICATIONS", "NatsJournal", "NatsNotifications"]

#: the kinds of lines (:func:`actors.transports.nats.lines.lines_stream`)
JOURNAL = "journal"
NOTIFICATIONS = "notifications"


class NatsJournal:
    """The interface of ``FileJournal``, on JetStream."""

    def __init__(self, servers: Sequence[str], session_id: str, **options: Any) -> None:
        self._lines = NatsLines(servers, session_id, JOURNAL, **options)

    @property
    def where(self) -> str:
        return f"nats stream {self._lines.stream}"

    @property
    def problems(self) -> list[LineProblem]:
        return self._lines.problems

    def append(self, record: msgspec.Struct) -> None:
        self._lines.append([encode_line(record)])

    def append_many(self, records: Sequence[msgspec.Struct]) -> None:
        """Every record durable before this returns (a batch may span several messages)."""
        self._lines.append([encode_line(r) for r in records])

    def read(self) -> list[Record]:
        return self._lines.read(decode_line)

    def fence(self, why: str) -> None:
        self._lines.fence(why)

    def close(self) -> None:
        self._lines.close()


class NatsNotifications:
    """The interface of ``NotificationFile``, on JetStream: a sink recording every
    notification before any other sink shows it, and what a restarted parent reads back."""

    def __init__(self, servers: Sequence[str], session_id: str, **options: Any) -> None:
        self._lines = NatsLines(servers, session_id, NOTIFICATIONS, **options)

    @property
    def problems(self) -> list[LineProblem]:
        return self._lines.problems

    def __call__(self, note: AnyNotification) -> None:
        self._lines.append([encode_note(note)])

    def read_deliveries(self) -> Deliveries:
        return deliveries(self._lines.read(decode_note))

    def fence(self, why: str) -> None:
        self._lines.fence(why)

    def close(self) -> None:
        self._lines.close()
