"""Pi's usage as the bridge reports it (pure: no Pi needed): tokens and cost of one finished
assistant message, and nothing for anything else or for values that are not amounts."""

from __future__ import annotations

from typing import Any

from actors.child.pi.events import usage_of
from protocol.core.limits import MAX_BUDGET_COST, MAX_BUDGET_TOKENS


def message_end(usage: Any, role: str = "assistant") -> dict[str, Any]:
    return {"type": "message_end", "message": {"role": role, "content": [], "usage": usage}}


def test_an_assistant_message_reports_its_total_tokens_and_cost() -> None:
    usage = {"input": 10, "output": 11, "totalTokens": 21, "cost": {"total": 0.002}}
    assert usage_of(message_end(usage)) == (21, 0.002)


def test_without_a_total_the_parts_are_summed() -> None:
    usage = {"input": 10, "output": 5, "cacheRead": 3, "cacheWrite": 2}
    assert usage_of(message_end(usage)) == (20, 0.0)


def test_other_events_and_messages_report_nothing() -> None:
    assert usage_of({"type": "agent_end"}) is None
    assert usage_of(message_end({"totalTokens": 5}, role="user")) is None
    assert usage_of(message_end(None)) is None
    assert usage_of(message_end({"totalTokens": 0, "cost": {"total": 0}})) is None


def test_values_that_are_not_amounts_count_as_zero_and_huge_ones_are_held() -> None:
    for bad in (float("nan"), float("inf"), -5, "12", True, None, [1]):
        assert usage_of(message_end({"totalTokens": bad, "cost": {"total": bad}})) is None
    huge = {"totalTokens": 10**20, "cost": {"total": 1e300}}
    assert usage_of(message_end(huge)) == (MAX_BUDGET_TOKENS, MAX_BUDGET_COST)
