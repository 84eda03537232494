"""The journal's records and how they fold back into a session's state after a restart.

The journal is append-only; the latest record of a thing wins. Records:

- ``agent``   an agent joined (with what the parent needs to recognise its bridge again)
- ``agent_exit`` an agent's process is gone (or it was closed)
- ``task``    a task record (written at delegation and at settlement)
- ``request`` a request record (written when opened and when closed)
- ``prompt``  a compatibility prompt id and the task it names
- ``watcher`` a watcher and the ids it watches

Which results a watcher already delivered is read from the notifications file, which *is*
the record of delivery (a line there was delivered; nothing else was).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from protocol.requests import RequestRecord, RequestState
from protocol.tasks import TaskRecord, TaskState

__all__ = [
    "AgentExitRecord",
    "AgentRecord",
    "JournalState",
    "PromptRecord",
    "Restore",
    "WatcherRecord",
    "fold",
]


class AgentRecord(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    name: str
    adapter: str
    capability: str
    created_at: float
    options: dict[str, Any] = {}
    pid: int | None = None


class AgentExitRecord(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    exit_code: int | None
    at: float
    closed: bool = False


class PromptRecord(msgspec.Struct, frozen=True, kw_only=True):
    prompt_id: str
    task_id: str


class WatcherRecord(msgspec.Struct, frozen=True, kw_only=True):
    watcher_id: str
    ids: tuple[str, ...]
    created_at: float


class JournalState(msgspec.Struct, kw_only=True):
    agents: dict[str, AgentRecord] = {}
    exits: dict[str, AgentExitRecord] = {}
    tasks: dict[str, TaskRecord] = {}
    requests: dict[str, RequestRecord] = {}
    prompts: dict[str, str] = {}
    watchers: dict[str, WatcherRecord] = {}

    def pending_requests_of(self, task_id: str) -> tuple[str, ...]:
        return tuple(
            r.request_id
            for r in self.requests.values()
            if r.task_id == task_id and r.state is RequestState.PENDING
        )


def fold(records: Iterable[msgspec.Struct]) -> JournalState:
    """Replay records in order into the state they describe (latest record wins).

    A task that was not terminal comes back ``running`` or, with open requests, ``waiting``:
    intermediate moves are not journaled, they are derived.
    """
    state = JournalState()
    for record in records:
        match record:
            case AgentRecord():
                state.agents[record.agent_id] = record
            case AgentExitRecord():
                state.exits[record.agent_id] = record
            case TaskRecord():
                state.tasks[record.task_id] = record
            case RequestRecord():
                state.requests[record.request_id] = record
            case PromptRecord():
                state.prompts[record.prompt_id] = record.task_id
            case WatcherRecord():
                state.watchers[record.watcher_id] = record
    for task_id, task in list(state.tasks.items()):
        if task.terminal:
            continue
        pending = state.pending_requests_of(task_id)
        state.tasks[task_id] = msgspec.structs.replace(
            task,
            state=TaskState.WAITING if pending else TaskState.RUNNING,
            pending_requests=pending,
            started_at=task.started_at if task.started_at is not None else task.created_at,
            waiting_since=(min(state.requests[r].created_at for r in pending) if pending else None),
        )
    return state


class Restore(msgspec.Struct, kw_only=True):
    """What a restarted parent starts from: the folded journal, and per watcher the task ids
    whose completion it already delivered (read from the notifications file)."""

    state: JournalState
    delivered: dict[str, set[str]] = {}
