"""The board's model: every agent of the session in its lane, each card's details, and pages
of lanes whose counts are always those of the whole session.

Rules:

1. **Lanes from status alone.** An agent's lane (:func:`lane_of`) is read from its ``status``
   row: a question or an approval to the parent pending first, then a task waiting on a peer,
   a task queued for a slot (admission: not handed over yet), a working one, an exited or
   closed agent, else idle.
2. **One snapshot, every agent.** :class:`Snapshot` follows ``status``'s pages to the end (at
   most :data:`MAX_STATUS_PAGES`), so a lane's count is that of every agent of the session,
   never that of a page. A snapshot is replaced whole; its ``version`` grows only when a card
   or a count changed.
3. **A card is a digest** (:func:`card`): its task (text cut to :data:`CARD_TEXT_CHARS`), time
   in its lane, turns, tokens and cost beside the task's budget, the watchdog's last alert,
   and a worktree's branch, changed files and overlaps (as few as :data:`CARD_LIST` of each).
4. **Time in state** is the session's own timestamp when it has one (a task waiting since, a
   request to the parent asked at, a result settled at); otherwise the time the board saw the
   agent enter its lane, or, for an agent first seen working, its task's creation.
5. **Pages.** A lane is served :data:`LANE_PAGE` cards at a time from an offset, the inbox of
   requests to the parent :data:`INBOX_PAGE` at a time; every count stays whole.
   ``needs_parent`` and the inbox list the longest waiting first, every other lane the
   newest arrival first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from protocol.core.errors import InvalidArgument, LimitExceeded
from protocol.core.ids import PARENT_ID

__all__ = [
    "CARD_TEXT_CHARS",
    "INBOX_PAGE",
    "LANES",
    "LANE_PAGE",
    "Snapshot",
    "card",
    "lane_of",
    "requests_to_parent",
]

#: lanes, in the order the board shows them
LANES = ("needs_parent", "working", "waiting_peer", "queued", "idle", "exited")
#: cards of one lane in one answer at most (rule 5)
LANE_PAGE = 50
#: requests to the parent in one answer at most (rule 5)
INBOX_PAGE = 50
#: a card's task text and result summary, cut to this many characters (rule 3)
CARD_TEXT_CHARS = 200
#: changed files, overlaps and watchdog reasons a card lists at most (rule 3)
CARD_LIST = 5
#: ``status`` pages one snapshot follows at most (rule 2): some 10,000 agents
MAX_STATUS_PAGES = 500

#: one status page: ``await fetch(cursor)`` is ``status``'s answer from ``cursor``
Fetch = Callable[[int], Awaitable[Mapping[str, Any]]]


def lane_of(row: Mapping[str, Any]) -> str:
    """The lane of one agent row of ``status`` (rule 1)."""
    if row.get("closed") or row.get("process_state") in ("exited", "crashed", "closed"):
        return "exited"
    if row.get("state") in ("exited", "crashed", "closed"):
        return "exited"
    task = row.get("task") or {}
    if requests_to_parent(task):
        return "needs_parent"
    if task and not task.get("result"):
        if task.get("state") == "waiting":
            return "waiting_peer"
        if task.get("state") == "queued":
            return "queued"
        return "working"
    return "idle"


def requests_to_parent(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The task's requests addressed to the parent and still pending."""
    return [
        r
        for r in task.get("pending_requests") or ()
        if r.get("target_id") == PARENT_ID and r.get("state", "pending") == "pending"
    ]


def exact_since(row: Mapping[str, Any], lane: str) -> float | None:
    """When the agent entered ``lane``, by the session's own timestamps (rule 4), if known."""
    task = row.get("task") or {}
    if lane == "needs_parent":
        asked = [r.get("created_at") for r in requests_to_parent(task)]
        return min((a for a in asked if isinstance(a, (int, float))), default=None)
    if lane == "waiting_peer":
        since = task.get("waiting_since")
        return since if isinstance(since, (int, float)) else None
    if lane == "queued":  # queued when it was delegated
        since = task.get("created_at")
        return since if isinstance(since, (int, float)) else None
    if lane == "idle" and task.get("result"):
        settled = task["result"].get("completed_at")
        return settled if isinstance(settled, (int, float)) else None
    return None


