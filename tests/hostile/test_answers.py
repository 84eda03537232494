"""Defect 2: answers over the 64 KiB frame were dropped and the CLI blamed the session.

``status`` with many agents, ``status AGENT`` with a 30 KB task text and ``read --lines 2000``
on a chatty agent waited 30 s and printed ``session_unavailable``. Now every answer that can
grow is bounded by design (status paged, texts previewed with their full length, read paged
with a cursor), and an answer that still cannot be sent is ``limit_exceeded`` at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from protocol.calls.answers import fit_answer
from protocol.core.limits import PREVIEW_CHARS, answer_budget
from protocol.records.settings import Settings
from tests.processes.conftest import cli

from .conftest import Live

pytestmark = pytest.mark.processes

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}
#: 2,000 numbered lines of 100 characters, said in 40 turns' worth of output
CHATTY = {
    "steps": [
        {"await": "task"},
        *(
            {"say": "\n".join(f"{n:04d} " + "c" * 95 for n in range(k * 50, k * 50 + 50))}
            for k in range(40)
        ),
        {"say": "chatty: all said"},
        {"await": "any"},
    ]
}


def _spawn(live: Live, name: str, script: Mapping[str, object]) -> None:
    path = live.root / f"{name}.json"
    path.write_text(json.dumps(script))
    live.sup.call("spawn", {"name": name, "script": str(path)})


@pytest.fixture
def small_frame(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A session whose envelopes are 8 KiB: a dozen agents overflow one status answer."""
    running = Live(tmp_path, Settings(max_envelope_bytes=8 * 1024))
    try:
        yield running
    finally:
        running.close()


def test_cli_status_pages_through_more_agents_than_one_answer_holds(small_frame: Live) -> None:
    names = [f"agent{n:02d}" for n in range(24)]
    for name in names:
        _spawn(small_frame, name, IDLE)
        small_frame.sup.call("delegate", {"target": name, "task": f"{name}: " + "t" * 300})
    whole = small_frame.sup.call("status", {})
    page = fit_answer(whole, answer_budget(small_frame.sup.settings.max_envelope_bytes))
    assert page.next_cursor is not None, "the test must overflow one page"
    _, data = cli("status", session=small_frame.session)
    assert [a["name"] for a in data["agents"]] == names
    assert data["next_cursor"] is None and data["summary"]["agents"] == 24
    code, text = _text("status", session=small_frame.session)
    assert code == 0 and all(name in text for name in names)
    assert "24 agents" in text
    _, top = cli("top", "--once", session=small_frame.session)
    assert top["summary"]["agents"] == 24
    small_frame.canary.check()


def _text(*args: str, session: Path) -> tuple[int, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.entry", *args, "--session", str(session)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_status_of_an_agent_with_a_30_kb_task_shows_a_preview_and_the_length(live: Live) -> None:
    _spawn(live, "idle", IDLE)
    text = "spec " * 6000  # 30,000 characters
    live.sup.call("delegate", {"target": "idle", "task": text})
    _, data = cli("status", "idle", session=live.session)
    task = data["agents"][0]["task"]
    assert task["description_chars"] == len(text)
    assert len(task["description"]) < PREVIEW_CHARS + 40
    code, human = _text("status", "idle", session=live.session)
    assert code == 0 and "idle" in human


def test_read_2000_lines_of_a_chatty_agent_comes_back_whole_and_in_order(tmp_path: Path) -> None:
    live = Live(tmp_path, Settings(output_lines=2100))  # room for every line it says
    try:
        _read_a_chatty_agent(live)
    finally:
        live.close()


def _read_a_chatty_agent(live: Live) -> None:
    _spawn(live, "chatty", CHATTY)
    live.sup.call("delegate", {"target": "chatty", "task": "talk"})
    working = live.story.wait("chatty: process working")
    live.story.wait("chatty: process idle", after=working)  # its turn, and its talk, ended
    page = live.sup.call("read", {"agent": "chatty", "lines": 2000})
    _, data = cli("read", "chatty", "--lines", "2001", session=live.session)
    lines = data["lines"]
    assert len(lines) == 2001
    assert lines[-1] == "chatty: all said"
    assert [int(x[:4]) for x in lines[:-1]] == list(range(2000))
    assert len(page.lines) == 2000  # in-process: no frame, one page
    code, human = _text("read", "chatty", "--lines", "2000", session=live.session)
    assert code == 0 and human.count("\n") >= 2000


def test_an_answer_that_cannot_be_cut_is_limit_exceeded_at_once(tmp_path: Path) -> None:
    tiny = Live(tmp_path, Settings(max_envelope_bytes=1024))
    try:
        _spawn(tiny, "idle", IDLE)
        tiny.sup.call("delegate", {"target": "idle", "task": "short"})
        started = time.monotonic()
        code, data = cli("status", session=tiny.session, check=False)
        took = time.monotonic() - started
        assert code == 2 and data["error"]["code"] == "limit_exceeded", data
        assert took < 20, f"the refusal took {took:.1f}s: it waited for a time-out"
    finally:
        tiny.close()
