"""``shepherd watchdog ...``: replay on transcript files, the watchdog commands against an
in-process simulated session, the session routing, and the loop demo."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.session.watchdog import is_watchdog_call, session_call
from actors.surfaces.config import load_settings
from actors.surfaces.loop_demo import run_loop_demo
from actors.surfaces.watchdog_cli import (
    add_watchdog_parser,
    main,
    parse_set_options,
    run_watchdog,
)
from actors.testing import SimSession
from protocol.core.errors import InvalidArgument
from protocol.records.notifications import WatchdogAlert
from protocol.watchdog import DEFAULT_RESCUE_MESSAGE, WatchdogConfig, WatchdogConfigError

REPO = Path(__file__).resolve().parents[2]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shepherd")
    sub = parser.add_subparsers(dest="command", required=True)
    add_watchdog_parser(sub)
    return parser


def run(
    argv: list[str], call: Callable[[str, dict[str, Any]], Any] | None = None
) -> tuple[int, str, str]:
    args = _parser().parse_args(["watchdog", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = run_watchdog(args, call, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- transcripts

RG_OUTPUT = "src/app.py:12: # TODO: handle the timeout\nsrc/db.py:40: # TODO: retry\n"


def rg_loop(times: int = 3) -> list[dict[str, Any]]:
    """The seed's scenario: the same rg command, the same output, ``times`` times."""
    events: list[dict[str, Any]] = [
        {"kind": "message", "source": "user", "text": "find the TODOs", "ts": 0.0}
    ]
    for i in range(times):
        events.append(
            {"kind": "tool_call", "tool": "bash", "command": "rg -n TODO src", "ts": 10.0 * i + 1}
        )
        events.append(
            {
                "kind": "tool_result",
                "tool": "bash",
                "command": "rg -n TODO src",
                "output": RG_OUTPUT,
                "exit_code": 0,
                "ts": 10.0 * i + 2,
            }
        )
    return events


CLEAN = [
    {"kind": "message", "source": "user", "text": "fix the timeout bug", "ts": 0},
    {"kind": "tool_call", "tool": "bash", "command": "rg -n timeout src", "ts": 1},
    {
        "kind": "tool_result",
        "tool": "bash",
        "command": "rg -n timeout src",
        "output": "src/app.py:12: timeout",
        "ts": 2,
    },
    {"kind": "tool_call", "tool": "read", "args": {"path": "src/app.py"}, "ts": 3},
    {
        "kind": "tool_result",
        "tool": "read",
        "args": {"path": "src/app.py"},
        "output": "def run(): ...",
        "ts": 4,
    },
    {"kind": "tool_call", "tool": "edit", "args": {"path": "src/app.py"}, "ts": 5},
    {
        "kind": "tool_result",
        "tool": "edit",
        "args": {"path": "src/app.py"},
        "output": "ok",
        "ts": 6,
    },
    {"kind": "tool_call", "tool": "bash", "command": "pytest -q", "ts": 7},
    {
        "kind": "tool_result",
        "tool": "bash",
        "command": "pytest -q",
        "output": "3 passed",
        "exit_code": 0,
        "ts": 8,
    },
    {"kind": "message", "text": "Fixed: the timeout is now handled.", "ts": 9},
]


