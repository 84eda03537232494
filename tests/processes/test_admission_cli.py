"""Admission from the command line, against a real ``shepherd serve --max-running N`` and real
scripted agents: a task beyond the cap is queued (``status`` shows its place) and handed over
when a slot frees; a queued task is cancelled without its agent hearing of it; a ``kill -9``
of the parent with a queue of 100 tasks keeps the queue and its order; hostile values of
every new flag are refused before anything is sent."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import cli
from tests.reliability.live import write_script

pytestmark = pytest.mark.processes

#: takes a task, finishes it when the parent messages it
FINISHER = {
    "steps": [
        {"await": "task"},
        {"run": "echo working"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "finished {last}"}},
        {"await": "any"},
    ]
}


def _queue(session: Path) -> list[tuple[str, int]]:
    """Every queued task with its place, in the order of the places."""
    found: list[tuple[str, int]] = []
    for agent in cli("status", session=session)[1]["agents"]:  # the command follows the pages
        task = agent.get("task") or {}
        if task.get("state") == "queued":
            found.append((task["task_id"], task["queue_place"]))
    return sorted(found, key=lambda x: x[1])


def test_beyond_the_cap_a_task_waits_and_starts_when_a_slot_frees(
    serve: Any, tmp_path: Path
) -> None:
    serve(None, "--max-running", "2")
    session = tmp_path / "session"
    script = write_script(tmp_path, "finisher", FINISHER)
    cli("spawn-many", "a", "b", "c", "d", "--script", script, session=session)
    first = cli("delegate", "a", "one", session=session)[1]
    cli("delegate", "b", "two", session=session)
    third = cli("delegate", "c", "three", session=session)[1]
    fourth = cli("delegate", "d", "four", "--priority", "5", session=session)[1]
    assert (third["queued"], third["queue_place"]) == (True, 1)
    assert (fourth["queued"], fourth["queue_place"]) == (True, 1)  # ahead: a higher priority
    assert _queue(session) == [(fourth["task_id"], 1), (third["task_id"], 2)]
    summary = cli("status", session=session)[1]["summary"]
    assert (summary["running"], summary["queued"], summary["max_running"]) == (2, 2, 2)

    # a queued task cancelled: its agent never had it
    cli("cancel", third["task_id"], session=session)
    assert _queue(session) == [(fourth["task_id"], 1)]
    # the first finishes: the fourth starts and can be finished in turn
    cli("message", "a", "go", session=session)
    cli("wait", first["task_id"], "--timeout", "60", session=session)
    for _ in range(600):  # each a real CLI round trip, bounded
        row = cli("status", "d", session=session)[1]["agents"][0]
        if row["task"]["state"] == "running":
            break
    assert row["task"]["state"] == "running", row
    cli("message", "d", "go", session=session)
    _, waited = cli("wait", fourth["task_id"], "--timeout", "60", session=session)
    assert waited["completed"][0]["text"] == "finished go"
    # the cancelled one never reached its agent: nothing of it in the agent's output
    lines = cli("read", "c", session=session)[1]["lines"]
    assert not any(third["task_id"] in line for line in lines), lines


def test_a_parent_killed_with_a_queue_of_a_hundred_keeps_it_in_order(
    serve: Any, tmp_path: Path
) -> None:
    server = serve(None, "--max-running", "1")
    session = tmp_path / "session"
    script = write_script(tmp_path, "finisher", FINISHER)
    names = [f"w{i:03d}" for i in range(101)]
    for start in range(0, len(names), 100):  # at most 100 names per call
        cli("spawn-many", *names[start : start + 100], "--script", script, session=session)
    items = [
        {"target": name, "task": f"task {i}", "priority": (i * 7) % 5}
        for i, name in enumerate(names)
    ]
    for start in range(0, len(items), 100):
        args = json.dumps({"items": items[start : start + 100]})
        cli("tool", "shepherd_delegate_many", "--args", args, session=session)
    before = _queue(session)
    assert len(before) == 100 and [p for _, p in before] == list(range(1, 101))

    server.stop(signal.SIGKILL)
    serve(None, "--max-running", "1")
    after = _queue(session)
    assert after == before
    summary = cli("status", session=session)[1]["summary"]
    assert (summary["running"], summary["queued"]) == (1, 100)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--priority", "1001"], "priority"),
        (["--priority", "-5000"], "priority"),
        (["--priority", "x"], "priority"),
        (["--timeout-from", "later"], "timeout-from"),
    ],
)
def test_hostile_delegate_values_are_refused(
    serve: Any, tmp_path: Path, flags: list[str], words: str
) -> None:
    serve(None, "--max-running", "1")
    session = tmp_path / "session"
    cli("spawn", "a", "--script", write_script(tmp_path, "f", FINISHER), session=session)
    code, answer = cli("delegate", "a", "t", *flags, session=session, check=False)
    assert code == 2 and answer["error"]["code"] == "invalid_argument", answer
    assert words in answer["error"]["message"]
    assert cli("status", "a", session=session)[1]["agents"][0].get("task") is None
