"""The session's state: one place for every fact the session's rules read or change.

Rules:

1. **One owner per fact.** An agent's process state, its active task and whether it is closed
   live in its :class:`AgentRow`; a task's record (state, pending requests, result) in
   ``tasks``; a request in ``requests``; a waiting episode in ``episodes``. A task's result
   is its record's ``result`` (``results`` is a view of it, never a second table). A
   watcher's pending, delivered and buffered tasks are NOT here: its :class:`WatcherState`
   is its actor's (:mod:`protocol.session.watcher`); the session keeps only
   ``subscribers``.
2. **Changed by the rules only.** The rule modules of this package are the only writers. A
   rule checks everything first and raises a typed error (nothing changed) or changes the
   state and returns its effects.
3. **Indexes are derived, and changed with what they index.** ``names`` indexes agents,
   ``subscribers`` routes a task's result to the watchers still waiting for it, a task's
   ``pending_requests`` lists its pending requests in the request table: each is changed in
   the same function as the fact it indexes (``tests/protocol/session`` checks they agree
   after every step).

Theory of operation: the state is a plain container that the rules change in place, like
h11's connection state; the records in it are frozen Structs, replaced as they move through
their machines (``protocol.records.tasks``, ``protocol.records.requests``, the process table in
``protocol.session.agents``). A persistent (copied-on-change) state would make every event cost
the size of the session (a session holds thousands of tasks and requests); the discipline
"check, then change" gives the same guarantee the tables give (an illegal move changes
nothing). Time and ids come in through :class:`Ctx`: a rule never reads a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgspec

from protocol.calls.api import ProcessState
from protocol.core.errors import InvalidHandle
from protocol.core.ids import PARENT_ID, IdKind, an_id_of, kind_of
from protocol.records.journal import MergeRecord
from protocol.records.request_table import RequestTable
from protocol.records.settings import SessionLimits, Settings
from protocol.records.tasks import TaskRecord, TaskResult
from protocol.records.usage import Usage
from protocol.records.worktrees import Snapshot
from protocol.wire.envelopes import MailboxWake

__all__ = [
    "AgentRow",
    "Ctx",
    "Episode",
    "Ids",
    "Pace",
    "SessionState",
    "Turn",
    "TurnStats",
    "WatcherState",
]


class Ids(Protocol):
    def new(self, kind: IdKind) -> str: ...

    def secret(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a rule may know of the world: the time of the event and where ids come from."""

    now: float
    ids: Ids


class AgentRow(msgspec.Struct, frozen=True, kw_only=True):
    """One agent of the session (replaced as it changes)."""

    agent_id: str
    name: str
    adapter: str
    capability: str
    created_at: float
    options: dict[str, Any] = {}
    pid: int | None = None
    process_state: ProcessState = "starting"
    closed: bool = False
    exit_code: int | None = None
    active_task: str | None = None
    last_active_at: float | None = None
    #: how its bridge is woken, as it last said
    mailbox_wake: MailboxWake | None = None
    #: 0 as spawned; n after its n-th start by ``serve --recover`` (protocol.session.recover)
    incarnation: int = 0

    @property
    def role(self) -> Literal["worker", "watchdog"]:
        """What it was spawned as (its ``role`` option; an agent recorded before roles existed
        is a ``worker``)."""
        return "watchdog" if self.options.get("role") == "watchdog" else "worker"


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's current turn: when its side started it, and the last lines it printed."""

    started_at: float | None = None
    tail: tuple[str, ...] = ()


class TurnStats(msgspec.Struct, frozen=True, kw_only=True):
    """Per open task: its turns that ended without done, the last one's end and status, and
    the tool calls its agent reported for it (None: not known, since a parent restart)."""

    count: int = 0
    ended_at: float | None = None
    exit_code: int | None = None
    tool_calls: int | None = 0


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    """A task's waiting episode: from the request that made it wait until none is pending."""

    since: float
    #: the requests opened in this episode, in order (a restart matches its stale notices)
    requests: tuple[str, ...] = ()
    #: the parent was told it is stale (once per episode)
    notified: bool = False