def write_jsonl(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.fixture
def rg3(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "rg3.jsonl", rg_loop(3))


# ----------------------------------------------------------------------------- replay


def test_replay_rg_three_times_is_likely_stuck_with_repeated_command(rg3: Path) -> None:
    code, out, err = run(["replay", str(rg3), "--json"])
    assert (code, err) == (0, "")
    lines = json_lines(out)
    assert len(lines) == len(rg_loop(3)) + 1  # one verdict per event, then the final one
    assert [r["line"] for r in lines[:-1]] == list(range(1, 8))
    assert all("final" not in r for r in lines[:-1])
    final = lines[-1]
    assert final["final"] is True
    assert final["likely_stuck"] is True
    assert final["confidence"] in ("medium", "high")
    assert "repeated_command" in final["reasons"]
    (evidence,) = [e for e in final["evidence"] if e["code"] == "repeated_command"]
    assert evidence["commands"] == ["rg -n TODO src"] and evidence["count"] == 3
    assert {"likely_stuck", "confidence", "reasons", "evidence"} <= set(final)
    # the verdict turns exactly at the third result, and the gate alerts once
    assert [r["likely_stuck"] for r in lines[:-1]] == [False] * 6 + [True]
    assert [r["alert"] for r in lines[:-1]] == [False] * 6 + [True]


def test_replay_clean_transcript_is_not_stuck(tmp_path: Path) -> None:
    code, out, _ = run(["replay", str(write_jsonl(tmp_path / "clean.jsonl", CLEAN)), "--json"])
    assert code == 0
    lines = json_lines(out)
    assert len(lines) == len(CLEAN) + 1
    assert not any(r["likely_stuck"] for r in lines)
    assert lines[-1]["final"] is True and lines[-1]["reasons"] == []


def test_replay_set_repeat_threshold_changes_the_outcome(rg3: Path) -> None:
    _, out, _ = run(["replay", str(rg3), "--json", "--set", "repeat_threshold=5"])
    assert json_lines(out)[-1]["likely_stuck"] is False
    _, out, _ = run(["replay", str(rg3), "--json", "--set", "watchdog.repeat_threshold=2"])
    final = json_lines(out)[-1]
    assert final["likely_stuck"] is True
    assert final["evidence"][0]["detail"].startswith("ran 3 times")


def test_replay_set_several_and_bad_keys(rg3: Path) -> None:
    code, out, _ = run(
        ["replay", str(rg3), "--json", "--set", "repeat_threshold=5", "--set", "cooldown_s=1"]
    )
    assert code == 0 and json_lines(out)[-1]["likely_stuck"] is False
    code, out, _ = run(["replay", str(rg3), "--json", "--set", "repeat_treshold=5"])
    assert code == 2
    (error,) = json_lines(out)
    assert error["error"]["code"] == "invalid_argument"
    assert "repeat_treshold" in error["error"]["message"]
    code, out, err = run(["replay", str(rg3), "--set", "repeat_threshold"])
    assert code == 2 and out == "" and "KEY=VALUE" in err
    code, _, err = run(["replay", str(rg3), "--set", "repeat_threshold=lots"])
    assert code == 2 and "repeat_threshold" in err


def test_parse_set_options() -> None:
    config = parse_set_options(["repeat_threshold=4", "alert_mode=both", "enabled=false"])
    assert config == WatchdogConfig(repeat_threshold=4, alert_mode="both", enabled=False)
    base = WatchdogConfig(cooldown_s=5)
    assert parse_set_options([], base) is base
    with pytest.raises(WatchdogConfigError, match="nope"):
        parse_set_options(["nope=1"])


def test_replay_malformed_line_exits_2_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(rg_loop(1)[1])
    path.write_text(f"{good}\n\n{good}\n{{not json\n{good}\n")
    code, out, _ = run(["replay", str(path), "--json"])
    assert code == 2
    (only,) = json_lines(out)  # nothing but the error
    assert only["error"]["code"] == "invalid_argument"
    assert only["error"]["message"].startswith("line 4: ")
    code, out, err = run(["replay", str(path)])
    assert code == 2 and out == "" and "line 4" in err


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('{"kind": "tool_call"}', "line 2: $.tool"),
        ('{"kind": "explode", "tool": "bash"}', "line 2: $.kind"),
        ('{"kind": "tool_result", "tool": "bash", "exit_code": "1"}', "line 2: $.exit_code"),
        ("[1, 2]", "line 2: $"),
    ],
)
def test_replay_bad_fields_name_line_and_field(tmp_path: Path, line: str, named: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(rg_loop(1)[0]) + "\n" + line + "\n")
    code, out, _ = run(["replay", str(path), "--json"])
    assert code == 2
    assert json_lines(out)[0]["error"]["message"].startswith(named)


def test_replay_missing_file_exits_2(tmp_path: Path) -> None:
    code, out, _ = run(["replay", str(tmp_path / "nope.jsonl"), "--json"])
    assert code == 2
    assert "nope.jsonl" in json_lines(out)[0]["error"]["message"]


