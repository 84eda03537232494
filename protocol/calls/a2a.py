"""How a Shepherd task looks to an A2A client (``shepherd a2a``): its state, and what its
metadata says. The A2A front door itself is :mod:`actors.surfaces.a2a_server`.

Rules:

1. **One state per task, from the session's own records.** A settled task's state comes from
   its result: ``completed`` is ``COMPLETED``, ``blocked`` is ``REJECTED`` (the agent declined
   the work), ``failed`` is ``FAILED``, ``timed_out`` is ``FAILED`` with ``error.type
   timeout`` in the metadata, ``cancelled`` is ``CANCELED``. An open task is ``SUBMITTED``
   until its agent takes it (``created``, and ``queued`` for a slot), then ``WORKING`` (its
   acceptance check's ``verifying`` too); a ``waiting`` task is
   ``INPUT_REQUIRED`` while a question (or an approval) of it to the parent is pending, and
   stays ``WORKING`` while it waits on a peer only.
2. **Terminal is final.** The terminal states are the A2A states of a settled task, and only
   those: nothing maps a settled task back to an open one (the session never reopens one).
3. **The question to answer.** A message naming an ``INPUT_REQUIRED`` task answers the oldest
   question of it still pending to the parent (:func:`question_to_answer`); an approval is
   answered with ``shepherd approve`` / ``deny``, never with a message.

Sans-IO: the states are the A2A protocol's names (``TASK_STATE_...``), plain strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from protocol.core.ids import PARENT_ID

__all__ = [
    "CANCELED",
    "COMPLETED",
    "FAILED",
    "INPUT_REQUIRED",
    "REJECTED",
    "SUBMITTED",
    "TERMINAL",
    "WORKING",
    "a2a_state",
    "error_metadata",
    "question_to_answer",
]

SUBMITTED: Final = "TASK_STATE_SUBMITTED"
WORKING: Final = "TASK_STATE_WORKING"
INPUT_REQUIRED: Final = "TASK_STATE_INPUT_REQUIRED"
COMPLETED: Final = "TASK_STATE_COMPLETED"
REJECTED: Final = "TASK_STATE_REJECTED"
FAILED: Final = "TASK_STATE_FAILED"
CANCELED: Final = "TASK_STATE_CANCELED"
TERMINAL: Final = frozenset({COMPLETED, REJECTED, FAILED, CANCELED})

#: a settled task's result status (``protocol.records.tasks.TerminalStatus``) to its A2A state
_SETTLED: Final[Mapping[str, str]] = {
    "completed": COMPLETED,
    "blocked": REJECTED,
    "failed": FAILED,
    "timed_out": FAILED,
    "cancelled": CANCELED,
}


def _to_parent(requests: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The requests still pending to the parent, oldest first."""
    pending = [
        r
        for r in requests
        if r.get("target_id") == PARENT_ID and r.get("state", "pending") == "pending"
    ]
    return sorted(pending, key=lambda r: float(r.get("created_at") or 0.0))


def a2a_state(
    state: str,
    pending_requests: Sequence[Mapping[str, Any]] = (),
    result: Mapping[str, Any] | None = None,
) -> str:
    """Rules 1 and 2: the A2A state of a task in Shepherd ``state`` (a ``TaskState`` value),
    with its pending requests (``RequestRecord`` as builtins) and its result, if settled."""
    if result is not None:
        return _SETTLED[str(result["status"])]
    if state in _SETTLED:  # settled, its result not at hand: the state says enough
        return _SETTLED[state]
    if state in ("created", "queued"):
        return SUBMITTED
    if state == "waiting" and _to_parent(pending_requests):
        return INPUT_REQUIRED
    return WORKING


def error_metadata(result: Mapping[str, Any]) -> dict[str, str] | None:
    """What a settled task's metadata says under ``error``: ``{"type", "message"}`` for a
    failed or timed-out task (type ``timeout``, else the reason's code, else ``failed``);
    None for the others."""
    status = result.get("status")
    if status not in ("failed", "timed_out"):
        return None
    kind = "timeout" if status == "timed_out" else str(result.get("reason") or "failed")
    return {"type": kind, "message": str(result.get("error") or result.get("text") or status)}


def question_to_answer(pending_requests: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Rule 3: the oldest pending question to the parent (approvals are not answered by a
    message), or None."""
    questions = [r for r in _to_parent(pending_requests) if r.get("kind", "question") == "question"]
    return questions[0] if questions else None
