"""Watchdog detector rules: every rule positive and negative."""

from __future__ import annotations

from typing import Self

import msgspec
import pytest

from protocol.watchdog import (
    EventSource,
    ToolEvent,
    Verdict,
    WatchdogConfig,
    detect_stuck,
    make_event,
    verdict_to_dict,
)


class Script:
    """A scripted agent: each step starts one second (or ``dt``) after the last event; a call's
    result comes ``took`` seconds after the call."""

    def __init__(self, config: WatchdogConfig | None = None, agent_id: str = "agent-1") -> None:
        self.config = config or WatchdogConfig()
        self.agent_id = agent_id
        self.events: list[ToolEvent] = []
        self.now = 0.0

    def _add(self, dt: float, **fields: object) -> ToolEvent:
        self.now += dt
        event = make_event(
            agent_id=self.agent_id,
            seq=len(self.events),
            ts=self.now,
            config=self.config,
            **fields,  # type: ignore[arg-type]
        )
        self.events.append(event)
        return event

    def run(
        self,
        command: str,
        output: str = "",
        exit_code: int = 0,
        *,
        tool: str = "bash",
        dt: float = 1.0,
        took: float = 0.5,
        args: object = None,
    ) -> Self:
        cmd = None if args is not None else command
        self._add(dt, kind="tool_call", tool=tool, command=cmd, args=args)
        self._add(took, kind="tool_result", tool=tool, output=output, exit_code=exit_code)
        return self

    def start(self, command: str, *, tool: str = "bash", dt: float = 1.0) -> Self:
        self._add(dt, kind="tool_call", tool=tool, command=command)
        return self

    def edit(self, path: str = "src/a.py", *, dt: float = 1.0) -> Self:
        return self.run("", "ok", tool="edit", args={"path": path, "old": "x", "new": "y"}, dt=dt)

    def say(self, text: str, source: EventSource = "agent", *, dt: float = 1.0) -> Self:
        self._add(dt, kind="message", output=text, source=source)
        return self

    def wait(self, seconds: float) -> Self:
        self.now += seconds
        return self

    def verdict(self, now: float | None = None) -> Verdict:
        return detect_stuck(self.events, self.config, self.now if now is None else now)


def codes(verdict: Verdict) -> list[str]:
    return [e.code for e in verdict.evidence]


def evidence(verdict: Verdict, code: str) -> list[msgspec.Struct]:
    return [e for e in verdict.evidence if e.code == code]


RG_OUTPUT = "src/app.py:12:    def load_config(path):\nsrc/cli.py:40:    load_config(args.path)\n"


# --- the acceptance scenario: the same rg run three times ----------------------------------


def test_rg_repeated_three_times_with_the_same_output_is_stuck() -> None:
    script = Script()
    for _ in range(3):
        script.run("rg load_config src", RG_OUTPUT)
    verdict = script.verdict()
    assert verdict.likely_stuck is True
    assert verdict.confidence in {"medium", "high"}
    assert "repeated_command" in verdict.reasons
    (item,) = [e for e in verdict.evidence if e.code == "repeated_command"]
    assert item.commands == ["rg load_config src"]
    assert item.count == 3  # three logical calls, not six events
    assert len(item.hashes) == 1 and len(item.hashes[0]) == 64
    assert verdict.calls == 3


def test_empty_history_is_not_stuck() -> None:
    verdict = detect_stuck([], WatchdogConfig(), 0.0)
    assert verdict == Verdict()
    assert verdict.confidence == "none" and verdict.reasons == [] and not verdict.likely_stuck


# --- repeated_command ------------------------------------------------------------------------


def test_repeated_command_needs_the_threshold() -> None:
    script = Script().run("rg load_config src", RG_OUTPUT).run("rg load_config src", RG_OUTPUT)
    verdict = script.verdict()
    assert "repeated_command" not in verdict.reasons
    assert not verdict.likely_stuck


def test_repeated_command_needs_the_same_output() -> None:
    script = Script()
    for i in range(4):
        script.run("python check.py", f"{i} checks left")
    assert "repeated_command" not in script.verdict().reasons


def test_repeated_command_needs_the_same_command() -> None:
    script = Script()
    for path in ("src", "tests", "docs"):
        script.run(f"pytest {path}", "1 failed")
    assert "repeated_command" not in script.verdict().reasons


def test_repeated_command_sees_through_volatile_noise() -> None:
    script = Script()
    for i in range(3):
        script.run(
            "./start_server.sh",
            f"[{10 + i}:00:0{i}] server pid {4000 + i} listening, log in /tmp/run{i}x/log "
            f"(ready in 0.{i}5s, id {i}f3a9c2e1b)",
            exit_code=1,
        )
    assert "repeated_command" in script.verdict().reasons