def first_seen_since(row: Mapping[str, Any], lane: str) -> float | None:
    """The best guess for an agent the board sees for the first time (rule 4)."""
    exact = exact_since(row, lane)
    if exact is not None:
        return exact
    task = row.get("task") or {}
    if lane == "working" and isinstance(task.get("created_at"), (int, float)):
        return float(task["created_at"])
    active = row.get("last_active_at")
    return active if isinstance(active, (int, float)) else None


def _cut(text: object, limit: int = CARD_TEXT_CHARS) -> str:
    if not isinstance(text, str):
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _worktree(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """Branch and changed files from the row; files and overlaps from the last settled task."""
    if row.get("branch") is None:
        return None
    out: dict[str, Any] = {"branch": row["branch"], "changed_files": row.get("changed_files")}
    result = (row.get("task") or {}).get("result") or {}
    changes = result.get("changes")
    if isinstance(changes, Mapping):
        out["files"] = list(changes.get("files") or ())[:CARD_LIST]
        out["files_count"] = changes.get("count", 0)
        out["overlaps"] = [
            {
                "agent": o.get("agent"),
                "branch": o.get("branch"),
                "count": o.get("count", 0),
                "files": list(o.get("files") or ())[:CARD_LIST],
            }
            for o in list(changes.get("overlaps") or ())[:CARD_LIST]
        ]
        out["overlap_agents"] = changes.get("overlap_agents", 0)
    return out


def _alert(alert: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not alert:
        return None
    return {
        "confidence": alert.get("confidence"),
        "reasons": [_cut(r, 120) for r in list(alert.get("reasons") or ())[:CARD_LIST]],
        "at": alert.get("created_at"),
        "task_id": alert.get("task_id"),
    }


def card(
    row: Mapping[str, Any],
    lane: str,
    since: float | None,
    alert: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The card of one agent row (rule 3): what the board shows, nothing that grows."""
    task = row.get("task") or {}
    usage = task.get("usage") or row.get("usage") or {}
    out: dict[str, Any] = {
        "agent_id": row.get("agent_id"),
        "name": row.get("name"),
        "lane": lane,
        "process_state": row.get("process_state"),
        "adapter": row.get("adapter"),
        "node": row.get("node"),
        "since": since,
        "usage": {
            "turns": usage.get("turns", 0),
            "tokens": usage.get("tokens", 0),
            "cost": usage.get("cost", 0.0),
        },
        "budget": task.get("budget") or None,
        "watchdog": _alert(alert),
        "worktree": _worktree(row),
        "exit_code": row.get("exit_code"),
    }
    if task:
        result = task.get("result") or None
        out["task"] = {
            "task_id": task.get("task_id"),
            "state": task.get("state"),
            "queue_place": task.get("queue_place"),
            "description": _cut(task.get("description")),
            "created_at": task.get("created_at"),
            "stale": bool(task.get("stale")),
            "turns_without_done": task.get("turns_without_done", 0),
            "result": {
                "status": result.get("status"),
                "text": _cut(result.get("text") or result.get("error")),
            }
            if result
            else None,
        }
    return out


def _request(row: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "request_id": request.get("request_id"),
        "kind": request.get("kind", "question"),
        "question": request.get("question", ""),
        "created_at": request.get("created_at"),
        "deadline_at": request.get("deadline_at"),
        "task_id": request.get("task_id"),
        "agent": row.get("name"),
        "agent_id": row.get("agent_id"),
    }


class Snapshot:
    """Every agent of the session in its lane (rules 2 and 4), made again by :meth:`refresh`."""

    def __init__(self) -> None:
        self.version = 0
        self.now: float | None = None
        self.summary: dict[str, Any] = {}
        self.rows: list[Mapping[str, Any]] = []
        self.lanes: dict[str, list[dict[str, Any]]] = {lane: [] for lane in LANES}
        self.inbox: list[dict[str, Any]] = []
        #: agent id -> (lane, task id, since): what rule 4 remembers between snapshots
        self._seen: dict[str, tuple[str, str | None, float | None]] = {}
        #: names and ids of the agents, to their id
        self.ids: dict[str, str] = {}
        #: agent id -> name
        self.names: dict[str, str] = {}

    @property
    def counts(self) -> dict[str, int]:
        return {lane: len(cards) for lane, cards in self.lanes.items()}

    async def refresh(
        self, fetch: Fetch, alerts: Mapping[str, Mapping[str, Any]] | None = None
    ) -> bool:
        """Follow ``status``'s pages and make the snapshot again; whether anything shown
        changed (then ``version`` grew)."""
        rows: list[Mapping[str, Any]] = []
        cursor: int | None = 0
        answer: Mapping[str, Any] = {}
        for _ in range(MAX_STATUS_PAGES):
            answer = await fetch(cursor or 0)
            rows.extend(answer.get("agents") or ())
            cursor = answer.get("next_cursor")
            if cursor is None:
                break
        else:
            raise LimitExceeded(f"the board follows at most {MAX_STATUS_PAGES} status pages")
        return self.replace(rows, answer, alerts or {})

    def replace(
        self,
        rows: list[Mapping[str, Any]],
        last_page: Mapping[str, Any],
        alerts: Mapping[str, Mapping[str, Any]],
    ) -> bool:
        now = last_page.get("now")
        lanes: dict[str, list[dict[str, Any]]] = {lane: [] for lane in LANES}
        inbox: list[dict[str, Any]] = []
        seen: dict[str, tuple[str, str | None, float | None]] = {}
        ids: dict[str, str] = {}
        names: dict[str, str] = {}
        for row in rows:
            agent_id = str(row.get("agent_id"))
            ids[agent_id] = agent_id
            ids[str(row.get("name"))] = agent_id
            names[agent_id] = str(row.get("name"))
            lane = lane_of(row)
            task_id = (row.get("task") or {}).get("task_id")
            before = self._seen.get(agent_id)
            if before is not None and before[:2] == (lane, task_id):
                since = before[2]
            elif before is None:
                since = first_seen_since(row, lane)
            else:
                since = exact_since(row, lane) or (now if isinstance(now, float) else None)
            seen[agent_id] = (lane, task_id, since)
            lanes[lane].append(card(row, lane, since, alerts.get(agent_id)))
            inbox.extend(_request(row, r) for r in requests_to_parent(row.get("task") or {}))
        for lane, cards in lanes.items():
            oldest_first = lane == "needs_parent"
            cards.sort(key=lambda c: (c["since"] or 0.0, c["name"] or ""), reverse=not oldest_first)
        inbox.sort(key=lambda r: (r["created_at"] or 0.0, r["request_id"] or ""))
        changed = lanes != self.lanes or inbox != self.inbox or self.now is None
        self.rows, self.lanes, self.inbox, self._seen = rows, lanes, inbox, seen
        self.ids, self.names = ids, names
        self.now = now if isinstance(now, float) else self.now
        self.summary = dict(last_page.get("summary") or {})
        if changed:
            self.version += 1
        return changed

    def page(self, offsets: Mapping[str, int], inbox_offset: int = 0) -> dict[str, Any]:
        """One page of each lane from its offset and of the inbox, with every count (rule 5)."""
        for lane in offsets:
            if lane not in LANES:
                raise InvalidArgument(f"no lane {lane[:40]!r}; the lanes are {', '.join(LANES)}")
        return {
            "version": self.version,
            "now": self.now,
            "summary": self.summary,
            "counts": self.counts,
            "lanes": {
                lane: {
                    "offset": offsets.get(lane, 0),
                    "cards": cards[offsets.get(lane, 0) : offsets.get(lane, 0) + LANE_PAGE],
                }
                for lane, cards in self.lanes.items()
            },
            "inbox": {
                "offset": inbox_offset,
                "count": len(self.inbox),
                "requests": self.inbox[inbox_offset : inbox_offset + INBOX_PAGE],
            },
        }
