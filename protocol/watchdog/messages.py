"""Watchdog rules over what an agent says between its tool calls: monologue, empty responses,
condensation loops.

Rules (thresholds are the rules' ``.threshold`` settings, see :mod:`protocol.watchdog.rules`)
--------------------------------------------------------------------------------------------
Only the episode counts (events since the last instruction, so no user input falls inside a
streak). A streak is a run of events with no tool result inside it: a result is the agent
getting something new to think about, which a bare tool call (one that never answered) is not.

``monologue``
    >= T non-empty agent messages in a row with no tool result between, whatever their text
    (``monologue.match = "any"``, the default) or all with the same text (``"identical"``:
    a different text starts a new streak) -> medium; high at T+2. Empty messages neither
    count nor break it (they are the next rule's).
``empty_responses``
    >= T empty or whitespace-only agent messages in a row: a tool result or a real
    (non-empty) agent message breaks the streak -> medium; high at T+2.
``condensation_loop``
    >= T context condensations in a row with no tool result and no agent message between (the
    agent does nothing but summarise its memory) -> medium; high at T+2.

Transparent to all three, as to every other rule: ``output`` (a command's printed lines,
bridge notes), the watchdog's rescue message, and a condensation to the first two (it is
neither progress nor a failure).

Sans-IO: pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from protocol.watchdog.config import WatchdogConfig, rule_threshold
from protocol.watchdog.events import ToolEvent
from protocol.watchdog.evidence import (
    MAX_EVIDENCE_COMMANDS,
    Evidence,
    by_count,
    evidence_key,
    short,
)

__all__ = ["message_rules"]

_RESULT_KINDS: Final = frozenset({"tool_result", "error"})


def _first_line(event: ToolEvent) -> str:
    return short(event.preview.split("\n", 1)[0])


def _streaks(
    episode: Sequence[ToolEvent], identical: bool
) -> tuple[list[list[ToolEvent]], list[list[ToolEvent]], list[list[ToolEvent]]]:
    """(monologue streaks, empty-response streaks, condensation streaks) of the episode."""
    talk: list[list[ToolEvent]] = [[]]
    empty: list[list[ToolEvent]] = [[]]
    condensed: list[list[ToolEvent]] = [[]]

    def cut(*streaks: list[list[ToolEvent]]) -> None:
        for streak in streaks:
            if streak[-1]:
                streak.append([])

    for event in episode:
        if event.kind == "message" and event.source == "watchdog":
            continue  # the rescue message: the agent did not say it, and it ends nothing
        if event.kind in _RESULT_KINDS or (event.kind == "message" and event.source == "user"):
            cut(talk, empty, condensed)
        elif event.kind == "message":
            cut(condensed)
            if event.blank:
                empty[-1].append(event)
                continue
            cut(empty)
            if identical and talk[-1] and talk[-1][-1].output_hash != event.output_hash:
                cut(talk)
            talk[-1].append(event)
        elif event.kind == "condensation":
            condensed[-1].append(event)
    return (
        [s for s in talk if s],
        [s for s in empty if s],
        [s for s in condensed if s],
    )


def message_rules(episode: Sequence[ToolEvent], config: WatchdogConfig) -> list[Evidence]:
    """Every ``monologue``, ``empty_responses`` and ``condensation_loop`` evidence item."""
    identical = config.monologue_match == "identical"
    talk, empty, condensed = _streaks(episode, identical)
    found: list[Evidence] = []
    threshold = rule_threshold(config, "monologue")
    for streak in talk:
        level = by_count(len(streak), threshold)
        if level == "none":
            continue
        hashes = list(dict.fromkeys(m.output_hash or "" for m in streak))
        what = (
            f"the same message {len(streak)} times in a row"
            if identical
            else f"{len(streak)} agent messages in a row"
        )
        found.append(
            Evidence(
                code="monologue",
                key=evidence_key("monologue", config.monologue_match, str(streak[0].seq)),
                hashes=hashes[:MAX_EVIDENCE_COMMANDS],
                count=len(streak),
                detail=f"{what}, no tool result between: {_first_line(streak[-1])}",
                confidence=level,
                seqs=[m.seq for m in streak],
            )
        )
    threshold = rule_threshold(config, "empty_responses")
    for streak in empty:
        level = by_count(len(streak), threshold)
        if level != "none":
            found.append(
                Evidence(
                    code="empty_responses",
                    key=evidence_key("empty_responses", str(streak[0].seq)),
                    count=len(streak),
                    detail=f"{len(streak)} empty responses in a row, no tool result between",
                    confidence=level,
                    seqs=[m.seq for m in streak],
                )
            )
    threshold = rule_threshold(config, "condensation_loop")
    for streak in condensed:
        level = by_count(len(streak), threshold)
        if level != "none":
            found.append(
                Evidence(
                    code="condensation_loop",
                    key=evidence_key("condensation_loop", str(streak[0].seq)),
                    count=len(streak),
                    detail=f"{len(streak)} context condensations in a row, no tool result or "
                    "message between",
                    confidence=level,
                    seqs=[c.seq for c in streak],
                )
            )
    return found
