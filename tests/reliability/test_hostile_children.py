"""Hostile or broken children against a running supervisor (real bridges, real mailbox).

The hostile child is a ``command``-adapter agent whose turn runs ``hostile_child.py``: it
has the genuine ``SHEPHERD_*`` environment of a spawned agent (its own id and capability, the
session mailbox) and uses it to attack. Each case checks that the attack is refused and named
(a typed error to the publisher, a receipt with an error code, or a quarantine entry whose
reason says what was wrong), and that a bystander agent's task completes normally in the same
session. The ``live_supervisor`` fixture asserts that no process of the session outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.records.notifications import AgentMessage
from protocol.records.settings import Settings
from protocol.records.tasks import TaskResult, TaskState
from tests.reliability.live import (
    PLANNER,
    SCOUT,
    Live,
    Story,
    file_mailbox,
    session_pids,
    wait_for_files,
    wait_gone,
    write_script,
)

pytestmark = pytest.mark.processes

HOSTILE = Path(__file__).with_name("hostile_child.py")
WORKER = {
    "steps": [
        {"await": "task"},
        {"sleep": 1.0},
        {"done": {"status": "completed", "summary": "unharmed"}},
        {"await": "any"},
    ]
}


class Arena:
    """One live session: a bystander, maybe a victim, and a hostile agent."""

    def __init__(self, live: Live, tmp: Path) -> None:
        self.sup: Supervisor = live.sup
        self.sink: CollectingSink = live.sink
        self.story: Story = live.story
        self.tmp = tmp
        self.out = tmp / "hostile-out.json"

    def spawn(self, name: str, script: dict[str, Any]) -> str:
        path = write_script(self.tmp, name, script)
        return self.sup.session.spawn(name, script=path).agent_id

    def spawn_hostile(self, attacks: list[str], **plan: Any) -> str:
        plan_path = self.tmp / "plan.json"
        plan_path.write_text(json.dumps({"attacks": attacks, "out": str(self.out), **plan}))
        cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(HOSTILE))} {plan_path} {{message}}"
        return self.sup.session.spawn("mallory", adapter="command", cmd=cmd).agent_id

    def attack(self, timeout: float = 60.0) -> dict[str, Any]:
        """Delegate to the hostile agent (its turn attacks) and return what it recorded."""
        self.sup.session.delegate("mallory", "misbehave")
        assert wait_for_files(self.tmp, self.out.exists, timeout), self.output("mallory")
        data: dict[str, Any] = json.loads(self.out.read_text())
        return data

    def delegate(self, name: str, text: str = "work") -> str:
        return self.sup.session.delegate(name, text).task_id

    def result(self, task_id: str, timeout: float = 30.0) -> TaskResult:
        got = self.sup.session.wait(task_id, timeout_s=timeout)
        assert got.completed, f"{task_id} did not settle: {self.sup.session.status()}"
        return got.completed[0]

    def bystander(self) -> str:
        """Start the bystander on its task (it completes it while the attack goes on)."""
        self.spawn("worker", WORKER)
        return self.delegate("worker")

    def bystander_done(self, task_id: str) -> None:
        result = self.result(task_id)
        assert (result.status, result.text) == ("completed", "unharmed"), result

    @property
    def quarantine(self) -> Path:
        return self.sup.mailbox_root / "quarantine"

    def reasons(self) -> list[dict[str, Any]]:
        found = []
        for path in self.quarantine.iterdir():
            if path.name.endswith(".reason"):
                with contextlib.suppress(ValueError):  # being written right now
                    found.append(json.loads(path.read_bytes()))
        return found

    def reason_for(self, message_id: str, timeout: float = 20.0) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for reason in self.reasons():
                if reason.get("message_id") == message_id or message_id in str(reason["file"]):
                    return reason
            return None

        # the reason is written whole before its entry is renamed in: that rename wakes us
        found = wait_for_files(self.quarantine, find, timeout)
        assert found is not None, f"no quarantine reason for {message_id}"
        return found

    def output(self, name: str) -> list[str]:
        return list(self.sup.session.read(name, 400).lines)

    def wait_output(self, name: str, text: str, timeout: float = 20.0) -> bool:
        """Wait until a line of the agent's output contains ``text``. An agent's output comes
        as runtime envelopes through the parent inbox; each is handed to the broker (which
        passes it to the agent's actor) before its file is renamed into ``cur/``, so a read
        after that rename sees it."""
        cur = file_mailbox(self.sup).inbox_path(PARENT_INBOX) / "cur"
        found = wait_for_files(cur, lambda: any(text in x for x in self.output(name)), timeout)
        return bool(found)

    def delivered_to(self, agent_id: str) -> list[Any]:
        """What the agent's inbox handed over (cur/ keeps the acknowledged envelopes)."""
        cur = file_mailbox(self.sup).inbox_path(agent_id) / "cur"
        return [msgspec.json.decode(p.read_bytes()) for p in sorted(cur.iterdir())]

    def agent_messages(self) -> list[AgentMessage]:
        return [n for n in self.sink.items if isinstance(n, AgentMessage)]


@pytest.fixture
def arena(
    live_supervisor: Callable[..., Live],
    tmp_path: Path,
    report: Counter[str],
) -> Callable[..., Arena]:
    def make(settings: Settings | None = None, sinks: tuple[Any, ...] = ()) -> Arena:
        live = live_supervisor(settings, sinks)
        report["sessions"] += 1
        return Arena(live, tmp_path)

    return make


def test_forged_identity_is_refused_and_the_victim_is_undisturbed(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    a = arena()
    scout = a.spawn("scout", SCOUT)
    a.spawn("planner", PLANNER)
    a.delegate("planner", "plan")
    task = a.delegate("scout", "map")
    a.story.wait(f"scout: task {task} waiting")
    a.spawn_hostile(
        ["forge_sender", "forge_capability", "forge_parent", "done_for_victim"],
        victim_id=scout,
        victim_task=task,
    )
    got = a.attack()

    forged = a.reason_for(got["forge_sender"]["message_id"])
    assert (
        forged["code"] == "forbidden_sender"
        and f"does not match sender {scout}" in (forged["message"])
    )
    guessed = a.reason_for(got["forge_capability"]["message_id"])
    assert (
        guessed["code"] == "forbidden_sender"
        and "capability does not match" in (guessed["message"])
    )
    stolen = got["done_for_victim"]
    assert stolen["accepted"] is False and stolen["code"] == "forbidden_sender", stolen
    assert "belongs to another agent" in stolen["error"]
    parent_only = got["forge_parent"]["message_id"]
    assert a.wait_output("mallory", f"refused {parent_only}: invalid_argument"), a.output("mallory")
    report["hostile_cases"] += 4

    # the victim's wait is untouched: still waiting, then it completes with the real answer
    row = a.sup.session.status("scout").agents[0]
    assert row.task is not None and row.task.state is TaskState.WAITING, row
    a.sup.session.message("planner", "go ahead")
    result = a.result(task)
    assert (result.status, result.text) == ("completed", "explored src/core"), result
    notices = [
        e
        for e in a.delivered_to(scout)
        if e.get("kind") == "notice" and got["forge_sender"]["message_id"] in e.get("text", "")
    ]
    assert notices == [], f"the victim was told about an envelope it never sent: {notices}"


def test_writing_into_another_agents_inbox_is_quarantined_by_it(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    a = arena()
    worker = a.spawn("worker", WORKER)
    a.spawn_hostile(["victim_inbox"], victim_id=worker)
    got = a.attack()
    task = a.delegate("worker")
    for attempt in got["victim_inbox"]:
        assert attempt.get("published"), attempt  # the files went in: the victim must refuse
        reason = a.reason_for(attempt["message_id"])
        assert reason["inbox"] == worker and reason["code"] == "forbidden_sender", reason
        assert "capability does not match this agent" in reason["message"]
        report["hostile_cases"] += 1
    a.bystander_done(task)
    kinds = [e.get("kind") for e in a.delivered_to(worker)]
    assert kinds.count("task") == 1, kinds  # only the parent's real task got through


def test_envelopes_for_another_session_are_quarantined(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    a = arena()
    task = a.bystander()
    a.spawn_hostile(["other_session"])
    got = a.attack()
    for attempt in got["other_session"]:
        reason = a.reason_for(attempt["message_id"])
        assert reason["code"] == "invalid_envelope" and "not ours" in reason["message"], reason
        report["hostile_cases"] += 1
    a.bystander_done(task)


def test_a_flood_is_refused_at_the_limit_and_nothing_accepted_is_lost(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    limit = 20
    # The parent stops draining at the flood's first message until the flood is over, so the
    # limit is met whatever the machine's speed (a fast parent once drained faster than the
    # flooder wrote, and the flood never met the limit).
    release = threading.Event()

    def hold_at_the_flood(note: Any) -> None:
        if isinstance(note, AgentMessage) and "flood" in note.content:
            release.wait(60)

    a = arena(Settings(max_queue_depth=limit), sinks=(hold_at_the_flood,))
    task = a.bystander()
    a.spawn_hostile(
        ["flood"], queue_limit=limit, bursts=20, raw_per_burst=100, publish_per_burst=10
    )
    try:
        got = a.attack(timeout=120)
    finally:
        release.set()
    published = got["flood"]["published"]
    accepted = [p["message_id"] for p in published if p.get("published")]
    refused = [p for p in published if p.get("refused")]
    assert {p["refused"] for p in refused} <= {"limit_exceeded"}, refused
    assert refused, "the flood never met the limit"
    assert all(f"(limit {limit})" in p["error"] for p in refused), refused[0]
    expected = set(accepted) | set(got["flood"]["raw"])

    arrived: set[str] = set()
    seen = 0

    def all_arrived(items: list[Any]) -> bool:  # called as notifications come, under the sink
        nonlocal seen
        arrived.update(n.message_id for n in items[seen:] if isinstance(n, AgentMessage))
        seen = len(items)
        return expected <= arrived

    assert a.sink.wait_for(all_arrived, timeout=120), len(expected - arrived)
    ids = [m.message_id for m in a.agent_messages()]
    assert len(ids) == len(set(ids)), "a message was delivered twice"
    report["hostile_cases"] += 1
    report["flood_accepted"] += len(expected)
    report["flood_refused_at_limit"] += len(refused)
    a.bystander_done(task)
    assert a.sup.session.status().agents  # the parent still answers


def test_ten_megabytes_are_refused_unread(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    a = arena()
    task = a.bystander()
    a.spawn_hostile(["big"])
    published, planted = a.attack()["big"]
    assert (
        published["refused"] == "limit_exceeded"
        and "over the 65536-byte limit" in (published["error"])
    )
    reason = a.reason_for(planted["message_id"])
    assert reason["code"] == "limit_exceeded" and "over the 65536-byte limit" in reason["message"]
    assert reason["message_id"] is None  # refused before it was read
    report["hostile_cases"] += 2
    a.bystander_done(task)


def test_a_symlink_or_a_fifo_in_new_is_quarantined_unopened(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    a = arena()
    task = a.bystander()
    a.spawn_hostile(["symlink_fifo"])
    got = a.attack()["symlink_fifo"]
    link = a.reason_for(got["symlink"])
    fifo = a.reason_for(got["fifo"])
    assert "symbolic link" in link["message"] and "not opened" in link["message"], link
    assert "FIFO" in fifo["message"], fifo
    quarantine = a.sup.mailbox_root / "quarantine"
    assert (quarantine / link["file"]).is_symlink()  # moved as a link, never followed
    report["hostile_cases"] += 2
    a.bystander_done(task)


def test_a_child_dying_mid_write_never_has_it_delivered(
    arena: Callable[..., Arena], report: Counter[str]
) -> None:
    a = arena(Settings(fallback_poll_s=0.2))
    task = a.bystander()
    a.spawn_hostile(["exit_mid_write"])
    got = a.attack()["exit_mid_write"]
    a.bystander_done(task)
    inbox = file_mailbox(a.sup).inbox_path(PARENT_INBOX)
    a.story.wait("mallory: process idle", after=a.story.wait("mallory: process working"))
    assert a.sup.mailbox.wait_drained(10)
    for message_id in (got["half"], got["whole"]):
        assert [n for n in (inbox / "tmp").iterdir() if message_id in n.name], "tmp/ was cleaned?"
        for sub in ("new", "cur"):
            assert not [n for n in (inbox / sub).iterdir() if message_id in n.name], sub
        assert message_id not in {m.message_id for m in a.agent_messages()}
    row = a.sup.session.status("mallory").agents[0]
    assert row.task is not None and row.task.state is TaskState.RUNNING  # a dead turn is not done
    report["hostile_cases"] += 2


@pytest.mark.parametrize("escape", [False, True], ids=["ignores-sigterm", "escapes-its-session"])
def test_a_child_that_keeps_running_after_close_is_killed(
    arena: Callable[..., Arena], report: Counter[str], escape: bool
) -> None:
    a = arena()
    task = a.bystander()
    mallory = a.spawn_hostile(["linger", "escape"] if escape else ["linger"])
    got = a.attack()["linger"]
    pids = [got["pid"], *got["helpers"]]
    assert all(_alive(p) for p in pids)
    a.sup.session.close("mallory")

    gone = wait_gone(
        lambda: [*session_pids(a.sup.session_id, mallory), *(p for p in pids if _alive(p))]
    )
    survivors = [p for p in pids if _alive(p)]
    for pid in survivors:  # never leave them behind, whatever the verdict
        _kill(pid)
    assert gone, f"still running after close: {survivors}"
    report["hostile_cases"] += 1
    a.bystander_done(task)
    a.story.wait("mallory: process exited")
    assert a.sup.session.status("mallory").agents[0].process_state == "exited"
    assert a.sup.session.status("mallory").agents[0].closed


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return ") Z " not in stat


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
