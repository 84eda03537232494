"""The answers a watchdog agent gets (``shepherd-child watchdog-*``), and its alert's text.

Rules
-----
* Every answer is bounded: at most :data:`~protocol.core.limits.MAX_WATCHDOG_TARGETS` agents
  (the most recently active first, with how many there are in all), at most the asked number of
  an agent's newest events, each a normalised command, an output hash and a short preview
  (never a whole output). An answer still too big for one envelope (a session may lower
  ``max_envelope_bytes`` to 1 KiB) drops what matters least first, its oldest events, its
  least recently active agents, its least confident verdicts, and says how many (``cut``).
* ``stuck`` without an agent runs the detector over the listed agents and names those with a
  confidence above ``none``, the most confident first (ties: the most recently active).
* The alert a watchdog agent writes is quoted as written, under a header naming who wrote it
  and whom it is about, followed by the detector's own verdict on that agent: the parent sees
  both the agent's reasoning and the evidence. It says that nothing was done.

Sans-IO: pure functions over the watchdog's data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from protocol.core.limits import MAX_WATCHDOG_TARGETS
from protocol.watchdog.detect import CONFIDENCE_LEVELS, Verdict
from protocol.watchdog.targets import WatchdogTarget

__all__ = ["fit_events", "fit_list", "newest_targets", "render_agent_alert", "stuck_list"]


def newest_targets(
    targets: Iterable[WatchdogTarget], limit: int = MAX_WATCHDOG_TARGETS
) -> tuple[list[WatchdogTarget], int]:
    """The ``limit`` most recently active targets (newest first), and how many there are."""
    every = sorted(targets, key=lambda t: (t.last_active_at, t.created_at), reverse=True)
    return every[:limit], len(every)


def stuck_list(verdicts: Iterable[tuple[WatchdogTarget, str | None, Verdict]]) -> list[Any]:
    """The agents whose verdict is above ``none``: the most confident first, then the most
    recently active (``verdicts`` come newest first)."""
    rank = {level: i for i, level in enumerate(CONFIDENCE_LEVELS)}
    found = [
        {
            "agent_id": target.id,
            "name": target.name,
            "task_id": task_id,
            "likely_stuck": verdict.likely_stuck,
            "confidence": verdict.confidence,
            "reasons": list(verdict.reasons),
        }
        for target, task_id, verdict in verdicts
        if verdict.confidence != "none"
    ]
    # sorted() is stable: within one confidence the newest-first order is kept
    return sorted(found, key=lambda item: -rank.get(item["confidence"], 0))


def fit_events(answer: dict[str, Any], budget: int) -> dict[str, Any]:
    """``answer`` (with its ``events``, oldest first) fitted to ``budget`` bytes of JSON:
    its oldest events dropped until it fits, and ``cut`` says how many went."""
    return fit_list(answer, "events", budget, keep="newest")


def fit_list(
    answer: dict[str, Any], key: str, budget: int, *, keep: Literal["newest", "first"]
) -> dict[str, Any]:
    """``answer`` fitted to ``budget`` bytes of JSON by dropping items of its list ``key``:
    from its start (``keep="newest"``: the list is oldest first) or from its end
    (``keep="first"``: it is most important first); ``cut`` says how many went. It may still
    not fit (its other fields alone are too big): the caller checks the size again."""
    items = list(answer.get(key, ()))
    size = len(msgspec.json.encode(answer))
    if size <= budget:
        return answer
    cut = 0
    while items and size > budget:
        # drop in proportion to the excess (at least one): a few passes, not one per item
        drop = max(1, len(items) * (size - budget) // max(size, 1))
        items = items[drop:] if keep == "newest" else items[: len(items) - drop]
        cut += drop
        size = len(msgspec.json.encode({**answer, key: items, "cut": cut}))
    return {**answer, key: items, "cut": cut}


def render_agent_alert(
    *,
    reporter: str,
    reporter_id: str,
    agent_name: str,
    agent_id: str,
    task_id: str | None,
    text: str,
    verdict: Verdict,
) -> str:
    """The ``[Watchdog Alert]`` a watchdog agent sends about ``agent_name``."""
    lines = [
        f"[Watchdog Alert] from the watchdog agent {reporter} ({reporter_id})",
        f"agent: {agent_name} ({agent_id})",
        f"task: {task_id or 'none'}",
        f"{reporter} says:",
        *(f"  {line}" for line in text.strip().splitlines()),
        f"detector: likely_stuck {'yes' if verdict.likely_stuck else 'no'} "
        f"(confidence {verdict.confidence}), reasons: {', '.join(verdict.reasons) or 'none'}",
        "No action was taken: the agent keeps running.",
    ]
    return "\n".join(lines)
