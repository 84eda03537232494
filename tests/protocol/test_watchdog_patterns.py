"""The stuck patterns a published detector (OpenHands' StuckDetector) catches, each with its own
threshold: the same action failing with changing error texts, monologue, empty responses,
A/B alternation in cycles, and context condensation being neither progress nor a failure.

Every event sequence here is written for this project's detector (pairs of call and result,
episodes since the last instruction); none is taken from another project's tests.
"""

from __future__ import annotations

import pytest

from protocol.watchdog import (
    WatchdogConfig,
    pair_calls,
    runtime_kind,
    set_config_value,
)
from tests.protocol.test_watchdog_detect import Script, evidence


class Agent(Script):
    """:class:`Script` plus the events that are neither calls nor messages."""

    def condense(self, text: str = "summary of the work so far", *, failed: bool = False) -> Agent:
        self._add(1.0, kind="condensation", output=text, is_error=failed)
        return self

    def prints(self, line: str) -> Agent:
        self._add(0.1, kind="output", output=line)
        return self

    def instruct(self, text: str) -> Agent:
        self.say(text, source="user")
        return self


def configured(**settings: str) -> WatchdogConfig:
    """A config from ``KEY=VALUE`` settings as ``watchdog set`` gives them (dots as ``__``)."""
    config = WatchdogConfig()
    for key, value in settings.items():
        config = set_config_value(config, key.replace("__", "."), value)
    return config


# --- the same action keeps failing, whatever the error text -----------------------------------


def failing_pytest(agent: Agent, times: int, first_line: int = 41) -> Agent:
    for i in range(times):
        agent.run(
            "pytest   tests/test_api.py -x",  # the spacing differs: the key is normalised
            f"tests/test_api.py:{first_line + 3 * i}: AssertionError: expected 200, got 500\n"
            f"request at 10:0{i} took {i + 2} retries",
            exit_code=1,
        )
    return agent


def test_the_same_call_failing_with_different_error_texts_is_stuck() -> None:
    verdict = failing_pytest(Agent(), 3).verdict()
    assert "repeated_command" not in verdict.reasons  # the outputs all differ
    assert "repeated_failure" in verdict.reasons and verdict.likely_stuck
    (item,) = evidence(verdict, "repeated_failure")
    assert item.count == 3  # type: ignore[attr-defined]
    assert item.commands == ["pytest tests/test_api.py -x"]  # type: ignore[attr-defined]
    assert len(item.hashes) == 3  # type: ignore[attr-defined]
    assert "3 different error outputs" in item.detail  # type: ignore[attr-defined]
    assert failing_pytest(Agent(), 5).verdict().confidence == "high"


def test_a_structured_call_with_the_same_arguments_in_another_order_is_the_same_action() -> None:
    agent = Agent()
    for i, args in enumerate(
        [
            {"url": "https://api.example/v1/items", "timeout": 5},
            {"timeout": 5, "url": "https://api.example/v1/items"},
            {"url": "https://api.example/v1/items", "timeout": 5},
        ]
    ):
        agent.run(
            "", f"HTTP 503 (attempt {i + 1}, retry-after {30 + i})", 1, tool="fetch", args=args
        )
    assert "repeated_failure" in agent.verdict().reasons


def test_two_failures_are_not_yet_a_repeated_failure() -> None:
    assert "repeated_failure" not in failing_pytest(Agent(), 2).verdict().reasons


def test_another_call_or_a_success_between_the_failures_breaks_the_run() -> None:
    agent = Agent()
    for i in range(3):
        failing_pytest(agent, 1, first_line=41 + i)
        agent.run(f"cat src/api_{i}.py", f"def handler_{i}(): ...")  # investigating
    assert "repeated_failure" not in agent.verdict().reasons
    agent = failing_pytest(Agent(), 2)
    agent.run("pytest tests/test_api.py -x", "1 passed", exit_code=0)
    failing_pytest(agent, 2, first_line=90)
    assert "repeated_failure" not in agent.verdict().reasons


def test_what_the_agent_says_between_retries_does_not_break_the_run() -> None:
    agent = failing_pytest(Agent(), 1)
    agent.say("Let me run it again.")
    failing_pytest(agent, 1, first_line=50).condense()
    failing_pytest(agent, 1, first_line=60)
    assert "repeated_failure" in agent.verdict().reasons