def test_repeated_command_confidence_rises_with_the_count() -> None:
    script = Script()
    for _ in range(4):
        script.run("make run", "same")
    item = evidence(script.verdict(), "repeated_command")[0]
    assert isinstance(item, msgspec.Struct) and item.confidence == "medium"  # type: ignore[attr-defined]
    script.run("make run", "same")
    verdict = script.verdict()
    assert verdict.confidence == "high"
    assert evidence(verdict, "repeated_command")[0].count == 5  # type: ignore[attr-defined]


def test_repeated_command_threshold_is_configurable() -> None:
    script = Script(WatchdogConfig(repeat_threshold=5))
    for _ in range(3):
        script.run("rg load_config src", RG_OUTPUT)
    assert not script.verdict().likely_stuck


def test_edit_then_green_tests_is_progress_not_a_repeat() -> None:
    script = Script()
    for i in range(4):
        script.edit(f"src/mod{i}.py")
        script.run("pytest -q", "12 passed in 0.5{i}s")  # identical once durations are masked
    verdict = script.verdict()
    assert "repeated_command" not in verdict.reasons
    assert not verdict.likely_stuck


def test_the_same_failure_after_each_edit_is_test_driven_work() -> None:
    """Edit, re-run the failing test, edit, re-run: each run follows a change, so none
    repeats the last one; the same failure with no edit between is a repeat."""
    failure = "FAILED tests/test_a.py::test_x - AssertionError"
    script = Script()
    for i in range(4):
        script.edit(f"src/mod{i}.py")
        script.run("pytest -q", failure, exit_code=1)
    verdict = script.verdict()
    assert "repeated_command" not in verdict.reasons and not verdict.likely_stuck
    script.run("pytest -q", failure, exit_code=1).run("pytest -q", failure, exit_code=1)
    (item,) = [e for e in script.verdict().evidence if e.code == "repeated_command"]
    assert item.count == 3 and "no edit between" in item.detail


def test_repeats_are_counted_within_the_stretch_between_writes() -> None:
    script = Script()
    script.run("git status", "clean").run("git status", "clean")
    script.edit()
    script.run("git status", "clean")
    assert "repeated_command" not in script.verdict().reasons
    script.run("git status", "clean").run("git status", "clean")
    (item,) = [e for e in script.verdict().evidence if e.code == "repeated_command"]
    assert item.count == 3 and item.seqs == [e.seq for e in script.events[-6::2]]


def test_pending_calls_do_not_count_as_repeats() -> None:
    script = Script().run("make run", "same").run("make run", "same").start("make run")
    assert "repeated_command" not in script.verdict().reasons


# --- repeated_typecheck_error ----------------------------------------------------------------

TSC_ERROR = "src/a.ts({line},5): error TS2345: Argument of type 'string' is not assignable."


def test_same_typecheck_error_twice_is_stuck_even_with_edits_between() -> None:
    script = Script()
    script.run("npx tsc --noEmit", TSC_ERROR.format(line=12), exit_code=2)
    script.edit("src/a.ts")
    script.run("npx tsc --noEmit", TSC_ERROR.format(line=14), exit_code=2)  # the error moved
    verdict = script.verdict()
    assert "repeated_typecheck_error" in verdict.reasons
    assert verdict.likely_stuck
    (item,) = [e for e in verdict.evidence if e.code == "repeated_typecheck_error"]
    assert item.count == 2
    assert "TS2345" in item.detail


def test_one_typecheck_error_is_not_stuck() -> None:
    script = Script().run("npx tsc --noEmit", TSC_ERROR.format(line=1), exit_code=2)
    assert script.verdict().reasons == []


def test_different_typecheck_errors_are_progress() -> None:
    script = Script()
    script.run("mypy src", "src/a.py:3: error: Name 'x' is not defined", exit_code=1)
    script.edit()
    script.run("mypy src", "src/a.py:9: error: Missing return statement", exit_code=1)
    script.edit()
    script.run("mypy src", "Success: no issues found", exit_code=0)
    assert "repeated_typecheck_error" not in script.verdict().reasons


def test_typecheck_error_across_commands_and_compilers() -> None:
    script = Script()
    script.run(
        "cargo check", "error[E0308]: mismatched types\n  --> src/main.rs:4:5", exit_code=101
    )
    script.edit("src/main.rs")
    script.run(
        "cargo build", "error[E0308]: mismatched types\n  --> src/main.rs:7:5", exit_code=101
    )
    assert "repeated_typecheck_error" in script.verdict().reasons


