"""``shepherd watchdog replay``: honest work raises no alarm, and the stuck pattern each rule
must catch still alerts. Each transcript is written here for this project (synthetic events).

The honest patterns are those an agent doing real work shows: reading one file part by part,
re-running a failing test after each edit, a slow model thinking between quick tool calls,
context condensations that fail now and then, the same words said between tool results, and
moving on after the watchdog's rescue message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.watchdog.test_cli import json_lines, run, write_jsonl

TASK = {"kind": "user_input", "text": "fix the date parsing bug", "ts": 0}


def call(command: str, output: str, ts: float, took: float = 0.5, exit_code: int = 0) -> list[Any]:
    """A shell call at ``ts`` and its result ``took`` seconds later."""
    return [
        {"kind": "tool_call", "tool": "bash", "command": command, "ts": ts},
        {
            "kind": "tool_result",
            "tool": "bash",
            "output": output,
            "exit_code": exit_code,
            "ts": ts + took,
        },
    ]


def edit(path: str, ts: float) -> list[Any]:
    return [
        {"kind": "tool_call", "tool": "edit", "args": {"path": path, "old": "a", "new": "b"}},
        {"kind": "tool_result", "tool": "edit", "output": f"edited {path}", "ts": ts},
    ]


def replay(tmp_path: Path, events: list[Any], *settings: str) -> list[dict[str, Any]]:
    options = [x for s in settings for x in ("--set", s)]
    path = write_jsonl(tmp_path / "t.jsonl", [TASK, *events])
    code, out, err = run(["replay", str(path), "--json", *options])
    assert (code, err) == (0, "")
    return json_lines(out)


def alerts(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in lines[:-1] if r["alert"]]


def alerted_reasons(lines: list[dict[str, Any]]) -> set[str]:
    return {reason for r in alerts(lines) for reason in r["reasons"]}


def evidence(line: dict[str, Any], code: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [e for e in line["evidence"] if e["code"] == code]
    (item,) = found
    return item


# --- read_only_loop: one region revisited, not one file read part by part -------------------


def test_reading_one_file_part_by_part_is_not_a_read_only_loop(tmp_path: Path) -> None:
    events: list[Any] = []
    for i in range(10):
        start = 1 + 80 * i
        events += call(f"sed -n '{start},{start + 79}p' src/fields.py", f"part {i}", 10.0 * i)
    for i in range(4):  # the read tool's windows on the same file
        events.append(
            {"kind": "tool_call", "tool": "read", "args": {"path": "src/fields.py", "offset": i}}
        )
        events.append({"kind": "tool_result", "tool": "read", "output": f"window {i}"})
    lines = replay(tmp_path, events)
    assert alerts(lines) == [] and lines[-1]["reasons"] == []


def test_revisiting_one_region_is_still_a_read_only_loop(tmp_path: Path) -> None:
    """The same lines read six times, however spelled (the file changes under the agent, so
    no two outputs are alike and no other rule applies)."""
    events: list[Any] = []
    for i in range(6):
        if i % 2:
            events.append({"kind": "tool_call", "tool": "read", "args": {"path": "src/a.py"}})
            events.append({"kind": "tool_result", "tool": "read", "output": f"v{i}", "ts": i})
        else:
            events += call("cat src/a.py", f"v{i}", float(i))
    lines = replay(tmp_path, events)
    final = lines[-1]
    assert final["reasons"] == ["read_only_loop"] and final["likely_stuck"]
    assert evidence(final, "read_only_loop")["count"] == 6
    assert alerted_reasons(lines) == {"read_only_loop"}


# --- repeated_command: a test re-run after each edit is test-driven work ---------------------

FAILURE = "FAILED tests/test_dates.py::test_parse - AssertionError: assert None == 2020\n1 failed"


def test_a_failing_test_re_run_after_each_edit_is_not_a_repeat(tmp_path: Path) -> None:
    events: list[Any] = []
    for i in range(5):
        events += edit(f"src/dates_{i}.py", 20.0 * i + 1)
        events += call("pytest tests/test_dates.py", FAILURE, 20.0 * i + 5, exit_code=1)
    lines = replay(tmp_path, events)
    assert alerts(lines) == [] and lines[-1]["reasons"] == []


def test_the_same_test_re_run_with_no_edit_between_is_still_a_repeat(tmp_path: Path) -> None:
    events = edit("src/dates.py", 1)
    for i in range(3):
        events += call("pytest tests/test_dates.py", FAILURE, 10.0 * i + 5, exit_code=1)
    lines = replay(tmp_path, events)
    assert "repeated_command" in alerted_reasons(lines)
    assert evidence(lines[-1], "repeated_command")["count"] == 3


# --- no_progress: tools running without an edit, not a model thinking ------------------------


def test_a_slow_model_thinking_between_quick_calls_is_not_idle(tmp_path: Path) -> None:
    """Twelve quick experiments, each after a minute of thinking: 12 minutes without an edit,
    but the tools ran for 12 seconds of it."""
    events: list[Any] = []
    for i in range(12):
        events += call(f"python -c 'print({i} * 2)'", str(i * 2), 60.0 * i + 60, took=1.0)
    lines = replay(tmp_path, events)
    assert alerts(lines) == [] and lines[-1]["reasons"] == []


def test_tools_running_for_long_without_an_edit_are_still_no_progress(tmp_path: Path) -> None:
    events: list[Any] = []
    for i in range(8):  # eight experiments of 90 s each, a second apart: 720 s of tools
        events += call(f"python experiment_{i}.py", f"result {i}", 91.0 * i + 1, took=90.0)
    lines = replay(tmp_path, events)
    final = lines[-1]
    assert final["reasons"] == ["no_progress"] and final["confidence"] == "medium"
    assert alerted_reasons(lines) == {"no_progress"}


# --- a condensation is never a failed action ------------------------------------------------

COMPACTION_FAILED = "context compaction (threshold) failed: quota exceeded"


def test_failed_condensations_are_not_failed_actions(tmp_path: Path) -> None:
    events: list[Any] = []
    for i in range(4):
        events += edit(f"src/mod{i}.py", 10.0 * i + 1)
        events += call("pytest -q", f"{10 + i} passed", 10.0 * i + 3)
        events.append(
            {"kind": "condensation", "text": COMPACTION_FAILED, "is_error": True, "ts": 10 * i + 5}
        )
    for i in range(3):  # different commands failing with one error, a failed compaction each
        events += call(f"python tool_{i}.py", "ModuleNotFoundError: yaml", 50.0 + 3 * i, 0.5, 1)
        events.append({"kind": "condensation", "text": COMPACTION_FAILED, "is_error": True})
    lines = replay(tmp_path, events)
    final = lines[-1]
    # the three failing calls are one error streak; no condensation made it longer
    assert final["reasons"] == ["error_streak"]
    assert evidence(final, "error_streak")["count"] == 3
    assert final["calls"] == 11


def test_condensations_back_to_back_are_still_a_loop(tmp_path: Path) -> None:
    events = [
        {"kind": "condensation", "text": COMPACTION_FAILED, "is_error": True, "ts": i}
        for i in range(10)
    ]
    lines = replay(tmp_path, events)
    assert lines[-1]["reasons"] == ["condensation_loop"]
    assert alerted_reasons(lines) == {"condensation_loop"}


# --- identical agent messages count only while no tool result comes between ----------------

SAID = "Let me run the date tests again."


def test_the_same_words_between_tool_results_are_not_a_monologue(tmp_path: Path) -> None:
    events: list[Any] = []
    for i in range(4):
        events.append({"kind": "message", "text": SAID, "ts": 10 * i})
        events += call(f"pytest tests/test_dates.py -k case{i}", f"{i} passed", 10.0 * i + 1)
    for identical in ("monologue.match=identical", "monologue.match=any"):
        lines = replay(tmp_path, events, identical)
        assert alerts(lines) == [] and lines[-1]["reasons"] == []


def test_the_same_words_with_no_tool_result_between_are_a_monologue(tmp_path: Path) -> None:
    """A call that never answered gave the agent nothing new: the words still repeat."""
    events: list[Any] = []
    for i in range(3):
        events.append({"kind": "message", "text": SAID, "ts": 10 * i})
        events.append({"kind": "tool_call", "tool": "bash", "command": "pytest", "ts": 10 * i + 1})
    lines = replay(tmp_path, events, "monologue.match=identical")
    assert lines[-1]["reasons"] == ["monologue"]
    assert alerted_reasons(lines) == {"monologue"}
    assert evidence(lines[-1], "monologue")["count"] == 3


# --- after the rescue message -----------------------------------------------------------------

RESCUE = {"kind": "rescue", "text": "You appear to be stuck in a loop.", "ts": 40}


def stuck_then_nudged() -> list[Any]:
    """The same test failing three times (stuck at the threshold), then the nudge."""
    events: list[Any] = []
    for i in range(3):
        events += call("pytest tests/test_dates.py", FAILURE, 10.0 * i + 1, exit_code=1)
    return [*events, RESCUE]


def test_at_the_threshold_the_agent_is_nudged_and_going_on_is_stuck_beyond_it(
    tmp_path: Path,
) -> None:
    events = [*stuck_then_nudged()]
    events += call("pytest tests/test_dates.py", FAILURE, 120.0, exit_code=1)  # after cooldown
    lines = replay(tmp_path, events)
    by_line = {r["line"]: r for r in lines[:-1]}
    nudge_line = 1 + len(stuck_then_nudged())  # after the task line (lines are 1-based)
    assert by_line[nudge_line - 1]["alert"] is True  # the third failure: stuck at T
    assert by_line[nudge_line]["kind"] == "rescue"
    assert by_line[nudge_line]["alert"] is False  # the nudge itself ends nothing, adds nothing
    assert by_line[nudge_line]["likely_stuck"] is True
    final = lines[-1]
    assert final["likely_stuck"] is True  # the fourth failure: beyond the threshold
    assert evidence(final, "repeated_command")["count"] == 4
    assert lines[-2]["alert"] is True
    assert final["episode_started_at"] == 0


def test_after_the_nudge_another_command_ends_the_episode(tmp_path: Path) -> None:
    events = [*stuck_then_nudged()]
    events += call("cat tests/test_dates.py", "def test_parse(): ...", 50.0)
    events += call("pytest tests/test_dates.py", FAILURE, 60.0, exit_code=1)
    lines = replay(tmp_path, events)
    final = lines[-1]
    assert final["likely_stuck"] is False and final["reasons"] == []
    assert final["episode_started_at"] == 50.0 and final["calls"] == 2
    assert [r["alert"] for r in lines[-4:-1]] == [False, False, False]


def test_after_the_nudge_a_success_ends_the_episode(tmp_path: Path) -> None:
    events = [*stuck_then_nudged()]
    events += call("pytest tests/test_dates.py", "1 passed", 50.0)
    final = replay(tmp_path, events)[-1]
    assert final["likely_stuck"] is False and final["episode_started_at"] == 50.0


def test_after_the_nudge_a_new_error_text_is_the_same_action_failing(tmp_path: Path) -> None:
    events = [*stuck_then_nudged()]
    events += call("pytest tests/test_dates.py", FAILURE + " at line 14", 120.0, exit_code=1)
    final = replay(tmp_path, events)[-1]
    assert final["likely_stuck"] is True and final["episode_started_at"] == 0
    assert evidence(final, "repeated_failure")["count"] == 4
