"""Watchdog replay: the JSON-lines transcript format, verdicts per event, malformed lines."""

from __future__ import annotations

import json

import msgspec
import pytest

from protocol.core.errors import InvalidArgument
from protocol.watchdog import (
    ReplayLineError,
    WatchdogConfig,
    decode_replay_line,
    set_config_value,
)
from protocol.watchdog.replay import replay

RG = "src/app.py:12: def load_config(path):"


def rg_transcript(times: int = 3) -> list[str]:
    lines = [json.dumps({"kind": "message", "source": "user", "text": "find the loader", "ts": 0})]
    for i in range(times):
        lines.append(
            json.dumps(
                {
                    "kind": "tool_call",
                    "tool": "bash",
                    "command": "rg load_config src",
                    "ts": 10 * i + 1,
                }
            )
        )
        lines.append(
            json.dumps(
                {
                    "kind": "tool_result",
                    "tool": "bash",
                    "output": RG,
                    "exit_code": 0,
                    "ts": 10 * i + 2,
                }
            )
        )
    return lines


def test_replay_gives_a_verdict_per_event_and_a_final_verdict() -> None:
    results = replay(rg_transcript())
    assert len(results) == 7 + 1
    assert [r["line"] for r in results[:-1]] == list(range(1, 8))
    assert results[0]["kind"] == "message" and results[1]["tool"] == "bash"
    assert [r["likely_stuck"] for r in results[:-1]] == [False] * 6 + [True]
    final = results[-1]
    assert final["final"] is True
    assert final["likely_stuck"] is True
    assert final["confidence"] in {"medium", "high"}
    assert "repeated_command" in final["reasons"]  # type: ignore[operator]
    evidence = final["evidence"]
    assert isinstance(evidence, list)
    assert evidence[0]["code"] == "repeated_command"
    assert evidence[0]["commands"] == ["rg load_config src"]
    assert evidence[0]["count"] == 3
    assert final["events"] == 7 and final["alerts"] == 1
    assert [r["alert"] for r in results[:-1]].count(True) == 1
    # every verdict is plain JSON
    assert msgspec.json.decode(msgspec.json.encode(results)) == results


def test_replay_accepts_dicts_bytes_and_skips_blank_lines() -> None:
    lines: list[str | bytes | dict[str, object]] = [json.loads(x) for x in rg_transcript()]
    lines.insert(2, "   ")
    lines[3] = json.dumps(lines[3]).encode()
    results = replay(lines)
    assert len(results) == 8
    assert results[-2]["line"] == 8  # the blank line still counts for numbering
    assert results[-1]["likely_stuck"] is True


def test_a_user_message_is_a_new_instruction() -> None:
    lines = rg_transcript()
    lines.append(
        json.dumps({"kind": "message", "source": "user", "output": "try the CLI", "ts": 40})
    )
    results = replay(lines)
    assert results[-2]["likely_stuck"] is False
    assert results[-1]["reasons"] == []


def test_user_input_is_a_kind_of_its_own_and_a_new_instruction() -> None:
    lines = rg_transcript()
    lines.append(json.dumps({"kind": "user_input", "text": "try the CLI", "ts": 40}))
    results = replay(lines)
    assert results[-2]["kind"] == "user_input"  # each line's kind is as given
    assert results[-2]["likely_stuck"] is False and results[-1]["reasons"] == []
    assert results[-1]["episode_started_at"] == 40.0


FINAL_KEYS = {
    "final",
    "likely_stuck",
    "confidence",
    "reasons",
    "evidence",
    "calls",
    "episode_started_at",
    "events",
    "alerts",
}


def test_condensation_and_output_lines_are_read_and_the_final_line_keeps_its_shape() -> None:
    lines = rg_transcript(2)
    lines.insert(3, json.dumps({"kind": "condensation", "text": "summary", "ts": 5}))
    lines.insert(4, json.dumps({"kind": "output", "text": "error: retrying", "ts": 6}))
    lines.append(
        json.dumps({"kind": "condensation", "output": "compaction failed", "is_error": True})
    )
    lines.append(json.dumps({"kind": "tool_call", "tool": "bash", "command": "rg load_config src"}))
    lines.append(json.dumps({"kind": "tool_result", "tool": "bash", "output": RG, "ts": 99}))
    results = replay(lines)
    assert [r["kind"] for r in results[3:5]] == ["condensation", "output"]
    final = results[-1]
    assert set(final) == FINAL_KEYS
    assert final["events"] == 10 and final["calls"] == 3
    assert final["reasons"] == ["repeated_command", "read_only_loop"]  # not progress


def test_agent_messages_are_not_instructions() -> None:
    lines = rg_transcript()
    lines.insert(3, json.dumps({"kind": "message", "text": "searching again", "ts": 5}))
    assert replay(lines)[-1]["likely_stuck"] is True


def test_error_events_are_failed_results() -> None:
    lines: list[dict[str, object]] = []
    for i, command in enumerate(["python app.py", "python -m app", "pytest"]):
        lines.append({"kind": "tool_call", "tool": "bash", "command": command})
        lines.append({"kind": "error", "tool": "bash", "output": "No module named 'yaml'", "ts": i})
    final = replay(lines)[-1]
    assert final["reasons"] == ["error_streak"]


