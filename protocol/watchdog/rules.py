"""The watchdog's rules: reason codes, threshold settings and where each default comes from.

Rules
-----
* Every rule has a stable reason code and a threshold setting ``CODE.threshold`` (a count,
  1..1,000,000; what it counts is the rule's ``unit``). The settings layer it like any other
  watchdog setting: defaults <- user file <- project file <- ``watchdog set`` for the session.
* A rule that corresponds to a published stuck detector takes that detector's count as its
  default (OpenHands' ``StuckDetector``: 3 identical errors from the same action, 3 agent
  messages in a row, 3 repetitions of an A/B alternation, 3 empty responses, 10 context
  condensations). A rule that corresponds to none, or whose count Shepherd fixes, has no
  default of its own: it uses its *fallback* setting (``repeat_threshold``, 3, or
  ``typecheck_repeat_threshold``, 2), so the old shared setting still tunes them.
* ``repeated_command`` keeps Shepherd's 3 although OpenHands waits for 4 identical
  action/observation pairs: the acceptance case is the same ``rg`` run three times
  with the same output being stuck (at least ``medium``); ``repeated_command.threshold = 4``
  gives OpenHands' count.

Sans-IO: constants only.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

__all__ = [
    "MONOLOGUE_MATCHES",
    "REASON_CODES",
    "RULES",
    "MonologueMatch",
    "Rule",
    "rule",
]

MonologueMatch = Literal["any", "identical"]
MONOLOGUE_MATCHES: Final[tuple[str, ...]] = ("any", "identical")


class Rule(NamedTuple):
    code: str
    #: the rule's own default threshold; None: the value of ``fallback``
    default: int | None
    #: the setting whose value the rule uses when it has no threshold of its own
    fallback: Literal["repeat_threshold", "typecheck_repeat_threshold"]
    #: what the threshold counts
    unit: str
    #: where the default comes from (shown by the watchdog guide's table, docs/guides/watchdog.md)
    source: str


_OPENHANDS = "OpenHands StuckDetector"

RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "repeated_command",
        None,
        "repeat_threshold",
        "runs of one command with the same output, no write between",
        "Shepherd's spec (repeat_threshold 3); OpenHands waits for 4 identical pairs",
    ),
    Rule(
        "repeated_failure",
        3,
        "repeat_threshold",
        "failures in a row of one command, whatever the error text",
        f"{_OPENHANDS}: the same action with an error 3 times",
    ),
    Rule(
        "repeated_typecheck_error",
        None,
        "typecheck_repeat_threshold",
        "results with the same typecheck error",
        "Shepherd's spec (typecheck_repeat_threshold 2)",
    ),
    Rule(
        "no_progress",
        None,
        "repeat_threshold",
        "calls since the last write (with idle_no_progress_s of tools running)",
        "Shepherd's spec (repeat_threshold 3)",
    ),
    Rule(
        "read_only_loop",
        None,
        "repeat_threshold",
        "reads of the same region (file and range) since the last write",
        "Shepherd's spec (repeat_threshold 3)",
    ),
    Rule(
        "alternating_cycle",
        3,
        "repeat_threshold",
        "cycles of an A/B (or A/B/C) alternation",
        f"{_OPENHANDS}: an A/B alternation over 6 steps (3 cycles)",
    ),
    Rule(
        "monologue",
        3,
        "repeat_threshold",
        "agent messages in a row with no tool result (monologue.match: any or identical text)",
        f"{_OPENHANDS}: 3 agent messages in a row",
    ),
    Rule(
        "empty_responses",
        3,
        "repeat_threshold",
        "empty or whitespace-only agent messages in a row",
        f"{_OPENHANDS}: 3 empty responses in a row",
    ),
    Rule(
        "error_streak",
        None,
        "repeat_threshold",
        "failures in a row of different commands with the same error output",
        "this project (repeat_threshold)",
    ),
    Rule(
        "condensation_loop",
        10,
        "repeat_threshold",
        "context condensations in a row with nothing else between",
        f"{_OPENHANDS}: 10 condensation events (the context-window loop)",
    ),
)

REASON_CODES: Final[tuple[str, ...]] = tuple(r.code for r in RULES)
_BY_CODE: Final[dict[str, Rule]] = {r.code: r for r in RULES}


def rule(code: str) -> Rule:
    """The rule with this reason code (KeyError if there is none)."""
    return _BY_CODE[code]
