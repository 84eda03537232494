"""Admission: how many tasks are handed to agents at once (``serve --max-running N``,
``--max-running-per-provider P=N``), and the queue of the others.

Rules:

1. **Off unless capped.** With no cap set (the session's, a provider's, or a node's: ``shepherd
   node --max-running N``, told in its beats), every task is handed over at ``delegate`` and
   nothing here applies. A node's cap holds in each session apart (a node does not see tasks).
2. **A slot** is held by each task handed over and still open (``running``, ``waiting``,
   ``verifying``): one of the session's cap, one of its provider's (its agent's
   ``provider`` option, or the provider it reported) and one of its node's (the node its
   agent was placed on). A task delegated when no slot fits is
   ``queued``: journaled so, with its place, and not handed over; its agent's slot (one task
   per agent) is taken all the same.
3. **The queue's order**: higher ``priority`` first, then first queued first (``queue_seq``,
   journaled with the record: a restart keeps the order).
4. **A freed slot is filled at once.** When a task holding a slot settles, when a queued task
   leaves the queue, when a provider's cool-down ends, when a node's cap changes and after a
   restart, the queue is
   walked in order and each task that fits is started; one that does not fit (its provider at
   its cap, or cooling down) is passed over, never waited for. So after every step no queued
   task fits, and a new delegation that fits may start at once without overtaking one.
5. **Starting is the task's move** (``Start``, decided by its actor: a cancel that reached it
   first wins, and the slot goes to the next). Once started, it is journaled ``running`` and
   handed over as any delegation is; a deadline counted from the start (``timeout_from
   start``) and its budget's minutes are armed then.
6. A queued task can be cancelled, failed or time out (its deadline counts from its
   delegation unless ``timeout_from start``); its agent never had it, so it is not told.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.core.limits import ProviderName
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session import pacing
from protocol.session import task as one_task
from protocol.session.effects import Effect, PaceDue, StartTimer, TellTask
from protocol.session.state import Ctx, SessionState

__all__ = [
    "NodeCap",
    "Started",
    "enabled",
    "enqueue",
    "fill",
    "fits",
    "node_cap",
    "parse_caps",
    "places",
    "provider_of",
    "release",
    "restored",
    "took",
    "wake",
]

#: the states in which a task holds a slot (rule 2)
_HOLDING = (TaskState.RUNNING, TaskState.WAITING, TaskState.VERIFYING)


class Started(msgspec.Struct, frozen=True, kw_only=True):
    """After a queued task's actor decided its ``Start`` (rule 5)."""


class NodeCap(msgspec.Struct, frozen=True, kw_only=True):
    """A node's ``--max-running``, as its beats tell it (None: it has none)."""

    node: str
    max_running: int | None = None


def enabled(s: SessionState) -> bool:
    """Rule 1."""
    settings = s.settings
    return (
        settings.max_running is not None
        or bool(settings.max_running_per_provider)
        or bool(s.node_caps)
        or bool(s.paces)
    )


def node_of(s: SessionState, agent_id: str) -> str | None:
    """The node an agent was placed on (None: the parent's host)."""
    row = s.agents.get(agent_id)
    node = row.options.get("node") if row is not None else None
    return node if isinstance(node, str) else None


def _on_node(s: SessionState, node: str) -> int:
    """Slots held by tasks of agents placed on ``node``."""
    tasks = s.tasks
    return sum(
        1 for task_id in s.admitted if (t := tasks.get(task_id)) and node_of(s, t.agent_id) == node
    )


def node_cap(s: SessionState, event: NodeCap, cx: Ctx) -> list[Effect]:
    """A node's cap, heard (rules 1 and 4)."""
    if s.node_caps.get(event.node) == event.max_running:
        return []
    if event.max_running is None:
        del s.node_caps[event.node]
    else:
        s.node_caps[event.node] = event.max_running
    return fill(s, cx)


def provider_of(s: SessionState, agent_id: str) -> str | None:
    """The provider an agent uses: its ``provider`` option, else the one it reported."""
    row = s.agents.get(agent_id)
    given = row.options.get("provider") if row is not None else None
    return given if isinstance(given, str) else s.providers.get(agent_id)


def fits(s: SessionState, agent_id: str, now: float) -> bool:
    """Would a task of this agent fit a slot now (rules 2 and 4)?"""
    cap = s.settings.max_running
    if cap is not None and len(s.admitted) >= cap:
        return False
    node = node_of(s, agent_id) if s.node_caps else None
    if node is not None and node in s.node_caps and _on_node(s, node) >= s.node_caps[node]:
        return False
    provider = provider_of(s, agent_id)
    if provider is None:
        return True
    if s.cooldowns.get(provider, 0.0) > now or not pacing.ready(s, provider, now):
        return False
    per = s.settings.max_running_per_provider.get(provider)
    return per is None or sum(1 for p in s.admitted.values() if p == provider) < per


def took(s: SessionState, record: TaskRecord, now: float) -> None:
    """A task handed over holds its slot (rule 2; counted with admission off too: a node's cap
    may be heard later) and its provider's token, if paced."""
    provider = s.admitted[record.task_id] = provider_of(s, record.agent_id)
    pacing.spend(s, provider, record.agent_id, now)