def test_repeated_failure_has_its_own_threshold() -> None:
    assert (
        "repeated_failure"
        not in failing_pytest(Agent(configured(repeated_failure__threshold="4")), 3)
        .verdict()
        .reasons
    )
    assert (
        "repeated_failure"
        in failing_pytest(Agent(configured(repeated_failure__threshold="4")), 4).verdict().reasons
    )
    # the shared repeat_threshold is only the fallback of rules with no threshold of their own
    assert (
        "repeated_failure"
        in failing_pytest(Agent(configured(repeat_threshold="9")), 3).verdict().reasons
    )


# --- monologue ----------------------------------------------------------------------------------


def test_agent_messages_in_a_row_without_a_tool_call_are_a_monologue_whatever_the_text() -> None:
    agent = Agent().say("Let me think about the parser.")
    agent.say("The tokenizer could be the cause.").say("Or the grammar, maybe.")
    verdict = agent.verdict()
    assert verdict.reasons == ["monologue"] and verdict.likely_stuck
    (item,) = verdict.evidence
    assert item.count == 3 and "3 agent messages in a row" in item.detail
    assert "Or the grammar" in item.detail


def test_a_tool_call_or_user_input_between_messages_ends_the_monologue() -> None:
    agent = Agent().say("one").say("two").run("ls", "a b").say("three").say("four")
    assert "monologue" not in agent.verdict().reasons
    agent = Agent().say("one").say("two").instruct("keep going").say("three").say("four")
    assert "monologue" not in agent.verdict().reasons


def test_identical_text_mode_counts_only_the_same_message_in_a_row() -> None:
    config = configured(monologue__match="identical")
    assert Agent(config).say("a").say("b").say("c").verdict().reasons == []
    agent = Agent(config).say("a").say("a").say("b").say("b").say("b")
    (item,) = evidence(agent.verdict(), "monologue")
    assert item.count == 3 and "the same message 3 times" in item.detail  # type: ignore[attr-defined]


def test_empty_responses_and_condensations_neither_count_for_nor_break_a_monologue() -> None:
    agent = Agent().say("one").say("").condense().say("two")
    assert "monologue" not in agent.verdict().reasons  # two real messages only
    agent.say("three")
    assert "monologue" in agent.verdict().reasons


def test_monologue_has_its_own_threshold() -> None:
    agent = Agent(configured(monologue__threshold="5"))
    for i in range(4):
        agent.say(f"thought {i}")
    assert "monologue" not in agent.verdict().reasons
    agent.say("thought 4")
    assert "monologue" in agent.verdict().reasons


# --- empty responses ------------------------------------------------------------------------


def test_a_real_message_breaks_the_streak_of_empty_responses() -> None:
    agent = Agent().say("").say(" ").say("I will read the failing test first.").say("").say("\n")
    verdict = agent.verdict()
    assert "empty_responses" not in verdict.reasons  # two, then two: never three in a row


def test_empty_and_whitespace_responses_in_a_row_are_stuck() -> None:
    verdict = Agent().say("").say("  \n\t").say("").verdict()
    assert verdict.reasons == ["empty_responses"] and verdict.likely_stuck
    assert verdict.evidence[0].count == 3


def test_output_and_condensations_do_not_break_the_empty_streak() -> None:
    agent = Agent().say("").prints("[shepherd] message queued as a follow_up").say("")
    agent.condense().say("")
    assert "empty_responses" in agent.verdict().reasons


def test_empty_responses_have_their_own_threshold() -> None:
    agent = Agent(configured(empty_responses__threshold="4", repeat_threshold="2"))
    agent.say("").say("").say("")
    assert "empty_responses" not in agent.verdict().reasons
    agent.say("")
    assert "empty_responses" in agent.verdict().reasons


# --- alternation, in cycles ---------------------------------------------------------------------


def ping_pong(steps: int, config: WatchdogConfig | None = None) -> Agent:
    agent = Agent(config)
    for i in range(steps):
        if i % 2 == 0:
            agent.run("git stash", "Saved working directory")
        else:
            agent.run("git stash pop", "CONFLICT (content): Merge conflict in src/a.py", 1)
    return agent


def test_six_steps_of_an_a_b_alternation_are_three_cycles() -> None:
    assert "alternating_cycle" not in ping_pong(5).verdict().reasons  # two and a half cycles
    (item,) = evidence(ping_pong(6).verdict(), "alternating_cycle")
    assert item.count == 3 and "repeated 3 times" in item.detail  # type: ignore[attr-defined]
    (item,) = evidence(ping_pong(9).verdict(), "alternating_cycle")
    assert item.count == 4  # type: ignore[attr-defined]


