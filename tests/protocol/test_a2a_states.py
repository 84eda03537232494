"""A Shepherd task's A2A state (``protocol/calls/a2a.py``): every task state and result status."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.calls import a2a
from protocol.core.ids import PARENT_ID


def _request(target: str, *, at: float = 1.0, kind: str = "question", rid: str = "r") -> Any:
    return {
        "request_id": rid,
        "target_id": target,
        "state": "pending",
        "created_at": at,
        "kind": kind,
        "question": f"{rid}?",
    }


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("completed", a2a.COMPLETED),
        ("blocked", a2a.REJECTED),
        ("failed", a2a.FAILED),
        ("timed_out", a2a.FAILED),
        ("cancelled", a2a.CANCELED),
    ],
)
def test_a_settled_task_is_terminal_whatever_its_open_state(status: str, expected: str) -> None:
    for state in ("created", "running", "waiting", status):
        pending = [_request(PARENT_ID)]
        assert a2a.a2a_state(state, pending, {"status": status}) == expected
    assert a2a.a2a_state(status) == expected
    assert expected in a2a.TERMINAL


def test_open_states() -> None:
    assert a2a.a2a_state("created") == a2a.SUBMITTED
    assert a2a.a2a_state("queued") == a2a.SUBMITTED  # admission: not handed over yet
    assert a2a.a2a_state("verifying") == a2a.WORKING  # its acceptance check runs
    assert a2a.a2a_state("running") == a2a.WORKING
    # waiting on a peer only: still working
    assert a2a.a2a_state("waiting", [_request("shepherd-agent-0123456789abcdef")]) == a2a.WORKING
    # a question (or an approval) to the parent: input required
    assert a2a.a2a_state("waiting", [_request(PARENT_ID)]) == a2a.INPUT_REQUIRED
    assert a2a.a2a_state("waiting", [_request(PARENT_ID, kind="approval")]) == a2a.INPUT_REQUIRED
    closed = {**_request(PARENT_ID), "state": "replied"}
    assert a2a.a2a_state("waiting", [closed]) == a2a.WORKING
    assert not {a2a.SUBMITTED, a2a.WORKING, a2a.INPUT_REQUIRED} & a2a.TERMINAL


def test_the_error_metadata_of_a_failed_or_timed_out_task() -> None:
    timed_out = {"status": "timed_out", "error": "deadline passed"}
    assert a2a.error_metadata(timed_out) == {"type": "timeout", "message": "deadline passed"}
    over = {"status": "failed", "reason": "budget_exceeded", "error": "over 3 turns"}
    assert a2a.error_metadata(over) == {"type": "budget_exceeded", "message": "over 3 turns"}
    assert a2a.error_metadata({"status": "failed"}) == {"type": "failed", "message": "failed"}
    for status in ("completed", "blocked", "cancelled"):
        assert a2a.error_metadata({"status": status, "text": "x"}) is None


def test_the_question_to_answer_is_the_oldest_pending_question_to_the_parent() -> None:
    pending = [
        _request(PARENT_ID, at=3.0, rid="newer"),
        _request(PARENT_ID, at=1.0, rid="approval", kind="approval"),
        _request("shepherd-agent-0123456789abcdef", at=0.5, rid="peer"),
        _request(PARENT_ID, at=2.0, rid="older"),
    ]
    question = a2a.question_to_answer(pending)
    assert question is not None and question["request_id"] == "older"
    assert a2a.question_to_answer([_request(PARENT_ID, kind="approval")]) is None
    assert a2a.question_to_answer([]) is None
