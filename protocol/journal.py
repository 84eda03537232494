"""The journal's records and how they fold back into a session's state after a restart.

The journal is append-only; the latest record of a thing wins. Records:

- ``agent``   an agent joined (with what the parent needs to recognise its bridge again)
- ``agent_exit`` an agent's process is gone (or it was closed)
- ``task``    a task record (written at delegation and at settlement)
- ``request`` a request record (written when opened and when closed)
- ``prompt``  a compatibility prompt id and the task it names
- ``watcher`` a watcher and the ids it watches, with those whose results the ``watch``
  answer itself carried (written before that answer is sent: they count as delivered)

Which results a watcher delivered later is read from the notifications file, which *is* the
record of delivery (a line there was delivered; nothing else was); so are the stale-wait
notices already given (per waiting episode).

A waiting *episode* of a task runs from the request that made it wait to the moment it has no
pending request left; its ``waiting_since`` is that first request's creation time. Folding
replays the request records in order to find, per waiting task, its current episode and the
requests opened in it, so a restart knows whether the episode was already reported stale.
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
    #: ids already settled when the watcher was registered: the ``watch`` answer carried
    #: their results, so they are delivered and a restart never hands them over again
    inline: tuple[str, ...] = ()


class JournalState(msgspec.Struct, kw_only=True):
    agents: dict[str, AgentRecord] = {}
    exits: dict[str, AgentExitRecord] = {}
    tasks: dict[str, TaskRecord] = {}
    requests: dict[str, RequestRecord] = {}
    prompts: dict[str, str] = {}
    watchers: dict[str, WatcherRecord] = {}
    #: per waiting task, the requests opened in its current waiting episode, in order
    episodes: dict[str, tuple[str, ...]] = {}

    def pending_requests_of(self, task_id: str) -> tuple[str, ...]:
        return tuple(
            r.request_id
            for r in self.requests.values()
            if r.task_id == task_id and r.state is RequestState.PENDING
        )


def fold(records: Iterable[msgspec.Struct]) -> JournalState:
    """Replay records in order into the state they describe (latest record wins).

    A task that was not terminal comes back ``running`` or, with open requests, ``waiting``
    since the start of its current episode: intermediate moves are not journaled, they are
    derived.
    """
    state = JournalState()
    open_now: dict[str, set[str]] = {}  # task id -> its pending requests, as replayed so far
    episode: dict[str, list[str]] = {}  # task id -> requests of its latest waiting episode
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
                if record.task_id is not None:
                    _replay_episode(record, open_now.setdefault(record.task_id, set()), episode)
            case PromptRecord():
                state.prompts[record.prompt_id] = record.task_id
            case WatcherRecord():
                state.watchers[record.watcher_id] = record
    for task_id, task in list(state.tasks.items()):
        if task.terminal:
            continue
        pending = state.pending_requests_of(task_id)
        since = None
        if pending:
            opened = episode.get(task_id) or list(pending)
            state.episodes[task_id] = tuple(opened)
            since = state.requests[opened[0]].created_at
        state.tasks[task_id] = msgspec.structs.replace(
            task,
            state=TaskState.WAITING if pending else TaskState.RUNNING,
            pending_requests=pending,
            started_at=task.started_at if task.started_at is not None else task.created_at,
            waiting_since=since,
        )
    return state


def _replay_episode(
    record: RequestRecord, pending: set[str], episode: dict[str, list[str]]
) -> None:
    """One request record, in journal order: a request opened while nothing was pending starts
    a new episode; closing the last pending one ends it."""
    assert record.task_id is not None
    if record.state is RequestState.PENDING:
        if record.request_id not in pending:
            if not pending:
                episode[record.task_id] = []
            pending.add(record.request_id)
            episode[record.task_id].append(record.request_id)
    else:
        pending.discard(record.request_id)


class Restore(msgspec.Struct, kw_only=True):
    """What a restarted parent starts from: the folded journal, per watcher the task ids whose
    completion it already delivered and per task the requests named by the stale-wait notices
    it already gave (both read from the notifications file), and how many damaged lines the
    two files had (torn tails cut off, unreadable records skipped; each was logged)."""

    state: JournalState
    delivered: dict[str, set[str]] = {}
    stale_noticed: dict[str, set[str]] = {}
    problems: int = 0

    def stale_notice_given(self, task_id: str) -> bool:
        """Was the task's current waiting episode already reported stale?"""
        opened = self.state.episodes.get(task_id, ())
        return not self.stale_noticed.get(task_id, set()).isdisjoint(opened)
