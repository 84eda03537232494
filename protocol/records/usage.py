"""What a task, an agent or the session has spent (:class:`Usage`), and what it may spend
(:class:`Budget`). Plain values and pure arithmetic; the rules over them are
:mod:`protocol.session.budgets`.

Rules:

1. **Usage only grows.** A report adds turns, tokens and cost; nothing subtracts.
2. **A limit is passed when usage goes over it**, not when it reaches it: a task with
   ``max_turns=2`` may run two turns, and the third one's start passes the limit.
3. A limit left out (``None``) is no limit.
4. **Money is counted in whole micro-dollars.** A cost arrives as US dollars (a float, as the
   agent's adapter reported it) and is rounded to the micro-dollar once, where it is added;
   sums, remainders and comparisons are integer arithmetic, so ten reports of $0.10 are
   exactly $1 (never ``0.9999999999999999``) and a budget of $1 is reached, not missed.
"""

from __future__ import annotations

from typing import Final

import msgspec

from protocol.core.limits import BudgetCost, BudgetMinutes, BudgetTokens, BudgetTurns

__all__ = [
    "BUDGET_EXCEEDED",
    "LIMITS",
    "MICROS_PER_USD",
    "UNITS",
    "Budget",
    "Usage",
    "amount",
    "dollars",
    "exceeded",
    "left",
    "micros",
    "over",
    "spent",
]


#: the reason a task ended by its budget gives (``TaskResult.reason``)
BUDGET_EXCEEDED: Final = "budget_exceeded"

#: what each counted limit counts, in words
UNITS: Final[dict[str, str]] = {
    "max_turns": "turns",
    "max_tokens": "tokens",
    "max_cost": "US dollars",
}

#: money's unit of account (rule 4)
MICROS_PER_USD: Final = 1_000_000


def micros(usd: float) -> int:
    """``usd`` in whole micro-dollars (rule 4)."""
    return round(usd * MICROS_PER_USD)


def dollars(amount: int) -> float:
    """Whole micro-dollars as US dollars: the float nearest the exact amount, which prints as
    the amount (``300000`` -> ``0.3``)."""
    return amount / MICROS_PER_USD


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Turns run, tokens used, and cost in US dollars (as the agent's adapter reported it)."""

    turns: int = 0
    tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            turns=self.turns + other.turns,
            tokens=self.tokens + other.tokens,
            # no cost on either side (a scripted agent's turns): nothing to round
            cost=dollars(micros(self.cost) + micros(other.cost))
            if self.cost or other.cost
            else 0.0,
        )


class Budget(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A task's limits (each optional); ``max_minutes`` is wall time from delegation."""

    max_turns: BudgetTurns | None = None
    max_tokens: BudgetTokens | None = None
    max_cost: BudgetCost | None = None
    max_minutes: BudgetMinutes | None = None

    @property
    def empty(self) -> bool:
        return (
            self.max_turns is None
            and self.max_tokens is None
            and self.max_cost is None
            and self.max_minutes is None
        )


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
        used, bound = _exact(limit, spent(usage, limit)), _exact(limit, bound)
        if (used > bound) if fraction >= 1.0 else (used >= bound * fraction):
            found.append(limit)
    return found


def amount(limit: str, value: float) -> str:
    """``value`` of a counted ``limit`` as it is written in a notice (money to the
    micro-dollar, rule 4, without trailing zeros: 1.000001 over a limit of 1 is not written
    as 1; turns and tokens whole)."""
    return f"{value:.6f}".rstrip("0").rstrip(".") if limit == "max_cost" else f"{int(value)}"


def exceeded(usage: Usage, budget: Budget, who: str, *, its_limit: bool) -> str | None:
    """Why ``who`` (``"the task"``, ``"the session"``) ends, its ``usage`` over a counted limit
    of ``budget`` (the first), or None if it is over none; the bound is named as that limit
    (``its_limit``) or as its budget."""
    passed = over(usage, budget)
    if not passed:
        return None
    limit = passed[0]
    bound = f"{limit} of" if its_limit else "budget of"
    return (
        f"{BUDGET_EXCEEDED}: {who} used {amount(limit, spent(usage, limit))} {UNITS[limit]}, "
        f"over its {bound} {amount(limit, getattr(budget, limit))}"
    )


def left(limit: str, bound: float, used: float) -> float:
    """What a counted ``limit`` of ``bound`` has left after ``used`` (money exactly, rule 4)."""
    if limit == "max_cost":
        return dollars(micros(bound) - micros(used))
    return bound - used


def _exact(limit: str, value: float) -> float:
    """A counted value as compared: money in micro-dollars (rule 4), the others as they are."""
    return micros(value) if limit == "max_cost" else value
