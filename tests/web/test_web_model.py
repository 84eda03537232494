"""The board's model without a session: lanes and cards from status rows, a snapshot of 1,000
agents paged with exact counts, time in state, the notifications' filters and backlog, a
task's note."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from actors.surfaces.web_board import INBOX_PAGE, LANE_PAGE, LANES, Snapshot, card, lane_of
from actors.surfaces.web_feed import (
    MAX_EVENT_BYTES,
    Feed,
    Filters,
    bounded,
    filters,
    named,
    newest,
)
from actors.surfaces.web_task import note_parts, read_note
from protocol.core.errors import InvalidArgument, InvalidHandle
from protocol.core.ids import PARENT_ID

pytestmark = pytest.mark.timeout(60)


def _agent(i: int, lane: str, now: float = 1000.0) -> dict[str, Any]:
    """A status row of agent ``i`` in ``lane``."""
    row: dict[str, Any] = {
        "agent_id": f"shepherd-agent-{i:016x}",
        "name": f"a{i}",
        "process_state": "idle",
        "last_active_at": now - 50,
    }
    task: dict[str, Any] = {
        "task_id": f"shepherd-task-{i:016x}",
        "state": "running",
        "description": f"task {i}",
        "created_at": now - 100 + i % 7,
        "pending_requests": [],
    }
    if lane == "needs_parent":
        ask: dict[str, Any] = {"request_id": f"shepherd-message-{i:016x}", "target_id": PARENT_ID}
        task |= {"state": "waiting", "waiting_since": now - 30, "pending_requests": [ask]}
        ask |= {"state": "pending", "created_at": now - 20 - i % 5, "kind": "approval"}
    elif lane == "waiting_peer":
        task |= {"state": "waiting", "waiting_since": now - 40}
    elif lane == "queued":
        task |= {"state": "queued", "queue_place": 1 + i % 3}
    elif lane == "idle":
        task |= {"state": "completed", "result": {"status": "completed", "completed_at": now - 9}}
    elif lane == "exited":
        row["process_state"] = "exited"
    row["task"] = task
    return row


def _fetch(rows: list[dict[str, Any]], page: int = 37, now: float = 1000.0) -> Any:
    """status's pages over ``rows``, ``page`` agents each (cut as the session cuts them)."""

    async def fetch(cursor: int) -> Mapping[str, Any]:
        more = cursor + page < len(rows)
        return {
            "now": now,
            "agents": rows[cursor : cursor + page],
            "next_cursor": cursor + page if more else None,
            "summary": {"agents": len(rows)},
        }

    return fetch


def test_every_lane_from_a_status_row() -> None:
    assert lane_of({"closed": True}) == "exited"
    assert lane_of({"process_state": "exited"}) == "exited"
    assert lane_of({"process_state": "idle"}) == "idle"
    for lane in LANES:
        assert lane_of(_agent(1, lane)) == lane


def test_a_snapshot_of_1000_agents_is_paged_with_exact_counts() -> None:
    lanes = ["working"] * 400 + ["idle"] * 300 + ["needs_parent"] * 120 + ["exited"] * 180
    rows = [_agent(i, lane) for i, lane in enumerate(lanes)]
    snapshot = Snapshot()
    assert asyncio.run(snapshot.refresh(_fetch(rows)))
    assert snapshot.counts == {
        "needs_parent": 120,
        "working": 400,
        "waiting_peer": 0,
        "queued": 0,
        "idle": 300,
        "exited": 180,
    }
    page = snapshot.page({"working": 350})
    assert page["counts"]["working"] == 400
    assert len(page["lanes"]["working"]["cards"]) == 400 - 350
    assert len(page["lanes"]["idle"]["cards"]) == LANE_PAGE
    assert page["inbox"]["count"] == 120
    assert len(page["inbox"]["requests"]) == INBOX_PAGE
    seen = {c["name"] for o in range(0, 400, LANE_PAGE) for c in _cards(snapshot, "working", o)}
    assert len(seen) == 400  # every card once, over the pages
    # the longest waiting first in needs_parent and the inbox
    asked = [r["created_at"] for r in snapshot.inbox]
    assert asked == sorted(asked)
    with pytest.raises(InvalidArgument, match="no lane"):
        snapshot.page({"nope": 0})