def test_nonzero_exit_code_fails_a_result() -> None:
    lines: list[dict[str, object]] = []
    for command in ["python app.py", "python -m app", "pytest"]:
        lines.append({"kind": "tool_call", "tool": "bash", "command": command})
        lines.append({"kind": "tool_result", "tool": "bash", "output": "boom", "exit_code": 1})
    assert replay(lines)[-1]["reasons"] == ["error_streak"]


def test_missing_ts_uses_the_line_index_as_seconds() -> None:
    lines: list[dict[str, object]] = [
        {"kind": "tool_call", "tool": "bash", "command": "ls"} for _ in range(3)
    ]
    results = replay(lines)
    assert results[0]["episode_started_at"] == 0.0
    results = replay([{"kind": "message", "text": "x"}, *lines])
    assert results[-1]["episode_started_at"] == 0.0
    lines = [{"kind": "message", "source": "user", "text": "go"} for _ in range(3)]
    assert replay(lines)[-1]["episode_started_at"] == 2.0


def test_final_now_lets_time_pass_after_the_last_event() -> None:
    lines: list[dict[str, object]] = []
    for i in range(4):  # four experiments running 90 s each: 360 s of tools, no write
        lines.append(
            {"kind": "tool_call", "tool": "bash", "command": f"python exp{i}.py", "ts": 100.0 * i}
        )
        lines.append(
            {"kind": "tool_result", "tool": "bash", "output": str(i), "ts": 100.0 * i + 90}
        )
    reasons = replay(lines)[-1]["reasons"]
    assert isinstance(reasons, list) and "no_progress" in reasons
    late = replay(lines, final_now=2000.0)[-1]
    assert late["reasons"] == []  # quiet for long: idle, not looping


def test_settings_apply_to_replay() -> None:
    config = set_config_value(WatchdogConfig(), "repeat_threshold", "4")
    final = replay(rg_transcript(), config)[-1]
    assert final["likely_stuck"] is False
    assert final["alerts"] == 0


def test_structured_tools_with_args_and_call_ids() -> None:
    lines: list[dict[str, object]] = []
    for i in range(3):
        lines.append(
            {"kind": "tool_call", "tool": "read", "args": {"path": "a.py"}, "call_id": f"c{i}"}
        )
        lines.append({"kind": "tool_result", "tool": "read", "output": "same", "call_id": f"c{i}"})
    final = replay(lines)[-1]
    evidence = final["evidence"]
    assert isinstance(evidence, list)
    assert evidence[0]["commands"] == ["read a.py"]


def test_unknown_fields_are_ignored() -> None:
    line = {"kind": "tool_call", "tool": "bash", "command": "ls", "tokens": 12, "agent": "x"}
    assert decode_replay_line(line, 1).command == "ls"


def test_messages_may_leave_out_the_tool() -> None:
    assert decode_replay_line('{"kind": "message", "text": "hi"}', 1).tool == ""


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        ("{not json", "$", "JSON"),
        ("[1, 2]", "$", "object"),
        ('{"tool": "bash"}', "$", "kind"),
        ('{"kind": "thinking", "tool": "bash"}', "$.kind", "thinking"),
        ('{"kind": "tool_result", "tool": "bash", "exit_code": "1"}', "$.exit_code", "int"),
        ('{"kind": "tool_call", "tool": 3}', "$.tool", "str"),
        ('{"kind": "tool_call", "tool": "bash", "ts": "noon"}', "$.ts", "float"),
        ('{"kind": "message", "source": "parent"}', "$.source", "parent"),
        ('{"kind": "condensation", "is_error": "no"}', "$.is_error", "bool"),
        ('{"kind": "compaction"}', "$.kind", "compaction"),
        ('{"kind": "tool_call"}', "$.tool", "required"),
        ('{"kind": "error", "tool": ""}', "$.tool", "required"),
    ],
)
def test_malformed_lines_name_the_line_and_field(raw: str, field: str, reason: str) -> None:
    lines = [*rg_transcript(1), raw]
    with pytest.raises(ReplayLineError) as caught:
        replay(lines)
    err = caught.value
    assert err.line == 4
    assert err.field == field
    assert reason.lower() in err.reason.lower()
    assert str(err).startswith(f"line 4: {field}: ")
    assert isinstance(err, ValueError) and isinstance(err, InvalidArgument)


def test_a_non_object_parsed_line_is_malformed() -> None:
    with pytest.raises(ReplayLineError) as caught:
        replay([["not", "an", "object"]])  # type: ignore[list-item]
    assert caught.value.line == 1 and caught.value.field == "$"


def test_empty_transcript_gives_only_a_final_verdict() -> None:
    assert replay([]) == [
        {
            "final": True,
            "likely_stuck": False,
            "confidence": "none",
            "reasons": [],
            "evidence": [],
            "calls": 0,
            "episode_started_at": None,
            "events": 0,
            "alerts": 0,
        }
    ]