def test_replay_empty_file_gives_only_the_final_verdict(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    _, out, _ = run(["replay", str(path), "--json"])
    (final,) = json_lines(out)
    assert final["final"] is True and final["likely_stuck"] is False


def test_replay_human_table(rg3: Path) -> None:
    code, out, _ = run(["replay", str(rg3)])
    assert code == 0
    rows = out.splitlines()
    assert rows[0].split()[:3] == ["line", "kind", "tool"]
    assert sum("rg -n TODO src" in r for r in rows) >= 6
    assert "[repeated_command" in rows[7]  # the third result
    assert any(r.startswith("final after 7 events, 1 alert:") for r in rows)
    assert any(r.startswith("verdict: likely stuck (confidence medium)") for r in rows)
    assert any("repeated_command x3 [medium]" in r for r in rows)


def test_the_shipped_example_transcript_is_the_seed_scenario() -> None:
    path = REPO / "scripts" / "watchdog_rg_loop.jsonl"
    assert [json.loads(line) for line in path.read_text().splitlines()] == rg_loop(3)
    code, out, _ = run(["replay", str(path), "--json"])
    assert code == 0 and json_lines(out)[-1]["likely_stuck"] is True


def test_replay_with_session_starts_from_the_sessions_settings(rg3: Path) -> None:
    asked: list[str] = []

    def call(op: str, args: dict[str, Any]) -> Any:
        asked.append(op)
        return {"repeat_threshold": 5, "cooldown_s": 60.0}

    _, out, _ = run(["replay", str(rg3), "--json", "--session", "/some/dir"], call)
    assert asked == ["config"]
    assert json_lines(out)[-1]["likely_stuck"] is False
    _, out, _ = run(["replay", str(rg3), "--json"], call)  # no --session: no call
    assert asked == ["config"] and json_lines(out)[-1]["likely_stuck"] is True


def test_replay_through_main_and_a_real_subprocess(rg3: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.watchdog_cli", "replay", str(rg3), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = json_lines(done.stdout)
    assert len(lines) == 8 and lines[-1]["final"] is True and lines[-1]["likely_stuck"] is True
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "tool_call", "tool": "bash"}\nnot json\n')
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.watchdog_cli", "replay", str(bad), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert json.loads(done.stdout) == {
        "error": {
            "code": "invalid_argument",
            "message": json.loads(done.stdout)["error"]["message"],
        }
    }
    assert json.loads(done.stdout)["error"]["message"].startswith("line 2: ")


def test_main_runs_replay_in_process(rg3: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(rg3), "--json"]) == 0
    assert json_lines(capsys.readouterr().out)[-1]["likely_stuck"] is True


# ----------------------------------------------------------------------------- session commands

LOOPER: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"repeat": {"times": 3, "steps": [{"run": "rg -n TODO src"}, {"sleep": 1}]}},
        {"await": "message"},
        {"repeat": {"times": 3, "steps": [{"run": "rg -n TODO src"}, {"sleep": 1}]}},
        {"await": "any"},
    ]
}


class Harness:
    def __init__(self, session: Session, sink: CollectingSink) -> None:
        self.session = session
        self.sink = sink

    def call(self, op: str, args: dict[str, Any]) -> Any:
        return self.session.watchdog(op, **args)

    def run(self, *argv: str) -> tuple[int, str, str]:
        return run(list(argv), self.call)

    def json(self, *argv: str) -> Any:
        code, out, err = self.run(*argv, "--json")
        assert code == 0, (out, err)
        return json.loads(out)

    def alerts(self) -> list[WatchdogAlert]:
        return [n for n in self.sink.items if isinstance(n, WatchdogAlert)]


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    made: list[Session] = []

    def make(settings: Any = None) -> Harness:
        sink = CollectingSink()
        session = SimSession.simulated(7, sink=sink, settings=settings)
        made.append(session)
        return Harness(session, sink)

    yield make
    for session in made:
        session.shutdown()