def _cards(snapshot: Snapshot, lane: str, offset: int) -> list[dict[str, Any]]:
    cards: list[dict[str, Any]] = snapshot.page({lane: offset})["lanes"][lane]["cards"]
    return cards


def test_the_version_grows_only_when_what_is_shown_changed() -> None:
    rows = [_agent(i, "working") for i in range(10)]
    snapshot = Snapshot()
    asyncio.run(snapshot.refresh(_fetch(rows)))
    version = snapshot.version
    assert not asyncio.run(snapshot.refresh(_fetch(rows, now=1010.0)))
    assert snapshot.version == version
    rows[3] = _agent(3, "idle")
    assert asyncio.run(snapshot.refresh(_fetch(rows, now=1020.0)))
    assert snapshot.version == version + 1
    assert snapshot.counts["idle"] == 1


def test_time_in_state_is_the_sessions_own_or_when_the_board_saw_it() -> None:
    snapshot = Snapshot()
    rows = [_agent(0, "working"), _agent(1, "needs_parent"), _agent(2, "idle")]
    asyncio.run(snapshot.refresh(_fetch(rows)))
    since = {c["name"]: c["since"] for cards in snapshot.lanes.values() for c in cards}
    assert since == {"a0": 900.0, "a1": 979.0, "a2": 991.0}  # created, asked, settled
    rows[0] = _agent(0, "waiting_peer")  # waiting since 960: the session says when
    rows[2] = {**_agent(2, "working"), "task": {**_agent(2, "working")["task"], "task_id": "t2"}}
    asyncio.run(snapshot.refresh(_fetch(rows, now=1005.0)))
    since = {c["name"]: c["since"] for cards in snapshot.lanes.values() for c in cards}
    assert since == {"a0": 960.0, "a1": 979.0, "a2": 1005.0}  # a2: seen moving at 1005


def test_a_card_has_its_numbers_budget_watchdog_and_worktree() -> None:
    row = _agent(5, "idle")
    row["task"]["usage"] = {"turns": 3, "tokens": 1200, "cost": 0.25}
    row["task"]["budget"] = {"max_turns": 10, "max_cost": 1.0}
    row["branch"], row["changed_files"] = "shepherd/s/a5", 4
    overlap = {"agent": "a6", "branch": "b6", "files": [f"f{i}" for i in range(9)], "count": 9}
    files = [f"src/{i}.py" for i in range(20)]
    changes = {"branch": "shepherd/s/a5", "files": files, "count": 20, "overlaps": [overlap]}
    row["task"]["result"] |= {"changes": changes, "text": "x" * 5000}
    alert = {"confidence": "high", "reasons": ["same command 6 times"], "created_at": 990.0}
    shown = card(row, "idle", 991.0, alert)
    assert shown["usage"] == {"turns": 3, "tokens": 1200, "cost": 0.25}
    assert shown["budget"] == {"max_turns": 10, "max_cost": 1.0}
    assert shown["watchdog"]["confidence"] == "high"
    assert shown["worktree"]["changed_files"] == 4
    assert len(shown["worktree"]["files"]) == 5
    assert shown["worktree"]["files_count"] == 20
    assert shown["worktree"]["overlaps"][0]["agent"] == "a6"
    assert len(shown["worktree"]["overlaps"][0]["files"]) == 5
    assert len(shown["task"]["result"]["text"]) <= 200
    assert len(json.dumps(shown)) < 4000  # a card never grows with its task


def _write(path: Path, notes: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(n) + "\n" for n in notes))


NOTES: list[dict[str, Any]] = [
    {"kind": "notice", "code": "approval_requested", "agent_id": "shepherd-agent-00000001",
     "task_id": "shepherd-task-00000001", "refs": ["shepherd-message-00000009"], "text": "ok?"},
    {"kind": "agent_message", "sender_id": "shepherd-agent-00000002", "sender_name": "b",
     "content": "hi", "task_id": "shepherd-task-00000002"},
    {"kind": "task_completion", "ids": ["shepherd-task-00000001"], "results": [
        {"task_id": "shepherd-task-00000001", "agent_id": "shepherd-agent-00000001",
         "agent_name": "a", "status": "completed"}]},
]  # fmt: skip


