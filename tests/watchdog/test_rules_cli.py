"""Per-rule thresholds at every surface: settings files, ``shepherd watchdog config|set``, the
``watchdog_config`` tool (MCP), ``watchdog replay --set``; and the new patterns alerting the
parent of a simulated session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.session.sinks import CollectingSink
from actors.session.watchdog import session_call
from actors.surfaces.config import load_settings
from actors.testing import SimSession
from protocol.core.errors import InvalidArgument
from protocol.records.notifications import WatchdogAlert
from protocol.watchdog import REASON_CODES, WatchdogConfig, WatchdogConfigError, rule_thresholds
from tests.watchdog.test_cli import json_lines, run, write_jsonl


class Parent:
    """A simulated session and what reached its parent."""

    def __init__(self, settings: Any = None) -> None:
        self.sink = CollectingSink()
        self.session = SimSession.simulated(5, sink=self.sink, settings=settings)

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
def parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    made: list[Parent] = []

    def make(settings: Any = None) -> Parent:
        made.append(Parent(settings))
        return made[-1]

    yield make
    for one in made:
        one.session.shutdown()


# ----------------------------------------------------------------------------- config and set


def test_config_lists_every_rules_threshold(parent: Any) -> None:
    p = parent()
    code, out, _ = p.run("config")
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    for rule in REASON_CODES:
        assert f"{rule}.threshold" in rows, rule
    assert rows["repeated_failure.threshold"] == ["3"]
    assert rows["alternating_cycle.threshold"] == ["3"]
    assert rows["condensation_loop.threshold"] == ["10"]
    assert rows["monologue.match"] == ["any"]
    # a rule with no threshold of its own says which one it uses
    assert rows["repeated_command.threshold"] == ["3", "(from", "repeat_threshold)"]
    assert rows["repeated_typecheck_error.threshold"] == [
        "2",
        "(from",
        "typecheck_repeat_threshold)",
    ]
    p.json("set", "repeat_threshold", "6")
    _, out, _ = p.run("config")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert rows["no_progress.threshold"] == ["6", "(from", "repeat_threshold)"]
    assert rows["monologue.threshold"] == ["3"]  # its own default: not the fallback
    data = p.json("config")
    assert all(f"{rule}.threshold" in data for rule in REASON_CODES)


def test_set_a_rules_threshold_from_the_cli_and_the_tool(parent: Any) -> None:
    p = parent()
    assert p.json("set", "monologue.threshold", "5")["monologue.threshold"] == 5
    code, out, _ = p.run("set", "alternating_cycle.threshold", "4")
    assert (code, out) == (
        0,
        "alternating_cycle.threshold = 4 (this session only; settings files unchanged)\n",
    )
    got = session_call(
        p.session, "watchdog_config", {"key": "empty_responses.threshold", "value": "7"}
    )
    assert got["empty_responses.threshold"] == 7
    data = session_call(p.session, "watchdog_config", {})
    assert (data["monologue.threshold"], data["alternating_cycle.threshold"]) == (5, 4)
    assert p.json("set", "monologue.match", "identical")["monologue.match"] == "identical"


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("monologue.threshold", "0", ">= 1"),
        ("repeated_failure.threshold", "1000001", "<= 1000000"),
        ("condensation_loop.threshold", "1e9", "an integer"),
        ("monologue.match", "fuzzy", "any, identical"),
    ],
)
def test_a_rule_setting_out_of_range_is_invalid_argument_naming_key_and_bound(
    parent: Any, key: str, value: str, bound: str
) -> None:
    p = parent()
    before = p.json("config")
    code, out, _ = p.run("set", key, value, "--json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_argument"
    assert key in error["message"] and bound in error["message"]
    with pytest.raises(WatchdogConfigError) as caught:
        session_call(p.session, "watchdog_config", {"key": key, "value": value})
    assert isinstance(caught.value, InvalidArgument) and bound in caught.value.message
    assert p.json("config") == before  # nothing changed


def test_rule_settings_from_files_and_a_warning_for_one_out_of_range(
    parent: Any, tmp_path: Path
) -> None:
    user = tmp_path / "xdg" / "shepherd" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[watchdog]\nmonologue.threshold = 4\nrepeated_failure.threshold = 0\n")
    project = tmp_path / ".shepherd" / "config.toml"
    project.parent.mkdir()
    project.write_text(
        '[watchdog.monologue]\nmatch = "identical"\n'
        "[watchdog.condensation_loop]\nthreshold = 2000000\n"
    )
    settings, warnings = load_settings()
    assert len(warnings) == 2
    assert warnings[0].startswith(f"{user}: watchdog.repeated_failure.threshold: ")
    assert ">= 1" in warnings[0]
    assert warnings[1].startswith(f"{project}: watchdog.condensation_loop.threshold: ")
    assert "<= 1000000" in warnings[1]
    data = parent(settings).json("config")
    assert data["monologue.threshold"] == 4 and data["monologue.match"] == "identical"
    assert data["repeated_failure.threshold"] == 3  # the bad values were ignored
    assert data["condensation_loop.threshold"] == 10


# ----------------------------------------------------------------------------- replay


def monologue_transcript() -> list[dict[str, Any]]:
    return [
        {"kind": "user_input", "text": "why does the build fail?", "ts": 0},
        {"kind": "message", "text": "Let me think about the linker.", "ts": 1},
        {"kind": "condensation", "text": "context compaction (threshold)", "ts": 2},
        {"kind": "message", "text": "It could be the flags.", "ts": 3},
        {"kind": "output", "text": "[shepherd] message queued as a follow_up", "ts": 4},
        {"kind": "message", "text": "Or the library order.", "ts": 5},
    ]


def test_replay_reads_user_input_and_condensation_and_sets_a_rules_threshold(
    tmp_path: Path,
) -> None:
    path = write_jsonl(tmp_path / "talk.jsonl", monologue_transcript())
    code, out, err = run(["replay", str(path), "--json"])
    assert (code, err) == (0, "")
    lines = json_lines(out)
    assert [r["kind"] for r in lines[:-1]] == [e["kind"] for e in monologue_transcript()]
    final = lines[-1]
    assert set(final) == {
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
    assert final["reasons"] == ["monologue"] and final["events"] == 6 and final["alerts"] == 1
    _, out, _ = run(["replay", str(path), "--json", "--set", "monologue.threshold=4"])
    assert json_lines(out)[-1]["reasons"] == []
    _, out, _ = run(["replay", str(path), "--json", "--set", "watchdog.monologue.match=identical"])
    assert json_lines(out)[-1]["reasons"] == []
    code, out, _ = run(["replay", str(path), "--json", "--set", "monologue.threshold=0"])
    assert code == 2
    message = json_lines(out)[0]["error"]["message"]
    assert "monologue.threshold" in message and ">= 1" in message


def test_replay_from_a_sessions_settings_keeps_its_rule_thresholds(
    parent: Any, tmp_path: Path
) -> None:
    p = parent()
    p.json("set", "monologue.threshold", "4")
    path = write_jsonl(tmp_path / "talk.jsonl", monologue_transcript())
    _, out, _ = run(["replay", str(path), "--json", "--session", "/s"], p.call)
    assert json_lines(out)[-1]["reasons"] == []


# ----------------------------------------------------------------------------- alerts


THINKER: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "Let me think about the linker."},
        {"sleep": 1},
        {"say": "It could be the flags."},
        {"sleep": 1},
        {"say": "Or the library order."},
        {"await": "any"},
    ]
}


def test_a_monologue_alerts_the_parent_and_identical_mode_does_not(parent: Any) -> None:
    p = parent()
    p.session.spawn("thinker", script=THINKER)
    p.session.delegate("thinker", "why does the build fail?")
    p.session.sim.run_all(max_time=30)
    (alert,) = p.alerts()
    assert alert.reasons == ("monologue",) and "3 agent messages in a row" in alert.text
    quiet = parent()
    quiet.json("set", "monologue.match", "identical")
    quiet.session.spawn("thinker", script=THINKER)
    quiet.session.delegate("thinker", "why does the build fail?")
    quiet.session.sim.run_all(max_time=30)
    assert quiet.alerts() == []


# ----------------------------------------------------------------------------- the manual


def test_the_manual_table_lists_every_rule_with_its_default() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "watchdog.md"
    section = guide.read_text().split("- **Watchdog:**", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("| `")]
    table = {row.split("`")[1]: row.split("|")[2].split()[0] for row in rows}
    defaults = rule_thresholds(WatchdogConfig())
    assert list(table) == list(REASON_CODES)
    assert {code: int(n) for code, n in table.items()} == defaults
