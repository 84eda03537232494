"""What a task, an agent or the session has spent (:class:`Usage`), and what it may spend
(:class:`Budget`). Plain values and pure arithmetic; the rules over them are
:mod:`protocol.session.budgets`.

Rules:

1. **Usage only grows.** A report adds turns, tokens and cost; nothing subtracts.
2. **A limit is passed when usage goes over it**, not when it reaches it: a task with
   ``max_turns=2`` may run two turns, and the third one's start passes the limit.
3. A limit left out (``None``) is no limit.
"""

from __future__ import annotations

from typing import Final

import msgspec

from protocol.limits import BudgetCost, BudgetMinutes, BudgetTokens, BudgetTurns

__all__ = ["LIMITS", "Budget", "Usage", "over", "spent"]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Turns run, tokens used, and cost in US dollars (as the agent's adapter reported it)."""

    turns: int = 0
    tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            turns=self.turns + other.turns,
            tokens=self.tokens + other.tokens,
            cost=self.cost + other.cost,
        )


class Budget(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A task's limits (each optional); ``max_minutes`` is wall time from delegation."""

    max_turns: BudgetTurns | None = None
    max_tokens: BudgetTokens | None = None
    max_cost: BudgetCost | None = None
    max_minutes: BudgetMinutes | None = None

    @property
    def empty(self) -> bool:
        return all(getattr(self, f) is None for f in LIMITS)


#: the limits of a :class:`Budget` counted from :class:`Usage`, with the usage field each
#: reads (``max_minutes`` is a timer, not a count)
COUNTED: Final[dict[str, str]] = {"max_turns": "turns", "max_tokens": "tokens", "max_cost": "cost"}
LIMITS: Final[tuple[str, ...]] = ("max_turns", "max_tokens", "max_cost", "max_minutes")


def spent(usage: Usage, limit: str) -> float:
    """The part of ``usage`` that the counted ``limit`` bounds."""
    value: float = getattr(usage, COUNTED[limit])
    return value


def over(usage: Usage, budget: Budget, fraction: float = 1.0) -> list[str]:
    """The counted limits of ``budget`` that ``usage`` is over (above ``fraction`` of them: at
    1.0 strictly above, rule 2; below 1.0, at or above the share)."""
    found = []
    for limit in COUNTED:
        bound = getattr(budget, limit)
        if bound is None:
            continue
        used = spent(usage, limit)
        if (used > bound) if fraction >= 1.0 else (used >= bound * fraction):
            found.append(limit)
    return found