def test_status_shows_the_watchdog_loaded_with_its_targets(harness: Any) -> None:
    h = harness()
    data = h.json("status")
    assert data["enabled"] is True and data["paused"] is False
    assert data["alert_mode"] == "main_only" and data["alerts"] == 0
    assert data["rescue_message"] == DEFAULT_RESCUE_MESSAGE
    assert data["targets"] == []
    h.session.spawn("scout", script=LOOPER)
    h.session.spawn("guard", script=LOOPER, description="the watchdog agent")
    h.session.sim.run_all(max_time=1)
    data = h.json("status")
    assert [(t["name"], t["kind"]) for t in data["targets"]] == [
        ("scout", "task"),
        ("guard", "watchdog"),
    ]
    code, out, _ = h.run("status")
    assert code == 0
    assert out.startswith("watchdog: on\nalert mode: main_only   alerts sent: 0\n")
    assert "targets: 2" in out and "scout" in out and "watchdog" in out


def test_config_reflects_the_merged_settings_files(harness: Any, tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "shepherd" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[watchdog]\ncooldown_s = 90\n")
    project = tmp_path / ".shepherd" / "config.toml"
    project.parent.mkdir()
    project.write_text("[watchdog]\nrepeat_threshold = 5\n")
    settings, warnings = load_settings()
    assert warnings == []
    h = harness(settings)
    data = h.json("config")
    assert data == {**_defaults(), "cooldown_s": 90.0, "repeat_threshold": 5}
    code, out, _ = h.run("config")
    assert code == 0
    assert any(line.split() == ["repeat_threshold", "5"] for line in out.splitlines())
    assert any(line.split() == ["cooldown_s", "90.0"] for line in out.splitlines())
    assert any(line.split() == ["enabled", "true"] for line in out.splitlines())


def _defaults() -> dict[str, Any]:
    from protocol.watchdog import config_to_dict

    return config_to_dict(WatchdogConfig())


def test_set_applies_to_this_session_only_and_writes_no_file(harness: Any, tmp_path: Path) -> None:
    before = sorted(p for p in tmp_path.rglob("*"))
    h = harness()
    data = h.json("set", "rescue_message", "Stop", "and", "summarise")
    assert data["rescue_message"] == "Stop and summarise"
    assert h.json("status")["rescue_message"] == "Stop and summarise"
    assert h.json("set", "repeat_threshold", "5")["repeat_threshold"] == 5
    assert h.json("config")["repeat_threshold"] == 5
    code, out, _ = h.run("set", "cooldown_s", "120")
    assert (code, out) == (0, "cooldown_s = 120.0 (this session only; settings files unchanged)\n")
    h.json("set", "rescue_message_override", "session rescue")
    assert h.json("status")["rescue_message"] == "session rescue"
    assert sorted(p for p in tmp_path.rglob("*")) == before  # no settings file was written
    fresh = harness()
    assert fresh.json("config") == _defaults()  # another session: defaults again


def test_set_unknown_key_or_bad_value_is_a_typed_error_naming_the_key(harness: Any) -> None:
    h = harness()
    code, out, _ = h.run("set", "repeat_treshold", "5", "--json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_argument"
    assert "repeat_treshold" in error["message"] and "repeat_threshold" in error["message"]
    code, _, err = h.run("set", "repeat_threshold", "many")
    assert code == 2 and "repeat_threshold" in err and "invalid_argument" in err
    with pytest.raises(WatchdogConfigError, match="repeat_treshold") as info:
        h.session.watchdog("set", key="repeat_treshold", value="5")
    assert info.value.problem == "unknown_key" and info.value.key == "repeat_treshold"
    assert h.json("config") == _defaults()  # nothing changed


def test_pause_suppresses_alerts_and_resume_restores_them(harness: Any) -> None:
    h = harness()
    h.session.spawn("scout", script=LOOPER)
    assert h.json("pause") == {"paused": True}
    code, out, _ = h.run("status")
    assert code == 0 and out.startswith("watchdog: paused")
    h.session.delegate("scout", "find the TODOs")
    h.session.sim.run_all(max_time=30)
    assert h.alerts() == []  # three identical runs while paused: no alert
    assert h.json("inspect", "scout")["verdict"]["likely_stuck"] is True  # detection went on
    code, out, _ = h.run("resume")
    assert (code, out) == (0, "watchdog resumed: alerts are on again\n")
    assert h.json("status")["paused"] is False
    h.session.message("scout", "try again")  # a new instruction: a new evidence window
    h.session.sim.run_all(max_time=30)
    (alert,) = h.alerts()
    assert "repeated_command" in alert.reasons


def test_inspect_shows_events_and_verdict(harness: Any) -> None:
    h = harness()
    h.session.spawn("scout", script=LOOPER)
    h.session.delegate("scout", "find the TODOs")
    h.session.sim.run_all(max_time=30)
    data = h.json("inspect", "scout")
    assert data["name"] == "scout"
    assert data["verdict"]["likely_stuck"] is True
    assert any(e["command"] == "rg -n TODO src" for e in data["events"])
    assert len(h.json("inspect", "scout", "--limit", "2")["events"]) == 2
    code, out, _ = h.run("inspect", "scout")
    assert code == 0
    assert "verdict: likely stuck" in out and "repeated_command" in out
    assert "rg -n TODO src" in out
    code, out, _ = h.run("inspect", "nobody", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "invalid_handle"


def test_commands_other_than_replay_need_a_session() -> None:
    code, out, _ = run(["status", "--json"], None)
    assert code == 2 and "needs a session" in json.loads(out)["error"]["message"]


def test_every_subcommand_takes_json_and_session() -> None:
    parser = _parser()
    for argv in (
        ["status"],
        ["config"],
        ["set", "k", "v"],
        ["pause"],
        ["resume"],
        ["inspect", "a"],
        ["replay", "f"],
    ):
        args = parser.parse_args(["watchdog", *argv, "--json", "--session", "/s"])
        assert args.json is True and args.session == "/s"


# ----------------------------------------------------------------------------- session routing


def test_session_call_routes_cli_calls_and_tool_calls(harness: Any) -> None:
    h = harness()
    s = h.session
    s.spawn("scout", script=LOOPER)
    s.delegate("scout", "go")
    s.sim.run_all(max_time=30)
    assert is_watchdog_call("watchdog") and is_watchdog_call("watchdog_detect_stuck")
    assert not is_watchdog_call("status")
    assert session_call(s, "watchdog", {"op": "status", "args": {}})["enabled"] is True
    assert session_call(s, "watchdog", {"op": "pause"}) == {"paused": True}
    detected = session_call(s, "watchdog_detect_stuck", {"agent": "scout"})
    assert detected["likely_stuck"] is True and "repeated_command" in detected["reasons"]
    events = session_call(s, "watchdog_read_events", {"agent": "scout", "limit": 2})
    assert len(events["events"]) == 2
    assert (
        session_call(s, "watchdog_config", {"key": "cooldown_s", "value": "5"})["cooldown_s"] == 5.0
    )
    assert session_call(s, "watchdog_config", {})["cooldown_s"] == 5.0
    dry = session_call(s, "watchdog_steer_subagent", {"agent": "scout"})
    assert dry["dry_run"] is True and dry["sent"] is False
    targets = session_call(s, "watchdog_list_targets", {})
    assert [t["name"] for t in targets] == ["scout"]
    with pytest.raises(InvalidArgument, match="dry_run"):
        session_call(s, "watchdog_steer_subagent", {"agent": "scout", "dry_run": None})
    with pytest.raises(InvalidArgument, match="op"):
        session_call(s, "watchdog", {"op": "explode"})
    with pytest.raises(InvalidArgument):
        session_call(s, "status", {})


# ----------------------------------------------------------------------------- the loop demo


def test_loop_demo_alerts_once_per_cooldown_window_and_the_task_keeps_running() -> None:
    out = io.StringIO()
    assert run_loop_demo(out) == 0
    text = out.getvalue()
    assert "[Watchdog Alert]" in text
    assert "repeated_command" in text
    assert "still running" in text
    assert "exactly one alert per cooldown window: yes" in text
    assert text.count("[Watchdog Alert]") == 3  # 175 s of looping, a 60 s cooldown
