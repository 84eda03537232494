"""This host's view of the notifications made whole from the record of delivery
(:meth:`actors.session.records.Records.catch_up`), without servers: a record that is a list of
lines stands for the one on NATS."""

from __future__ import annotations

from pathlib import Path

from actors.records.jsonlines import LineProblem
from actors.records.notifications import Deliveries, NotificationFile, deliveries, encode_note
from actors.records.notifications import decode_note as decode
from actors.session.records import Records
from protocol.records.notifications import AnyNotification, Notice


class ListRecord:
    """A record of delivery kept as lines, first of all sinks."""

    problems: list[LineProblem] = []

    def __init__(self) -> None:
        self.kept: list[bytes] = []

    def __call__(self, note: AnyNotification) -> None:
        self.kept.append(encode_note(note))

    def read_deliveries(self) -> Deliveries:
        return deliveries(decode(x) for x in self.kept)


def note(i: int) -> Notice:
    return Notice(created_at=1000.0 + i, code="turn_ended_without_done", text=f"note {i}")


def records(tmp_path: Path) -> tuple[Records, ListRecord, NotificationFile]:
    record, view = ListRecord(), NotificationFile(tmp_path / "notifications.jsonl")
    return Records("nats", journal=None, record=record, delivered=record, view=view), record, view  # type: ignore[arg-type]


def test_the_recorded_lines_the_view_lacks_are_appended_in_order_once(tmp_path: Path) -> None:
    kept, record, view = records(tmp_path)
    for i in range(3):
        record(note(i))
        if i == 0:
            view(note(i))  # the view showed the first; the parent died before the others
    assert kept.catch_up() == 2
    assert [decode(x) for x in view.lines()] == [note(0), note(1), note(2)]
    assert kept.catch_up() == 0  # whole: nothing more
    assert len(list(view.lines())) == 3
    view.close()


def test_a_view_that_is_the_record_itself_is_left_as_it_is(tmp_path: Path) -> None:
    view = NotificationFile(tmp_path / "notifications.jsonl")
    view(note(0))
    kept = Records("file", journal=None, record=view, delivered=view, view=view)  # type: ignore[arg-type]
    assert kept.catch_up() == 0
    assert len(list(view.lines())) == 1
    view.close()
