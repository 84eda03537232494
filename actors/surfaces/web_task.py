"""A task's page: its text, where it stands, its history, its note, its result, and the
watchdog's verdict on its agent.

Rules:

1. **The id first.** A task id of the project's shape, else ``invalid_handle`` (404); a task
   the session shows no trace of (no result, no note, on no card) is ``invalid_handle`` too.
2. **Public sources only**: the ``result`` operation; the agent's row of the board's snapshot
   (``status``) while the task is the agent's current or newest one; the task's note
   (``<session>/artifacts/<task>.md``, read-only, never through a link, at most
   :data:`MAX_NOTE_BYTES`); the newest :data:`HISTORY` notifications about it; and
   ``watchdog_detect_stuck`` on its agent while the task is open (a refusal is shown, not
   raised).
3. **Text**: the note's description (whole, within the note's bound), else status's preview.
4. **Trace**: the task's trace id (:func:`~protocol.core.tracecontext.task_trace_id` of the
   session's id and the task's), whether the session exports traces, and the span attribute
   (``shepherd.task.id``) a trace collector also finds the task's spans by.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from actors.surfaces.web_feed import Filters, newest
from protocol.core.errors import InvalidHandle, ShepherdError
from protocol.core.ids import IdKind, parse_id
from protocol.core.tracecontext import task_trace_id

__all__ = ["HISTORY", "MAX_NOTE_BYTES", "read_note", "task_page"]

#: a note is read up to this many bytes (rule 2)
MAX_NOTE_BYTES = 64 * 1024
#: notifications about the task shown at most (rule 2)
HISTORY = 100

Call = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


def read_note(artifacts: Path, task_id: str) -> tuple[str | None, bool]:
    """The task's note (rule 2), at most :data:`MAX_NOTE_BYTES`, and whether it was cut;
    ``(None, False)`` when there is none."""
    path = artifacts / f"{parse_id(task_id, IdKind.TASK)}.md"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None, False
    try:
        data = os.read(fd, MAX_NOTE_BYTES + 1)
    finally:
        os.close(fd)
    cut = len(data) > MAX_NOTE_BYTES
    return data[:MAX_NOTE_BYTES].decode("utf-8", "replace"), cut


def note_parts(note: str) -> dict[str, Any]:
    """The description, the log's lines and the agent named in a note (see
    :mod:`actors.records.notes`)."""
    head, _, rest = note.partition("\n## Description\n\n")
    description, _, log = rest.partition("\n\n## Log\n\n")
    log, _, _ = log.partition("\n## Result\n")
    agent = ""
    for line in head.splitlines():
        if line.startswith("- agent: "):
            agent = line.removeprefix("- agent: ")
    return {
        "description": description if rest else None,
        "log": [line[2:] for line in log.splitlines() if line.startswith("- ")],
        "agent": agent,
    }


def _row_of(rows: list[Mapping[str, Any]], task_id: str) -> Mapping[str, Any] | None:
    for row in rows:
        if (row.get("task") or {}).get("task_id") == task_id:
            return row
    return None


async def task_page(
    task_id: str,
    *,
    call: Call,
    rows: list[Mapping[str, Any]],
    artifacts: Path,
    notifications: Path,
    session_id: str,
    traced: bool,
) -> dict[str, Any]:
    """Everything the task's page shows (rules 1-4)."""
    if not isinstance(task_id, str) or len(task_id) > 200:
        raise InvalidHandle("a task id is at most 200 characters")
    task_id = parse_id(task_id, IdKind.TASK)
    result = await call("result", {"task_id": task_id})
    note, note_cut = await asyncio.to_thread(read_note, artifacts, task_id)
    row = _row_of(rows, task_id)
    if result is None and note is None and row is None:
        raise InvalidHandle(f"the session knows no task {task_id}")
    parts = note_parts(note) if note is not None else {"description": None, "log": []}
    task = dict((row or {}).get("task") or {})
    agent_id = (row or {}).get("agent_id") or (result or {}).get("agent_id")
    history, whole = await asyncio.to_thread(newest, notifications, Filters(task=task_id), HISTORY)
    verdict: dict[str, Any] | None = None
    if agent_id and result is None:
        try:
            verdict = await call("watchdog_detect_stuck", {"agent": agent_id})
        except ShepherdError as exc:
            verdict = {"error": {"code": exc.code, "message": exc.message}}
    return {
        "task_id": task_id,
        "agent": {
            "agent_id": agent_id,
            "name": (row or {}).get("name") or (result or {}).get("agent_name"),
            "note": parts.get("agent"),
        },
        "description": parts["description"] or task.get("description") or "",
        # a result is the task's settled state; the board's snapshot may be a moment older
        "state": (result or {}).get("status") or task.get("state"),
        "status": task or None,
        "result": result,
        "note": {"text": note, "cut": note_cut, "log": parts["log"]},
        "history": {"notifications": history, "whole": whole},
        "watchdog": verdict,
        "trace": {
            "trace_id": task_trace_id(session_id, task_id),
            "exported": traced,
            "attribute": "shepherd.task.id",
            "value": task_id,
        },
    }