class WatcherState(msgspec.Struct, frozen=True, kw_only=True):
    """One watcher: which of its tasks are still to deliver, and what waits to go out."""

    watcher_id: str
    ids: tuple[str, ...]
    pending: frozenset[str]
    #: results waiting for the coalescing window to close, in arrival order
    buffer: tuple[TaskResult, ...] = ()
    #: False for a ``wait`` call's watcher: it lives only as long as its caller
    journaled: bool = True
    #: when it started watching (``watch``, or a restart that gave it its actor again): its
    #: window never counts from before it (:mod:`protocol.session.watcher`, rule 2)
    since: float = 0.0


class _Results(Mapping[str, TaskResult]):
    """The settled tasks' results: a view of the task records, not a table of its own."""

    __slots__ = ("_tasks",)

    def __init__(self, tasks: dict[str, TaskRecord]) -> None:
        self._tasks = tasks

    def __getitem__(self, task_id: str) -> TaskResult:
        result = self._tasks[task_id].result
        if result is None:
            raise KeyError(task_id)
        return result

    def __contains__(self, task_id: object) -> bool:
        record = self._tasks.get(task_id) if isinstance(task_id, str) else None
        return record is not None and record.result is not None

    def __iter__(self) -> Iterator[str]:
        return (t for t, r in self._tasks.items() if r.result is not None)

    def __len__(self) -> int:
        return sum(1 for r in self._tasks.values() if r.result is not None)


class Pace:
    """One paced provider (:mod:`protocol.session.pacing`): its rate, when its next token
    comes, its refused turns waiting."""

    __slots__ = ("armed", "granted", "lowered_at", "next_at", "rate", "slow_start", "waiting")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.next_at = now
        self.slow_start = True
        self.lowered_at = now
        #: agents whose turn a token started, until it ends or is refused
        self.granted: set[str] = set()
        #: agent ids whose refused turn waits for a token, first refused first
        self.waiting: deque[str] = deque()
        #: a ``PaceDue`` timer is set for the next token
        self.armed = False