def test_typecheck_threshold_is_configurable() -> None:
    script = Script(WatchdogConfig(typecheck_repeat_threshold=3))
    for line in (1, 2):
        script.run("tsc", TSC_ERROR.format(line=line), exit_code=2)
        script.edit("src/a.ts")
    assert "repeated_typecheck_error" not in script.verdict().reasons
    script.run("tsc", TSC_ERROR.format(line=3), exit_code=2)
    assert "repeated_typecheck_error" in script.verdict().reasons


# --- no_progress -----------------------------------------------------------------------------


def busy_without_writes(config: WatchdogConfig | None = None, calls: int = 6) -> Script:
    """Distinct non-read commands with distinct outputs, each running 80 s: only no_progress
    applies."""
    script = Script(config)
    for i in range(calls):
        script.run(f"python experiment_{i}.py", f"result {i}", took=80.0)
    return script


def test_tools_running_without_writes_for_the_idle_time_is_no_progress() -> None:
    script = busy_without_writes()  # 6 calls over ~400 s
    verdict = script.verdict()
    assert verdict.reasons == ["no_progress"]
    (item,) = verdict.evidence
    assert item.count == 6
    assert item.confidence == "low"
    assert not verdict.likely_stuck  # low alone is reported, not alerted


def test_no_progress_becomes_medium_at_twice_the_idle_time() -> None:
    script = busy_without_writes(calls=9)  # 720 s of tools running
    verdict = script.verdict()
    assert verdict.confidence == "medium" and verdict.likely_stuck


def test_no_progress_needs_the_idle_time() -> None:
    script = busy_without_writes(WatchdogConfig(idle_no_progress_s=1000.0))
    assert "no_progress" not in script.verdict().reasons


def test_a_write_resets_no_progress() -> None:
    script = busy_without_writes()
    script.edit(dt=1.0)
    script.run("python again.py", "x", dt=1.0)
    assert "no_progress" not in script.verdict().reasons


def test_shell_writes_count_as_progress() -> None:
    script = busy_without_writes()
    script.run("sed -i 's/a/b/' src/a.py", "")
    assert "no_progress" not in script.verdict().reasons


def test_no_progress_needs_a_few_calls() -> None:
    script = Script().run("python a.py", "1", dt=1).run("python b.py", "2", dt=400)
    assert "no_progress" not in script.verdict().reasons


def test_a_quiet_agent_is_idle_not_looping() -> None:
    script = busy_without_writes()
    assert "no_progress" not in script.verdict(now=script.now + 301).reasons


# --- read_only_loop --------------------------------------------------------------------------


def reads(rounds: int) -> Script:
    """Re-reading the same two files (outputs change, e.g. another process writes)."""
    script = Script()
    for i in range(rounds):
        script.run("cat src/a.py", f"a v{i}")
        script.run("head -n 40 src/b.py", f"b v{i}")
    return script


def test_revisiting_the_same_read_targets_is_a_read_only_loop() -> None:
    verdict = reads(3).verdict()
    assert verdict.reasons == ["read_only_loop"]
    (item,) = verdict.evidence
    assert item.count == 3
    assert item.confidence == "low"
    assert set(item.commands) == {"cat src/a.py", "head -n 40 src/b.py"}


def test_read_only_loop_grows_to_medium_and_high() -> None:
    assert reads(6).verdict().evidence[0].confidence == "medium"
    assert reads(9).verdict().evidence[0].confidence == "high"
    assert reads(6).verdict().likely_stuck


def test_different_spellings_of_the_same_read_are_one_target() -> None:
    script = Script()
    script.run("cat src/a.py", "1")
    script.run("", "2", tool="read", args={"path": "src/a.py"})
    script.run("nl -ba src/a.py", "3")
    assert script.verdict().reasons == ["read_only_loop"]


def test_a_write_between_reads_breaks_the_read_only_loop() -> None:
    script = Script()
    for i in range(3):
        script.run("cat src/a.py", f"a v{i}")
        script.edit()
    assert "read_only_loop" not in script.verdict().reasons


def test_reading_new_things_is_not_a_loop() -> None:
    script = Script()
    for i in range(9):
        script.run(f"cat src/file_{i}.py", f"content {i}")
    assert script.verdict().reasons == []


# --- alternating_cycle -----------------------------------------------------------------------


def alternate(cycles: int) -> Script:
    script = Script()
    for _ in range(cycles):
        script.run("./build.sh", "build failed: missing symbol", exit_code=1)
        script.run("./fix.sh", "nothing to do")
    return script