def test_filters_are_checked_and_match_by_agent_task_and_kind() -> None:
    ids = {"a": "shepherd-agent-00000001"}
    by_agent = filters({"agent": "a"}, ids)
    assert [n["kind"] for n in NOTES if by_agent.passes(n)] == ["notice", "task_completion"]
    by_task = filters({"task": "shepherd-task-00000002"})
    assert [n["kind"] for n in NOTES if by_task.passes(n)] == ["agent_message"]
    by_code = filters({"kind": "approval_requested"})
    assert [n["kind"] for n in NOTES if by_code.passes(n)] == ["notice"]
    for bad in ({"agent": "Robert'); DROP"}, {"task": "t-1"}, {"kind": "<b>"}, {"kind": "k" * 999}):
        with pytest.raises(InvalidArgument):
            filters(bad)


def test_the_newest_notifications_are_read_backwards_within_bounds(tmp_path: Path) -> None:
    path = tmp_path / "notifications.jsonl"
    many = [{**NOTES[i % 3], "created_at": float(i)} for i in range(3000)]
    _write(path, many)
    found, whole = newest(path, Filters(kind="agent_message"), 10)
    assert [n["created_at"] for n in found] == [float(i) for i in range(2998, 2968, -3)]
    assert not whole
    before = sum(len(json.dumps(n)) + 1 for n in many[:1500])
    found, _ = newest(path, Filters(), 5, before)
    assert [n["created_at"] for n in found] == [1499.0, 1498.0, 1497.0, 1496.0, 1495.0]
    assert newest(tmp_path / "none.jsonl", Filters(), 5) == ([], True)


def test_a_notification_with_an_agents_id_only_gets_its_name() -> None:
    names = {"shepherd-agent-00000001": "a"}
    assert named(NOTES[0], names)["agent_name"] == "a"
    assert "agent_name" not in NOTES[0]  # a copy, never the original
    assert named(NOTES[1], names) is NOTES[1]
    unknown = {"kind": "x", "agent_id": "shepherd-agent-00000009"}
    assert "agent_name" not in named(unknown, names)


def test_a_huge_notification_is_cut_not_broken() -> None:
    huge = {"kind": "agent_message", "content": "x" * (MAX_EVENT_BYTES * 3), "task_id": "t"}
    text = bounded(huge)
    assert len(text) <= MAX_EVENT_BYTES
    assert json.loads(text)["cut"] is True


def test_the_follower_hands_each_new_notification_to_the_streams_that_want_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "notifications.jsonl"
    _write(path, NOTES[:1])
    woken: list[int] = []
    feed = Feed(path, None, lambda: woken.append(1))
    everything = feed.open(Filters())
    only_b = feed.open(Filters(agent=frozenset({"b"})))
    board_only = feed.open(Filters(), notifications=False)
    with path.open("a") as f:
        f.write(json.dumps(NOTES[1]) + "\n" + json.dumps(NOTES[2])[:20])  # a line half written
    feed.tick()
    assert everything.queue.qsize() == 1
    assert only_b.queue.qsize() == 1
    assert board_only.queue.qsize() == 0
    assert woken == [1]
    with path.open("a") as f:
        f.write(json.dumps(NOTES[2])[20:] + "\n")
    feed.tick()
    assert everything.queue.qsize() == 2
    assert only_b.queue.qsize() == 1
    feed.broadcast("board", {"version": 2})
    assert board_only.queue.get_nowait() == ("board", '{"version": 2}')


def test_a_note_is_read_by_its_id_only_and_never_through_a_link(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    task_id = "shepherd-task-0123456789abcdef"
    text = f"# Task {task_id}\n\n- agent: a (x)\n\n## Description\n\nline one\n\n"
    text += "## Log\n\n- asked b\n"
    (artifacts / f"{task_id}.md").write_text(text)
    note, cut = read_note(artifacts, task_id)
    assert (note, cut) == (text, False)
    assert note_parts(text) == {"description": "line one", "log": ["asked b"], "agent": "a (x)"}
    for bad in ("../session", "shepherd-task-../../x", "shepherd-agent-0123456789abcdef"):
        with pytest.raises(InvalidHandle):
            read_note(artifacts, bad)
    secret = tmp_path / "secret"
    secret.write_text("no")
    linked = "shepherd-task-fedcba9876543210"
    os.symlink(secret, artifacts / f"{linked}.md")
    assert read_note(artifacts, linked) == (None, False)
