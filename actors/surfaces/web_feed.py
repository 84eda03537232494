"""The session's notifications for the board: one follower of the file for every open
stream, the streams' filters, the newest matching notifications, and each agent's last
watchdog alert.

Rules:

1. **One follower.** A single task (:meth:`Feed.follow`) reads what is appended to the
   session's ``notifications.jsonl`` every :data:`FOLLOW_S` and hands each notification to
   every open stream whose filters it passes (at most :data:`MAX_TICK_BYTES` a tick). A
   stream that falls :data:`MAX_QUEUED` items behind is ended (the page opens it again); an
   idle session costs one ``stat`` per file per tick, whatever the number of pages open.
2. **Wake-ups.** A line appended to the notifications, or the journal growing (a session whose
   records are files), marks the board stale (``on_change``): a growing journal is only a
   wake-up, never read.
3. **Filters** (:func:`filters`): ``agent`` (a name or an id), ``task`` (a task id) and
   ``kind`` (a notification's kind or a notice's code), each checked for its shape; a bad one
   is ``invalid_argument``. A name matches the notifications that carry its agent's id.
4. **The newest ones** (:func:`newest`): at most ``limit`` (:data:`MAX_BACKLOG`) matching
   notifications before an offset of the file (the follower's, so a stream opened first and a
   backlog read after meet without a gap or a repeat), read backwards at most
   :data:`MAX_SCAN_BYTES`; the answer says whether it reached the file's start.
5. **Bounded events.** A notification whose JSON is over :data:`MAX_EVENT_BYTES` is sent with
   its long texts cut (``cut: true``), never as broken JSON; a line without an end over
   :data:`MAX_LINE_BYTES` is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.core.errors import InvalidArgument
from protocol.core.ids import IdKind, is_id_of, is_valid_name, kind_of

__all__ = [
    "FOLLOW_S",
    "MAX_BACKLOG",
    "MAX_EVENT_BYTES",
    "Feed",
    "Filters",
    "Stream",
    "filters",
    "named",
    "newest",
]

#: how often the follower looks at the files (rule 1)
FOLLOW_S = 0.1
#: items a stream may have waiting before it is ended (rule 1)
MAX_QUEUED = 2000
#: notifications one backlog answer holds at most (rule 4)
MAX_BACKLOG = 200
#: bytes a backlog reads backwards at most (rule 4)
MAX_SCAN_BYTES = 8 * 1024 * 1024
#: one event's JSON at most (rule 5)
MAX_EVENT_BYTES = 64 * 1024
#: a notification line longer than this is dropped unread (rule 5)
MAX_LINE_BYTES = 4 * 1024 * 1024
#: read at most this much of what was appended in one tick (the rest in the next ones)
MAX_TICK_BYTES = 8 * 1024 * 1024
#: a filter value's bound (rule 3)
MAX_FILTER_CHARS = 200
#: agents whose last watchdog alert is kept at most
MAX_ALERTS = 100_000
_KIND = re.compile(r"^[a-z][a-z_]{0,63}\Z")
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class Filters:
    """A stream's or a backlog's filters (rule 3); ``agent`` holds a name and its id."""

    agent: frozenset[str] = frozenset()
    task: str | None = None
    kind: str | None = None

    def passes(self, note: Mapping[str, Any]) -> bool:
        if self.kind is not None and self.kind not in (note.get("kind"), note.get("code")):
            return False
        if self.task is not None and self.task not in tasks_of(note):
            return False
        return not self.agent or not self.agent.isdisjoint(agents_of(note))


def filters(query: Mapping[str, str], ids: Mapping[str, str] | None = None) -> Filters:
    """The filters of a request's query (rule 3); ``ids`` maps agent names to their ids."""
    values = {k: query.get(k, "").strip() for k in ("agent", "task", "kind")}
    for key, value in values.items():
        if len(value) > MAX_FILTER_CHARS:
            raise InvalidArgument(f"{key} is at most {MAX_FILTER_CHARS} characters")
    agent, task, kind = values["agent"], values["task"], values["kind"]
    if agent and not (is_valid_name(agent) or kind_of(agent) is IdKind.AGENT):
        raise InvalidArgument(f"agent {agent[:40]!r} is neither an agent's name nor its id")
    if task and not is_id_of(task, IdKind.TASK):
        raise InvalidArgument(f"task {task[:40]!r} is not a task id")
    if kind and not _KIND.match(kind):
        raise InvalidArgument(f"kind {kind[:40]!r} is not a notification kind or notice code")
    names = frozenset({agent, (ids or {}).get(agent, agent)}) if agent else frozenset()
    return Filters(agent=names, task=task or None, kind=kind or None)


