"""A command agent's turn report (actors.child.turn_reports): written whole by the child's
command, taken once by the adapter, and whatever else is found there (the agent can write
anything) is an error, never a refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.child.turn_reports import ENV_TURN_REPORT, MAX_REPORT_BYTES, TurnReports, write_report
from protocol.core.errors import InvalidArgument
from protocol.records.refusals import Refusal


def test_a_report_is_written_whole_and_taken_once() -> None:
    reports = TurnReports()
    try:
        path = reports.path_for(1)
        assert Path(path).parent.stat().st_mode & 0o777 == 0o700
        refusal = Refusal(kind="rate_limited", provider="openai", retry_after_s=3.0, text="429")
        assert write_report({ENV_TURN_REPORT: path}, refusal) == path
        assert list(Path(path).parent.iterdir()) == [Path(path)]  # no temporary file left
        assert reports.take(path) == refusal
        assert reports.take(path) is None  # taken once
        assert reports.take(reports.path_for(2)) is None  # a turn that reported nothing
    finally:
        reports.close()
    assert not Path(path).parent.exists()


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        json.dumps({"kind": "rate_limited", "provider": "a b"}).encode(),
        json.dumps({"kind": "rate_limited", "provider": "p", "retry_after_s": -5}).encode(),
        json.dumps({"kind": "provider_error", "provider": "p", "text": "t" * 20_000}).encode(),
        json.dumps({"kind": "rate_limited", "provider": "p", "rm": "-rf"}).encode(),
        b" " * (MAX_REPORT_BYTES + 1),
    ],
    ids=["garbage", "spaces", "negative", "long-text", "unknown-field", "oversize"],
)
def test_anything_else_in_the_report_is_an_error(content: bytes) -> None:
    reports = TurnReports()
    try:
        path = reports.path_for(1)
        Path(path).write_bytes(content)
        taken = reports.take(path)
        assert isinstance(taken, str) and "report" in taken
        assert not Path(path).exists()
    finally:
        reports.close()


@pytest.mark.parametrize("environ", [{}, {ENV_TURN_REPORT: ""}, {ENV_TURN_REPORT: "relative"}])
def test_outside_a_command_turn_nothing_is_written(environ: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument, match=ENV_TURN_REPORT):
        write_report(environ, Refusal(kind="provider_error", provider="p", text="500"))
