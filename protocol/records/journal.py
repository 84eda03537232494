"""The journal's records, and their one encoding: a tagged union, one line each.

The journal is append-only; the latest record of a thing wins. Records:

- ``agent``   an agent joined (with what the parent needs to recognise its bridge again; written
  again when its bridge says its pid)
- ``agent_exit`` an agent's process is gone (or it was closed)
- ``agent_close`` the parent closed the agent (written before the task it held settles)
- ``task``    a task record (written at delegation and at settlement)
- ``request`` a request record (written when opened and when closed)
- ``prompt``  a compatibility prompt id and the task it names
- ``watcher`` a watcher and the ids it watches, with those whose results the ``watch``
  answer itself carried (written before that answer is sent: they count as delivered)
- ``usage``   what an agent spent in one report (a turn begun, tokens, cost), and the task it
  counted for: the fold adds them up again
- ``agent_recover`` ``serve --recover`` started the agent again: its new incarnation
- ``task_resume`` an open task was handed again to that incarnation (written before it is)
- ``session_limits`` the settings that bound the session (its budgets, default deadlines):
  written when it is made, and by a restart that changes them; a restart that gives none
  runs with the last (:mod:`protocol.session.limits`)
- ``task_changes`` the files a worktree agent's task changed (its result's ``changes``),
  written once they were listed, after the task's settlement
- ``worktree_removed`` a close removed the agent's (clean) git worktree. Where an agent's
  worktree is, is its ``agent`` record's options: ``worktree: true``, ``repo`` (the
  repository's top directory), ``branch``, ``base`` (the commit the branch started from) and
  ``cwd`` (the worktree's path, where the agent runs): launching the agent again with those
  options re-uses the worktree.

A line is ``{"type": <kind>, "record": {...}}``: an :data:`Entry`, a msgspec tagged union, so
one decoder reads any line and an unknown kind or a wrong field is a decode error naming it.
Which results a watcher delivered later is read from the notifications file, which *is* the
record of delivery (a line there was delivered; nothing else was); so are the stale-wait
notices already given (per waiting episode). How the records fold back into a session is
:mod:`protocol.session.restore`.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from protocol.records.requests import RequestRecord
from protocol.records.settings import SessionLimits
from protocol.records.tasks import TaskRecord
from protocol.records.worktrees import Overlap, WorktreeChanges

__all__ = [
    "AgentCloseRecord",
    "AgentExitRecord",
    "AgentRecord",
    "AgentRecoverRecord",
    "Entry",
    "MergeRecord",
    "PromptRecord",
    "Record",
    "SessionLimitsRecord",
    "TaskChangesRecord",
    "TaskResumeRecord",
    "UsageRecord",
    "WatcherRecord",
    "WorktreeRemovedRecord",
    "decode_line",
    "encode_line",
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


class AgentCloseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The parent closed the agent: from now on it takes no task and opens no request, even
    if the parent restarts before its process has exited."""

    agent_id: str
    at: float


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


# --- budgets


class UsageRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One report of usage (added to what was counted before): the agent's, its task's (if it
    had one) and the session's."""

    agent_id: str
    task_id: str | None = None
    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    at: float


# --- recovery (``serve --recover``): see protocol.session.recover


class AgentRecoverRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's bridge was gone at a restart and it was started again: its incarnation
    (1 for the first recovery, and so on) is what a task is re-handed to."""

    agent_id: str
    incarnation: int
    at: float


class TaskResumeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The open task was handed again to the agent's ``incarnation``, as the task envelope
    ``message_id`` (a later restart that finds that incarnation alive re-sends that id, which
    its inbox drops if it had it: never a second hand-over to one incarnation)."""

    task_id: str
    agent_id: str
    incarnation: int
    message_id: str
    at: float


# --- agents' git worktrees (spawn --worktree)


class WorktreeRemovedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A close removed the agent's worktree (it was clean); its branch stays."""

    agent_id: str
    path: str
    at: float


class TaskChangesRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a settled task changed in its agent's worktree (added to its result)."""

    task_id: str
    changes: WorktreeChanges


class MergeRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A ``merge`` of an agent's branch (:mod:`protocol.session.merges`): ``planned`` before
    ``into`` moves to ``commit``, then ``done``; or ``abandoned`` when a restarted parent found
    it had not moved (``found``: ``into``'s commit then)."""

    agent_id: str
    agent: str
    repo: str
    branch: str
    into: str
    strategy: str
    before: str
    commit: str
    state: Literal["planned", "done", "abandoned"]
    at: float
    found: str | None = None
    #: the other live agents whose worktrees changed paths the merge changed (``done``)
    overlaps: tuple[Overlap, ...] = ()
    files_count: int = 0


# --- the session's own bounds (protocol.session.limits)


class SessionLimitsRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The session's limits from now on; ``previous``: what they were (None: first record)."""

    limits: SessionLimits
    previous: SessionLimits | None = None
    at: float


Record = (
    AgentRecord
    | AgentExitRecord
    | AgentCloseRecord
    | TaskRecord
    | RequestRecord
    | PromptRecord
    | WatcherRecord
    | UsageRecord
    | AgentRecoverRecord
    | TaskResumeRecord
    | WorktreeRemovedRecord
    | TaskChangesRecord
    | SessionLimitsRecord
    | MergeRecord
)


class _Entry(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    pass


class AgentEntry(_Entry, frozen=True, kw_only=True, tag="agent"):
    record: AgentRecord


class AgentExitEntry(_Entry, frozen=True, kw_only=True, tag="agent_exit"):
    record: AgentExitRecord


class AgentCloseEntry(_Entry, frozen=True, kw_only=True, tag="agent_close"):
    record: AgentCloseRecord


class TaskEntry(_Entry, frozen=True, kw_only=True, tag="task"):
    record: TaskRecord


class RequestEntry(_Entry, frozen=True, kw_only=True, tag="request"):
    record: RequestRecord


class PromptEntry(_Entry, frozen=True, kw_only=True, tag="prompt"):
    record: PromptRecord


class WatcherEntry(_Entry, frozen=True, kw_only=True, tag="watcher"):
    record: WatcherRecord


class UsageEntry(_Entry, frozen=True, kw_only=True, tag="usage"):
    record: UsageRecord


class AgentRecoverEntry(_Entry, frozen=True, kw_only=True, tag="agent_recover"):
    record: AgentRecoverRecord


class TaskResumeEntry(_Entry, frozen=True, kw_only=True, tag="task_resume"):
    record: TaskResumeRecord


class WorktreeRemovedEntry(_Entry, frozen=True, kw_only=True, tag="worktree_removed"):
    record: WorktreeRemovedRecord


class TaskChangesEntry(_Entry, frozen=True, kw_only=True, tag="task_changes"):
    record: TaskChangesRecord


class SessionLimitsEntry(_Entry, frozen=True, kw_only=True, tag="session_limits"):
    record: SessionLimitsRecord


class MergeEntry(_Entry, frozen=True, kw_only=True, tag="merge"):
    record: MergeRecord


#: One journal line.
Entry = (
    AgentEntry
    | AgentExitEntry
    | AgentCloseEntry
    | TaskEntry
    | RequestEntry
    | PromptEntry
    | WatcherEntry
    | UsageEntry
    | AgentRecoverEntry
    | TaskResumeEntry
    | WorktreeRemovedEntry
    | TaskChangesEntry
    | SessionLimitsEntry
    | MergeEntry
)

_ENTRY_OF: Final[dict[type[msgspec.Struct], type[_Entry]]] = {
    AgentRecord: AgentEntry,
    AgentExitRecord: AgentExitEntry,
    AgentCloseRecord: AgentCloseEntry,
    TaskRecord: TaskEntry,
    RequestRecord: RequestEntry,
    PromptRecord: PromptEntry,
    WatcherRecord: WatcherEntry,
    UsageRecord: UsageEntry,
    AgentRecoverRecord: AgentRecoverEntry,
    TaskResumeRecord: TaskResumeEntry,
    WorktreeRemovedRecord: WorktreeRemovedEntry,
    TaskChangesRecord: TaskChangesEntry,
    SessionLimitsRecord: SessionLimitsEntry,
    MergeRecord: MergeEntry,
}
_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(Entry)


def encode_line(record: msgspec.Struct) -> bytes:
    """One journal line for ``record`` (``TypeError`` for anything that is not a record)."""
    entry = _ENTRY_OF.get(type(record))
    if entry is None:
        raise TypeError(f"cannot journal {type(record).__name__}")
    return _ENCODER.encode(entry(record=record)) + b"\n"


def decode_line(line: bytes) -> Record:
    """The record of one journal line (``msgspec.DecodeError`` naming what is wrong)."""
    return _DECODER.decode(line).record