def _results(note: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for result in note.get("results") or ():
        if isinstance(result, Mapping):
            yield result


def agents_of(note: Mapping[str, Any]) -> set[str]:
    """Every agent a notification names, by id and by name."""
    keys = ("agent_id", "agent_name", "sender_id", "sender_name", "recipient_id")
    found = {str(note[k]) for k in (*keys, "recipient_name") if note.get(k)}
    for result in _results(note):
        found.update(str(result[k]) for k in ("agent_id", "agent_name") if result.get(k))
    for many in ("agent_ids", "cycle"):
        found.update(str(a) for a in note.get(many) or ())
    return found


def tasks_of(note: Mapping[str, Any]) -> set[str]:
    """Every task a notification is about."""
    found = {str(note["task_id"])} if note.get("task_id") else set()
    for many in ("refs", "ids"):
        found.update(str(r) for r in note.get(many) or ())
    found.update(str(r["task_id"]) for r in _results(note) if r.get("task_id"))
    return found


def bounded(note: Mapping[str, Any]) -> str:
    """The notification as JSON, its long texts cut when it is over the bound (rule 5)."""
    text = json.dumps(note)
    limit = 4096
    while len(text) > MAX_EVENT_BYTES and limit >= 16:
        text = json.dumps({**_cut(note, limit), "cut": True})
        limit //= 4
    if len(text) > MAX_EVENT_BYTES:
        keep = ("kind", "code", "created_at", "agent_id", "task_id")
        text = json.dumps({k: note.get(k) for k in keep if k in note} | {"cut": True})
    return text


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, Mapping):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value[:50]]
    return value


def named(note: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The notification with its agent's name, when it carries only the agent's id."""
    agent_id = note.get("agent_id")
    if not note.get("agent_name") and isinstance(agent_id, str) and agent_id in names:
        return {**note, "agent_name": names[agent_id]}
    return note


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip() or len(line) > MAX_LINE_BYTES:
        return None
    try:
        note = json.loads(line)
    except ValueError:
        return None
    return note if isinstance(note, dict) else None


def newest(
    path: Path, wanted: Filters, limit: int, before: int | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """The newest ``limit`` notifications passing ``wanted`` before offset ``before`` (default:
    the end), newest first, and whether the scan reached the file's start (rule 4)."""
    out: list[dict[str, Any]] = []
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return out, True
    with f:
        end = f.seek(0, 2)
        pos = end if before is None else min(before, end)
        scanned, rest = 0, b""
        while pos > 0 and len(out) < limit and scanned < MAX_SCAN_BYTES:
            step = min(_CHUNK, pos)
            pos -= step
            f.seek(pos)
            rest = f.read(step) + rest
            scanned += step
            first, *lines = rest.split(b"\n")
            rest = first
            if len(rest) > MAX_LINE_BYTES:  # a line too long to keep: skipped
                rest = b""
            for line in reversed(lines):
                note = _parse(line)
                if note is not None and wanted.passes(note):
                    out.append(note)
                    if len(out) >= limit:
                        break
        if pos == 0 and len(out) < limit:
            note = _parse(rest)
            if note is not None and wanted.passes(note):
                out.append(note)
        return out, pos == 0


@dataclass(eq=False)
class Stream:
    """One open event stream: its filters and what waits to be sent (``None`` ends it)."""

    wanted: Filters
    queue: asyncio.Queue[tuple[str, str] | None] = field(
        default_factory=lambda: asyncio.Queue(MAX_QUEUED + 1)
    )
    #: the file offset this stream's notifications start after (rule 4)
    offset: int = 0
    #: False: the board's events only, no notification
    notifications: bool = True

    def put(self, item: tuple[str, str]) -> bool:
        """Queue an item; False (and the stream ended) when it is too far behind."""
        if self.queue.qsize() >= MAX_QUEUED:
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)
            return False
        self.queue.put_nowait(item)
        return True