def test_alternation_has_its_own_threshold_in_cycles() -> None:
    config = configured(alternating_cycle__threshold="4")
    assert "alternating_cycle" not in ping_pong(7, config).verdict().reasons
    assert "alternating_cycle" in ping_pong(8, config).verdict().reasons
    # not the shared repeat_threshold: raising it does not hide three cycles
    assert "alternating_cycle" in ping_pong(6, configured(repeat_threshold="10")).verdict().reasons


# --- context condensation: neither progress nor a failure ---------------------------------------


RG = "src/app.py:12: def load_config(path):"


def test_a_condensation_between_repeats_is_not_progress() -> None:
    agent = Agent().run("rg load_config src", RG).condense()
    agent.run("rg load_config src", RG).condense().run("rg load_config src", RG)
    assert "repeated_command" in agent.verdict().reasons


def test_a_condensation_does_not_reset_no_progress() -> None:
    agent = Agent()
    for i in range(6):
        agent.run(f"python experiment_{i}.py", f"result {i}", took=80.0)
        agent.condense()
    assert "no_progress" in agent.verdict().reasons


def test_work_between_condensations_is_not_the_same_command_failing() -> None:
    """Healthy work (edits, green tests) with a compaction now and then, some of them failing
    with the same message: a condensation is never a call, so nothing here repeats."""
    agent = Agent()
    for i in range(4):
        agent.edit(f"src/mod{i}.py")
        agent.run("pytest -q", f"{10 + i} passed")
        agent.condense("context compaction (threshold) failed: quota exceeded", failed=True)
    verdict = agent.verdict()
    assert verdict.reasons == [] and verdict.calls == 8


def test_a_condensation_does_not_become_the_result_of_a_running_call() -> None:
    agent = Agent().start("pytest -q").condense("compaction: earlier output summarised")
    agent._add(5.0, kind="tool_result", tool="bash", output="3 failed", exit_code=1)
    (call,) = pair_calls(agent.events)
    assert call.command == "pytest -q" and call.is_error and call.preview == "3 failed"


def test_a_condensation_does_not_break_an_error_streak() -> None:
    agent = Agent()
    for command in ("python app.py", "python -m app", "pytest tests/test_app.py"):
        agent.run(command, "ModuleNotFoundError: No module named 'yaml'", 1).condense()
    assert "error_streak" in agent.verdict().reasons


def test_condensations_back_to_back_are_a_loop() -> None:
    agent = Agent()
    for _ in range(9):
        agent.condense("context compaction (overflow)")
    assert "condensation_loop" not in agent.verdict().reasons
    verdict = agent.condense().verdict()
    assert verdict.reasons == ["condensation_loop"] and verdict.likely_stuck
    agent = Agent(configured(condensation_loop__threshold="3"))
    agent.condense().condense().run("ls", "x").condense().condense()
    assert "condensation_loop" not in agent.verdict().reasons  # the call broke it
    assert "condensation_loop" in agent.condense().verdict().reasons


# --- output that is not the agent speaking ----------------------------------------------------


def test_printed_lines_are_not_agent_messages() -> None:
    agent = Agent()
    for _ in range(5):
        agent.prints("error: connection refused (retrying)")
    verdict = agent.verdict()
    assert verdict.reasons == [] and not verdict.likely_stuck


@pytest.mark.parametrize(
    ("adapter", "event", "text", "kind"),
    [
        ("command", "output", "error: connection refused", "output"),
        ("command", "output", "All done.", "output"),
        ("pi-rpc", "output", "I will look at the tests.", "message"),
        ("scripted", "output", "scout: looking around", "message"),
        ("simulated", "output", "scout: looking around", "message"),
        (None, "output", "hello", "message"),
        ("pi-rpc", "output", "[shepherd] message queued as a steer: lands now", "output"),
        ("scripted", "output", "[shepherd] cancel_task: the parent cancelled it", "output"),
        ("pi-rpc", "condensation", "context compaction (threshold)", "condensation"),
        ("pi-rpc", "tool_call", None, "tool_call"),
        ("command", "tool_result", None, "tool_result"),
        ("command", "turn_end", None, None),
        ("pi-rpc", "ready", None, None),
    ],
)
def test_runtime_kind(adapter: str | None, event: str, text: str | None, kind: str | None) -> None:
    assert runtime_kind(adapter, event, text) == kind
