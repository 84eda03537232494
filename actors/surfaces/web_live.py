"""The board's side of the session: its calls (off the event loop, checked against the
operation table first), the snapshot kept fresh, and the notifications' follower.

Rules:

1. **Calls through the table.** Every call is built with its operation's Args Struct
   (``protocol.ops``) before the session is asked: the same bounds as the command line. The
   page may run only :data:`WEB_OPS`; the board itself reads with :data:`READS`.
2. **Fresh on a wake-up, not on a clock.** The snapshot is made again when the follower says
   something changed (a notification, the journal growing, an action from the page), at most
   once per :data:`REFRESH_GAP_S`; an idle session is never asked anything. When a snapshot
   changed what is shown, every stream gets a ``board`` event with its version and counts.
3. **Watched.** Every open task the board shows is watched (in calls of at most
   :data:`WATCH_CHUNK` ids), so that its end is a notification; a task delegated from the page
   is delegated and watched in one call (``delegate_many`` of one item, with ``watch``), so
   that one ending at once is no exception.
4. A snapshot that fails keeps the last one shown and says why (``error``); the next wake-up
   tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from actors.records.session_info import SessionInfo
from actors.surfaces.web_board import Snapshot
from actors.surfaces.web_feed import Feed
from protocol import ops
from protocol.core.errors import ErrorInfo, InvalidArgument, ShepherdError, error_from_info

__all__ = ["READS", "REFRESH_GAP_S", "WEB_OPS", "Live"]

#: the operations the page may run (rule 1)
WEB_OPS = frozenset({"approve", "deny", "message", "delegate", "cancel", "close"})
#: the operations the board reads with (rule 1)
READS = frozenset({"status", "result", "watch", "watchdog_detect_stuck"})
#: a snapshot starts at most this often (rule 2)
REFRESH_GAP_S = 0.2
#: ids per watch call (rule 3): each completion of a watcher lists its ids and those still
#: pending, so a watcher of a few keeps every completion notification small
WATCH_CHUNK = 20


def _journal(info: SessionInfo) -> Path | None:
    """The journal's file, for a session whose records are files (a wake-up only)."""
    return Path(info.journal) if info.records == "file" and info.journal else None


class Live:
    """One per board process: the session's calls, the snapshot, the feed."""

    def __init__(self, info: SessionInfo) -> None:
        from actors.surfaces.client import Client

        self.info = info
        self._client = Client(info)
        self.snapshot = Snapshot()
        self.feed = Feed(Path(info.notifications), _journal(info), self.stale)
        #: the open tasks this board watches (rule 3)
        self.watched: set[str] = set()
        #: why the last snapshot failed, if it did (rule 4)
        self.error: ShepherdError | None = None
        self._stale = asyncio.Event()
        self.ready = asyncio.Event()

    def stale(self) -> None:
        """Something changed: make the snapshot again soon (rule 2)."""
        self._stale.set()

    async def call(self, op: str, fields: Mapping[str, Any]) -> Any:
        """One of the session's operations, checked by the table first (rule 1)."""
        if op not in WEB_OPS and op not in READS:
            raise InvalidArgument(f"the board does not run {op[:40]!r}")
        return await self._run(op, fields)

    async def _run(self, op: str, fields: Mapping[str, Any]) -> Any:
        from actors.surfaces.cli_ops import ANSWER_TIMEOUT_S

        ops.parent_op(op).build(fields)
        return await asyncio.to_thread(
            self._client.call, op, dict(fields), timeout=ANSWER_TIMEOUT_S
        )

    async def act(self, op: str, fields: Mapping[str, Any]) -> Any:
        """One of :data:`WEB_OPS` for the page (rule 3: a delegated task is watched in the
        same call, so that even a task that ends at once ends in a notification)."""
        if op not in WEB_OPS:
            raise InvalidArgument(
                f"the board runs only {', '.join(sorted(WEB_OPS))}, not {op[:40]!r}"
            )
        answer = await (self._delegate(fields) if op == "delegate" else self.call(op, fields))
        self.stale()
        return answer

    async def _delegate(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``delegate``, checked as delegate, run as a ``delegate_many`` of one that watches."""
        ops.parent_op("delegate").build(fields)
        answer = await self._run("delegate_many", {"items": [dict(fields)], "watch": True})
        for error in answer.get("errors") or ():
            raise error_from_info(ErrorInfo(code=error["code"], message=error["message"]))
        (task_id,) = answer["task_ids"]
        self.watched.add(task_id)
        return {"task_id": task_id, "watcher_id": answer.get("watcher_id"), "accepted": True}

    async def _watch(self, ids: list[str]) -> None:
        for start in range(0, len(ids), WATCH_CHUNK):
            chunk = ids[start : start + WATCH_CHUNK]
            await self.call("watch", {"ids": chunk})
            self.watched.update(chunk)

    async def _status_page(self, cursor: int) -> Mapping[str, Any]:
        answer: Mapping[str, Any] = await self.call("status", {"cursor": cursor})
        return answer

    async def refresh(self) -> None:
        """Make the snapshot again; tell the streams when what is shown changed (rule 2);
        then watch the open tasks not watched yet (rule 3)."""
        try:
            changed = await self.snapshot.refresh(self._status_page, self.feed.alerts)
        except ShepherdError as exc:
            self._failed(exc)
            return
        finally:
            self.ready.set()
        self.error = None
        self.feed.names = self.snapshot.names
        if changed:
            self.feed.broadcast(
                "board", {"version": self.snapshot.version, "counts": self.snapshot.counts}
            )
        open_ids = [
            task["task_id"]
            for row in self.snapshot.rows
            if (task := row.get("task")) and not task.get("result")
            if task.get("task_id") not in self.watched
        ]
        try:
            await self._watch(open_ids)
        except ShepherdError as exc:
            self._failed(exc)

    def _failed(self, exc: ShepherdError) -> None:
        self.error = exc
        self.feed.broadcast("board_error", {"code": exc.code, "message": exc.message})

    async def _refresher(self) -> None:
        while True:
            await self._stale.wait()
            self._stale.clear()
            await self.refresh()
            await asyncio.sleep(REFRESH_GAP_S)  # rule 2: at most so often

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The follower and the refresher, for as long as the app serves."""
        await asyncio.to_thread(self.feed.load_alerts)
        self.stale()
        tasks = [
            asyncio.create_task(self.feed.follow(), name="web-follow"),
            asyncio.create_task(self._refresher(), name="web-refresh"),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