def test_alternating_a_b_with_the_same_outputs_is_a_cycle() -> None:
    verdict = alternate(3).verdict()
    assert "alternating_cycle" in verdict.reasons
    (item,) = evidence(verdict, "alternating_cycle")
    assert item.count == 3  # type: ignore[attr-defined]
    assert item.commands == ["./build.sh", "./fix.sh"]  # type: ignore[attr-defined]
    assert verdict.confidence == "high"


def test_two_cycles_are_not_enough() -> None:
    assert "alternating_cycle" not in alternate(2).verdict().reasons


def test_three_step_cycles_are_found() -> None:
    script = Script()
    for _ in range(3):
        script.run("./a.sh", "A")
        script.run("./b.sh", "B")
        script.run("./c.sh", "C")
    (item,) = evidence(script.verdict(), "alternating_cycle")
    assert item.commands == ["./a.sh", "./b.sh", "./c.sh"]  # type: ignore[attr-defined]


def test_a_broken_alternation_is_not_a_cycle() -> None:
    script = Script()
    for out in ("1", "2", "3"):
        script.run("./build.sh", "fail", exit_code=1)
        script.run("./fix.sh", out)  # the fix does something different each time
    assert "alternating_cycle" not in script.verdict().reasons


# --- monologue / empty_responses (more in test_watchdog_patterns.py) --------------------------


def test_the_same_agent_message_without_tool_use_is_stuck() -> None:
    script = Script()
    for _ in range(3):
        script.say("I will now look at the config loader.")
    verdict = script.verdict()
    assert verdict.reasons == ["monologue"]
    assert verdict.likely_stuck
    assert "config loader" in verdict.evidence[0].detail


def test_tool_use_between_messages_breaks_the_repetition() -> None:
    script = Script()
    for i in range(3):
        script.say("Checking the tests again.")
        script.run(f"pytest -k case{i}", f"{i}")
    assert "monologue" not in script.verdict().reasons


def test_different_messages_are_not_repeats_when_the_text_must_be_identical() -> None:
    script = Script(WatchdogConfig(monologue_match="identical")).say("one").say("two").say("3")
    assert script.verdict().reasons == []


def test_repeated_empty_responses() -> None:
    script = Script().say("").say("  \n").say("")
    verdict = script.verdict()
    assert verdict.reasons == ["empty_responses"]  # not also a monologue
    assert verdict.evidence[0].count == 3
    assert verdict.likely_stuck


def test_empty_responses_need_the_threshold_and_no_tool_use() -> None:
    assert Script().say("").say("").verdict().reasons == []
    script = Script()
    for i in range(3):
        script.say("")
        script.run(f"python step{i}.py", "ok")  # tool-only turns are normal
    assert "empty_responses" not in script.verdict().reasons


# --- error_streak ----------------------------------------------------------------------------

IMPORT_ERROR = "ModuleNotFoundError: No module named 'yaml'"


def test_the_same_error_across_different_commands_is_a_streak() -> None:
    script = Script()
    script.run("python app.py", IMPORT_ERROR, exit_code=1)
    script.run("python -m app", IMPORT_ERROR, exit_code=1)
    script.run("pytest tests/test_app.py", IMPORT_ERROR, exit_code=1)
    verdict = script.verdict()
    assert verdict.reasons == ["error_streak"]
    (item,) = verdict.evidence
    assert item.count == 3 and len(item.commands) == 3
    assert verdict.likely_stuck


def test_error_kind_events_count_as_failures() -> None:
    script = Script()
    for tool in ("read", "grep", "glob"):
        script._add(1.0, kind="tool_call", tool=tool, args={"path": f"{tool}.txt"})
        script._add(0.5, kind="error", tool=tool, output="permission denied")
    assert "error_streak" in script.verdict().reasons


def test_a_success_breaks_the_error_streak() -> None:
    script = Script()
    script.run("python app.py", IMPORT_ERROR, exit_code=1)
    script.run("python -m app", IMPORT_ERROR, exit_code=1)
    script.run("pip list", "PyYAML 6.0", exit_code=0)
    script.run("pytest", IMPORT_ERROR, exit_code=1)
    assert "error_streak" not in script.verdict().reasons


def test_one_command_failing_is_not_an_error_streak() -> None:
    script = Script()
    for _ in range(3):
        script.run("python app.py", IMPORT_ERROR, exit_code=1)
    verdict = script.verdict()
    assert "error_streak" not in verdict.reasons
    assert "repeated_command" in verdict.reasons


