"""The session's limits across restarts (protocol.session.limits): recorded when it is made,
restored by a restart that gives none, changed aloud by one that gives others; and the journal
carries them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.records.journal import SessionLimitsRecord, decode_line, encode_line
from protocol.records.settings import SessionLimits, Settings
from protocol.session.limits import restart, told
from protocol.session.restore import fold


def test_a_new_session_records_its_limits() -> None:
    settings = Settings(budget_tokens=50, default_task_timeout_s=600.0)
    effective, changes, record = restart(settings, None, at=1.0)
    assert effective == settings and changes == ()
    assert record == SessionLimitsRecord(
        limits=SessionLimits(budget_tokens=50, default_task_timeout_s=600.0), at=1.0
    )


@pytest.mark.parametrize("name", SessionLimits.__struct_fields__)
def test_a_restart_giving_none_runs_with_each_recorded_limit(name: str) -> None:
    value = 7 if name == "budget_tokens" else 7.5
    fields: dict[str, Any] = {name: value}
    recorded = SessionLimits(**fields)
    effective, changes, record = restart(Settings(), recorded, at=2.0)
    assert getattr(effective, name) == value
    assert changes == () and record is None  # as recorded: nothing to tell or journal


def test_a_restart_giving_another_value_runs_with_it_and_says_so() -> None:
    recorded = SessionLimits(budget_tokens=50, budget_cost=2.0)
    given = Settings(budget_tokens=500, default_reply_timeout_s=30.0)
    effective, changes, record = restart(given, recorded, at=3.0)
    assert (effective.budget_tokens, effective.budget_cost) == (500, 2.0)
    assert effective.default_reply_timeout_s == 30.0
    assert [(c.name, c.old, c.new) for c in changes] == [
        ("budget_tokens", 50, 500),
        ("default_reply_timeout_s", None, 30.0),
    ]
    assert "budget_tokens changed: 50 -> 500" in told(changes[0])
    assert record is not None and record.previous == recorded
    assert record.limits == SessionLimits(
        budget_tokens=500, budget_cost=2.0, default_reply_timeout_s=30.0
    )
    # the same values again: nothing changed
    assert restart(given, record.limits, at=4.0)[1:] == ((), None)


def test_the_fold_keeps_the_latest_record_and_the_journal_line_round_trips() -> None:
    first = SessionLimitsRecord(limits=SessionLimits(budget_tokens=50), at=1.0)
    second = SessionLimitsRecord(
        limits=SessionLimits(budget_tokens=500), previous=first.limits, at=2.0
    )
    assert decode_line(encode_line(second)) == second
    assert fold([first, second]).limits == SessionLimits(budget_tokens=500)
    assert fold([]).limits is None
    with pytest.raises(msgspec.ValidationError):  # a recorded limit out of bounds
        decode_line(b'{"type":"session_limits","record":{"limits":{"budget_tokens":0},"at":1}}')
