"""A notification is on record (``notifications.jsonl``) before any other sink shows it: one
that could not be recorded is shown nowhere, since a restart hands over again whatever is not
on record."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.records.notifications import NotificationFile
from actors.session.sinks import CollectingSink, FanOut
from protocol.records.notifications import Notice


def test_a_notification_that_cannot_be_recorded_is_not_shown(tmp_path: Path) -> None:
    record = NotificationFile(tmp_path / "notifications.jsonl")
    shown = CollectingSink()
    fan = FanOut(record, [shown])
    note = Notice(created_at=1.0, code="x", text="hello")
    fan(note)
    assert shown.items == [note]

    def full_disk(_: object) -> None:
        raise OSError(28, "No space left on device")

    broken = FanOut(full_disk, [shown])
    with pytest.raises(OSError, match="No space"):
        broken(note)
    assert shown.items == [note]  # not shown a second time
    record.close()