def test_different_errors_or_silent_failures_are_not_a_streak() -> None:
    script = Script()
    for i in range(3):
        script.run(f"python app{i}.py", f"error number {i * 7}", exit_code=1)
    for i in range(3):
        script.run(f"false {i}", "", exit_code=1)
    assert "error_streak" not in script.verdict().reasons


# --- episodes: evidence only since the last instruction --------------------------------------


def test_a_new_instruction_clears_the_evidence() -> None:
    script = Script()
    for _ in range(3):
        script.run("rg load_config src", RG_OUTPUT)
    assert script.verdict().likely_stuck
    script.say("Please look at the CLI instead.", source="user")
    verdict = script.verdict()
    assert verdict.reasons == [] and not verdict.likely_stuck
    assert verdict.episode_started_at == script.events[-1].ts
    script.run("rg load_config src", RG_OUTPUT).run("rg load_config src", RG_OUTPUT)
    assert not script.verdict().likely_stuck  # only two since the instruction


def test_agent_messages_are_not_new_instructions() -> None:
    script = Script()
    script.run("rg load_config src", RG_OUTPUT).run("rg load_config src", RG_OUTPUT)
    script.say("Let me search once more.")
    script.run("rg load_config src", RG_OUTPUT)
    assert "repeated_command" in script.verdict().reasons


# --- combining rules -------------------------------------------------------------------------


def test_two_low_rules_make_medium() -> None:
    script = Script()
    for i in range(3):
        script.run("cat src/a.py", f"v{i}", took=100.0)
        script.run("cat src/b.py", f"w{i}", took=10.0)
    verdict = script.verdict()
    assert verdict.reasons == ["no_progress", "read_only_loop"]
    assert {e.confidence for e in verdict.evidence} == {"low"}
    assert verdict.confidence == "medium" and verdict.likely_stuck


def test_three_rules_raise_the_confidence_one_step() -> None:
    script = Script()
    for _ in range(3):
        script.run("rg load_config src", RG_OUTPUT, took=110.0)
    verdict = script.verdict()
    assert verdict.reasons == ["repeated_command", "no_progress", "read_only_loop"]
    assert evidence(verdict, "repeated_command")[0].confidence == "medium"  # type: ignore[attr-defined]
    assert verdict.confidence == "high"


def test_the_rg_scenario_is_medium_not_high() -> None:
    script = Script()
    for _ in range(3):
        script.run("rg load_config src", RG_OUTPUT)
    verdict = script.verdict()
    assert verdict.reasons == ["repeated_command", "read_only_loop"]
    assert verdict.confidence == "medium"


# --- evidence keys ---------------------------------------------------------------------------


def test_evidence_keys_are_stable_and_specific() -> None:
    def keys(command: str) -> list[str]:
        script = Script(agent_id="x")
        for _ in range(3):
            script.run(command, RG_OUTPUT)
        return [e.key for e in script.verdict().evidence]

    assert keys("rg load_config src") == keys("rg load_config src")
    assert set(keys("rg load_config src")).isdisjoint(keys("rg load_config tests"))
    assert all(k.startswith(("repeated_command:", "read_only_loop:")) for k in keys("rg a"))


def test_verdict_to_dict_is_json_ready() -> None:
    script = Script()
    for _ in range(3):
        script.run("rg load_config src", RG_OUTPUT)
    data = verdict_to_dict(script.verdict())
    assert msgspec.json.decode(msgspec.json.encode(data)) == data
    assert data["likely_stuck"] is True
    assert isinstance(data["evidence"], list) and data["evidence"][0]["code"] == "repeated_command"


@pytest.mark.parametrize("threshold", [1, 2, 3, 4])
def test_thresholds_are_respected_exactly(threshold: int) -> None:
    config = WatchdogConfig(repeat_threshold=threshold)
    script = Script(config)
    for _ in range(threshold - 1):
        script.run("make run", "same")
    assert "repeated_command" not in script.verdict().reasons
    script.run("make run", "same")
    assert "repeated_command" in script.verdict().reasons


def test_calls_running_side_by_side_count_their_time_once() -> None:
    """Three calls running together for 200 s are 200 s of tools, not 600."""
    script = Script()
    for i in range(3):
        script._add(
            1.0, kind="tool_call", tool="bash", command=f"python job_{i}.py", call_id=f"c{i}"
        )
    script.now = 200.0
    for i in range(3):
        script._add(1.0, kind="tool_result", tool="bash", output=f"done {i}", call_id=f"c{i}")
    assert "no_progress" not in script.verdict().reasons
    script.run("python job_3.py", "done 3", took=120.0)  # 202 s + 120 s of tools
    (item,) = evidence(script.verdict(), "no_progress")
    assert "ran 322s" in item.detail  # type: ignore[attr-defined]