def enqueue(s: SessionState, record: TaskRecord) -> tuple[TaskRecord, int]:
    """A task for which no slot fits, in the queue (rule 3); and its place, from 1."""
    queued = msgspec.structs.replace(record, queue_seq=s.queue_seq)
    s.queue_seq += 1
    key = (-queued.priority, queued.queue_seq, queued.task_id)
    at = bisect.bisect_left(s.queue, key)
    s.queue.insert(at, key)
    return queued, at + 1


def release(s: SessionState, before: TaskRecord, cx: Ctx) -> list[Effect]:
    """A task settled: its slot, or its place in the queue, is freed (rule 4)."""
    task_id = before.task_id
    if before.state is TaskState.QUEUED:
        key = (-before.priority, before.queue_seq, task_id)
        at = bisect.bisect_left(s.queue, key)
        if at < len(s.queue) and s.queue[at] == key:
            del s.queue[at]
        return []  # it held no slot: nothing fits now that did not before
    if s.admitted.pop(task_id, _ABSENT) is _ABSENT:
        return []
    return fill(s, cx)


_ABSENT: Any = object()


def fill(s: SessionState, cx: Ctx) -> list[Effect]:
    """Start every queued task that fits, in the queue's order (rule 4)."""
    effects: list[Effect] = []
    cap = s.settings.max_running
    kept: list[tuple[int, int, str]] = []
    for at, key in enumerate(s.queue):
        if cap is not None and len(s.admitted) >= cap:
            kept += s.queue[at:]  # full: nothing after fits either
            break
        record = s.tasks.get(key[2])
        if record is None or record.state is not TaskState.QUEUED:
            continue  # settled meanwhile: its place is gone
        if fits(s, record.agent_id, cx.now):
            took(s, record, cx.now)
            start = one_task.Start(at=cx.now, then=Started())
            effects.append(TellTask(task_id=record.task_id, message=start))
        else:
            kept.append(key)
    s.queue = kept
    return effects + wake(s, cx)


def wake(s: SessionState, cx: Ctx) -> list[Effect]:
    """A ``PaceDue`` timer for each paced provider with a turn waiting for its next token: a
    refused turn, or a queued task (:mod:`protocol.session.pacing`, rule 1)."""
    if not s.paces:
        return []
    effects: list[Effect] = []
    queued: set[str | None] | None = None
    for provider, pace in s.paces.items():
        if pace.armed:
            continue
        if not pace.waiting:
            if queued is None:
                queued = {provider_of(s, t.agent_id) for k in s.queue if (t := s.tasks.get(k[2]))}
            if provider not in queued:
                continue
        delay = max(pace.next_at, s.cooldowns.get(provider, 0.0)) - cx.now
        if delay <= 0 and not pace.waiting:
            continue  # its token is there: what is queued waits for a slot, not a token
        pace.armed = True
        effects.append(StartTimer(delay=max(delay, 0.0), event=PaceDue(provider=provider)))
    return effects


def places(s: SessionState) -> dict[str, int]:
    """Each queued task's place, from 1 (status)."""
    return {key[2]: place for place, key in enumerate(s.queue, start=1)}


def restored(s: SessionState, cx: Ctx) -> list[Effect]:
    """After a restart: the slots held and the queue, from the records; then rule 4 (the caps
    of this start may differ from the last's)."""
    s.admitted.clear()
    s.queue.clear()
    for record in s.tasks.values():
        if record.state is TaskState.QUEUED:
            s.queue.append((-record.priority, record.queue_seq, record.task_id))
        elif record.state in _HOLDING:
            s.admitted[record.task_id] = provider_of(s, record.agent_id)
        s.queue_seq = max(s.queue_seq, record.queue_seq + 1)
    s.queue.sort()
    return fill(s, cx) if enabled(s) or s.queue else []


def parse_caps(values: Mapping[str, Any] | list[str] | tuple[str, ...]) -> dict[str, int]:
    """``--max-running-per-provider P=N`` values (or a mapping), checked: a provider name and
    a count of 1 to 1,000,000 each (``invalid_argument`` naming the value)."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(values, Mapping):
        pairs = list(values.items())
    else:
        for value in values:
            name, sep, count = str(value).partition("=")
            if not sep:
                raise InvalidArgument(f"max_running_per_provider: {value[:80]!r} is not PROVIDER=N")
            pairs.append((name.strip(), count.strip()))
    caps: dict[str, int] = {}
    for name, count in pairs:
        try:
            provider = msgspec.convert(name, ProviderName)
            number = int(count)
        except (msgspec.ValidationError, ValueError, TypeError):
            raise InvalidArgument(
                f"max_running_per_provider: {str(name)[:80]!r}={str(count)[:20]!r}: a provider "
                "name (letters, digits, '.', '_', '-'; at most 64) and a whole number"
            ) from None
        if not 1 <= number <= 1_000_000:
            raise InvalidArgument(
                f"max_running_per_provider: {provider}={number}: the cap must be 1 to 1000000"
            )
        caps[provider] = number
    return caps
