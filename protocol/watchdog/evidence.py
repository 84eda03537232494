"""Watchdog evidence: what a rule found, its confidence, and the helpers every rule shares.

Rules
-----
* Every evidence item has a stable ``key`` (rule code + a hash of what it is about) so that
  alert gating can recognise the same evidence; ``seqs`` lists the events behind it, newest
  last.
* A count-based rule is ``medium`` at its threshold and ``high`` at two more
  (:func:`by_count`): alert-then-escalate rather than tripping early.

Sans-IO: pure values and functions.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal

import msgspec

__all__ = [
    "CONFIDENCE_LEVELS",
    "MAX_COMMAND_CHARS",
    "MAX_EVIDENCE_COMMANDS",
    "Confidence",
    "Evidence",
    "by_count",
    "evidence_key",
    "rank",
    "short",
]

Confidence = Literal["none", "low", "medium", "high"]
CONFIDENCE_LEVELS: Final[tuple[Confidence, ...]] = ("none", "low", "medium", "high")
MAX_EVIDENCE_COMMANDS: Final = 6
MAX_COMMAND_CHARS: Final = 300


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """Why one rule fired: the commands, hashes and counts behind it."""

    code: str
    key: str  # stable: the same situation gives the same key
    commands: list[str] = []
    hashes: list[str] = []
    count: int = 0
    detail: str = ""
    confidence: Confidence = "low"
    seqs: list[int] = []


def rank(level: Confidence) -> int:
    return CONFIDENCE_LEVELS.index(level)


def by_count(count: int, threshold: int) -> Confidence:
    if count >= threshold + 2:
        return "high"
    if count >= threshold:
        return "medium"
    return "none"


def evidence_key(code: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]
    return f"{code}:{digest}"


def short(command: str) -> str:
    if len(command) <= MAX_COMMAND_CHARS:
        return command
    return command[: MAX_COMMAND_CHARS - 1] + "…"