class Feed:
    """The follower (rule 1) and its streams, the wake-ups (rule 2), the last alerts."""

    def __init__(
        self, notifications: Path, journal: Path | None, on_change: Callable[[], None]
    ) -> None:
        self.path = notifications
        self.journal = journal
        self.on_change = on_change
        self.streams: set[Stream] = set()
        #: agent id -> its last watchdog alert
        self.alerts: dict[str, dict[str, Any]] = {}
        #: agent id -> its name (the board's snapshot keeps it)
        self.names: Mapping[str, str] = {}
        self.offset = _size(notifications) or 0
        self._journal_size = _size(journal) if journal is not None else None
        self._rest = b""

    def load_alerts(self) -> None:
        """Each agent's last watchdog alert, from the newest notifications (blocking: run off
        the event loop)."""
        found, _ = newest(self.path, Filters(kind="watchdog_alert"), MAX_ALERTS, self.offset)
        for note in reversed(found):
            self._alert(note)

    def _alert(self, note: Mapping[str, Any]) -> None:
        agent_id = note.get("agent_id")
        if note.get("kind") == "watchdog_alert" and isinstance(agent_id, str):
            self.alerts.pop(agent_id, None)
            self.alerts[agent_id] = dict(note)
            while len(self.alerts) > MAX_ALERTS:
                del self.alerts[next(iter(self.alerts))]

    def open(self, wanted: Filters, *, notifications: bool = True) -> Stream:
        # after the last whole line handed out: the next one any stream gets starts there
        offset = self.offset - len(self._rest)
        stream = Stream(wanted, offset=offset, notifications=notifications)
        self.streams.add(stream)
        return stream

    def close(self, stream: Stream) -> None:
        self.streams.discard(stream)

    def broadcast(self, event: str, data: Mapping[str, Any]) -> None:
        """An event for every stream, whatever its filters (the board's changes)."""
        text = json.dumps(data)
        for stream in list(self.streams):
            if not stream.put((event, text)):
                self.streams.discard(stream)

    def tick(self) -> None:
        """One look at the files (rule 1, 2): new notifications to the streams."""
        changed = False
        if self.journal is not None:
            size = _size(self.journal)
            if size != self._journal_size:
                self._journal_size, changed = size, True
        size = _size(self.path)
        if size is not None and size < self.offset:  # the file was replaced: start again
            self.offset, self._rest = 0, b""
        if size is not None and size > self.offset:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(min(size - self.offset, MAX_TICK_BYTES))
            self.offset += len(data)
            *lines, self._rest = (self._rest + data).split(b"\n")
            if len(self._rest) > MAX_LINE_BYTES:
                self._rest = b""
            for line in lines:
                note = _parse(line)
                if note is None:
                    continue
                changed = True
                self._alert(note)
                self._send(note)
        if changed:
            self.on_change()

    def _send(self, note: Mapping[str, Any]) -> None:
        text: str | None = None
        for stream in list(self.streams):
            if stream.notifications and stream.wanted.passes(note):
                text = text or bounded(named(dict(note), self.names))
                if not stream.put(("notification", text)):
                    self.streams.discard(stream)

    async def follow(self) -> None:
        """Look at the files every :data:`FOLLOW_S` until cancelled."""
        while True:
            self.tick()
            await asyncio.sleep(FOLLOW_S)


def _size(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return path.stat().st_size
    except OSError:
        return None