class SessionState:
    """Everything the session's rules know. See the module rules for who may change what."""

    def __init__(self, session_id: str, settings: Settings) -> None:
        self.session_id = session_id
        self.settings = settings
        self.agents: dict[str, AgentRow] = {}
        self.names: dict[str, str] = {}  # name -> agent id (the newest agent of that name)
        self.tasks: dict[str, TaskRecord] = {}
        self.requests = RequestTable(settings.closed_requests_kept)
        self.prompts: dict[str, str] = {}  # prompt id -> task id (compatibility aliases)
        self.subscribers: dict[str, list[str]] = {}  # task id -> watchers it is pending for
        #: the live watchers the journal describes, as the fold found them: ``resume`` starts
        #: an actor for each and empties this (a running session keeps no watcher's state)
        self.folded_watchers: dict[str, WatcherState] = {}
        self.stale: dict[str, Episode] = {}  # waiting task id -> its episode
        self.turns: dict[str, Turn] = {}  # agent id -> its current turn
        self.turn_stats: dict[str, TurnStats] = {}  # open task id -> turns without done
        #: open task id -> how many endings were routed to its actor and not reported yet
        #: (protocol.session.settlement): a turn's end waits for them (tasks.turn_end)
        self.endings: dict[str, int] = {}
        #: damaged lines of the journal and notifications file found at restart
        self.journal_problems = 0
        #: task id -> (incarnation, task envelope id) of its last hand-over to an agent that
        #: ``serve --recover`` started again: a resume, or a delegation to that incarnation
        #: (set by the fold; protocol.session.recover)
        self.handed: dict[str, tuple[int, str]] = {}
        self.results: Mapping[str, TaskResult] = _Results(self.tasks)
        # --- budgets (protocol.session.budgets)
        self.task_usage: dict[str, Usage] = {}  # task id -> what it spent
        self.agent_usage: dict[str, Usage] = {}  # agent id -> what it spent, tasks or not
        self.session_usage = Usage()
        #: (SESSION_SCOPE, limit): the session's soft limits the parent was warned of (a
        #: task's are its actor's: protocol.session.task_budget)
        self.budget_warned: set[tuple[str, str]] = set()
        #: the limits the session's records hold (their latest ``session_limits`` record; None:
        #: none yet), set by the fold (protocol.session.limits)
        self.limits: SessionLimits | None = None
        # --- agents' git worktrees (protocol.session.worktrees)
        #: agent id -> paths its worktree changed since its branch's base (last counted)
        self.worktree_changed: dict[str, int] = {}
        #: agent id -> path of its worktree, once a close removed it
        self.worktree_removed: dict[str, str] = {}
        #: open task id -> where its agent's worktree stood when the task was handed over
        self.snapshots: dict[str, Snapshot] = {}
        #: settled task ids whose changes are being listed (their watchers wait for them)
        self.diffing: set[str] = set()
        #: settled tasks whose claim showed no tool call, judged once their worktree's changes
        #: are listed (their tool calls; None: not reported) (protocol.session.claims)
        self.unproven: dict[str, int | None] = {}
        # --- admission and model providers (protocol.session.admission, .providers)
        #: open task id -> its agent's provider (None: none known): the tasks handed over
        #: while admission is on (each holds a slot)
        self.admitted: dict[str, str | None] = {}
        #: the queued tasks, in the order they start: (-priority, queue_seq, task id)
        self.queue: list[tuple[int, int, str]] = []
        #: the next queued task's place in its order, from 1 (0: never queued; restored from
        #: the records)
        self.queue_seq = 1
        #: path -> agent id -> when it last edited it; pairs told (protocol.session.collisions)
        self.edits: dict[str, dict[str, float]] = {}
        self.collisions_told: dict[tuple[str, str, str], None] = {}
        #: planned merges not yet journaled done, by their commit (protocol.session.merges)
        self.merges: dict[str, MergeRecord] = {}
        #: node -> its ``shepherd node --max-running`` (as its beats tell it)
        self.node_caps: dict[str, int] = {}
        #: agent id -> the model provider it reported using (beside its ``provider`` option)
        self.providers: dict[str, str] = {}
        #: provider -> when its rate-limit cool-down ends
        self.cooldowns: dict[str, float] = {}
        #: task id (or agent id, for a turn outside a task) -> provider errors retried so far
        self.provider_attempts: dict[str, int] = {}
        #: provider -> its pace once it refused a turn for its rate limit (protocol.session
        #: .pacing), and the times its turns got through in the last second
        self.paces: dict[str, Pace] = {}
        self.got_through: dict[str, deque[float]] = {}
        #: agent id -> the provider whose refusal it waits out (it waits for ``resume``)
        self.held: dict[str, str] = {}

    @property
    def episodes(self) -> dict[str, tuple[str, ...]]:
        """Per waiting task, the requests opened in its current episode."""
        return {task_id: e.requests for task_id, e in self.stale.items()}

    # ------------------------------------------------------------------ lookups

    def agent(self, handle: str, *, live: bool = False) -> AgentRow:
        """The agent named by id or name, or ``invalid_handle`` (``live``: not closed)."""
        agent_id = handle if handle in self.agents else self.names.get(handle)
        if agent_id is None:
            kind = kind_of(handle)
            if kind is not None and kind is not IdKind.AGENT:
                raise InvalidHandle(f"{handle} is {an_id_of(kind)}, not an agent")
            raise InvalidHandle(f"no agent {handle!r} in this session")
        row = self.agents[agent_id]
        if live and row.closed:
            raise InvalidHandle(f"agent {row.name} ({agent_id}) is closed")
        return row

    def name_of(self, agent_id: str) -> str:
        row = self.agents.get(agent_id)
        return row.name if row else agent_id

    def result_of(self, task_id: str) -> TaskResult | None:
        record = self.tasks.get(task_id)
        return record.result if record is not None else None

    def waits(self, agent_id: str) -> bool:
        """Does the agent wait for a reply to any of its questions?"""
        return any(waiter == agent_id for waiter, _ in self.requests.wait_edges())

    def put_agent(self, row: AgentRow) -> None:
        self.agents[row.agent_id] = row


def is_parent(agent_id: str) -> bool:
    return agent_id == PARENT_ID
