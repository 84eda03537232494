"""A model provider refusing an agent's turn, as the agent's side reports it: :class:`Refusal`,
and the pure reading of a provider's error text (:func:`refusal_of`).

Rules:

1. **Two kinds.** ``rate_limited``: the provider refused the turn for its rate limit (HTTP 429
   or 529, or its words say "rate limit", "too many requests", "overloaded", "resource
   exhausted"); ``provider_error``: it failed the turn otherwise (a 5xx, a model error). The
   kind is the runtime event the agent's bridge publishes.
2. **Retry-After is taken as said, within bounds.** A provider's wait is read from its words
   when it gave one (``Retry-After: 20``, ``retry after 20 seconds``, OpenAI's ``Please try
   again in 1m12.5s`` / ``in 6ms``, Gemini's ``"retryDelay": "30s"``); a wait beyond
   :data:`~protocol.core.limits.MAX_RETRY_AFTER_S` is held to it; none said is ``None``.
3. **Bounded.** The provider is a :data:`~protocol.core.limits.ProviderName`; the text is cut
   to :data:`~protocol.core.limits.MAX_REFUSAL_TEXT_CHARS` (its head) by :func:`refusal_of`;
   a :class:`Refusal` decoded from elsewhere (a command agent's report) is checked by its types.
4. **A context overflow is not a refusal** (:func:`is_context_overflow`): the agent's own
   compaction answers it (Pi compacts and runs the turn again by itself).

Sans-IO: text in, values out.
"""

from __future__ import annotations

import math
import re
from typing import Final, Literal

import msgspec

from protocol.core.limits import (
    MAX_REFUSAL_TEXT_CHARS,
    MAX_RETRY_AFTER_S,
    PROVIDER_PATTERN,
    ProviderName,
    RefusalText,
    RetryAfterSeconds,
)

__all__ = [
    "UNKNOWN_PROVIDER",
    "Refusal",
    "RefusalKind",
    "classify",
    "is_context_overflow",
    "provider_or_unknown",
    "refusal_of",
    "render_resume_note",
    "retry_after_in",
]

RefusalKind = Literal["rate_limited", "provider_error"]
#: the provider's name when the agent's side does not know it
UNKNOWN_PROVIDER: Final = "unknown"


class Refusal(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One refused turn: its kind, the provider, the wait it asked for, its words. What a
    command agent's ``shepherd-child rate-limited|provider-error`` hands its bridge (forbid
    unknown fields: a report is written by the agent, so nothing unchecked rides along)."""

    kind: RefusalKind
    provider: ProviderName
    retry_after_s: RetryAfterSeconds | None = None
    text: RefusalText = ""


_STATUS = re.compile(r"^\s*(\d{3})\b")
_RATE_WORDS = re.compile(
    r"rate.?limit|too many requests|overloaded|resource.?exhausted|throttl", re.IGNORECASE
)
_RATE_STATUS = frozenset({429, 529})
_OVERFLOW = re.compile(
    r"prompt is too long|request_too_large|exceeds the context window|maximum context length"
    r"|context[_ ]length[_ ]exceeded|context window exceeds limit|exceeds the available context"
    r"|input is too long for requested model|token limit exceeded|greater than the context length"
    r"|reduce the length of the messages|model_context_window_exceeded",
    re.IGNORECASE,
)
_NUMBER = r"(\d+(?:\.\d+)?)"
_UNIT_S = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
#: "Retry-After: 20", "retry after 20 seconds", "retry-after=1.5s"
_RETRY_AFTER = re.compile(
    rf"retry[-_ ]?after\W{{0,3}}{_NUMBER}\s*"
    r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)?\b",
    re.IGNORECASE,
)
#: "try again in 1m12.5s", "try again in 6ms", "try again in 20 seconds"
_TRY_AGAIN = re.compile(
    r"try again in\s+((?:\d+(?:\.\d+)?\s*(?:ms|h|m(?!s)|s|seconds?|minutes?|hours?)\s*)+)",
    re.IGNORECASE,
)
_PART = re.compile(rf"{_NUMBER}\s*(ms|h|m(?!s)|s|seconds?|minutes?|hours?)", re.IGNORECASE)
#: Gemini: "retryDelay": "30s"
_RETRY_DELAY = re.compile(rf"retry_?delay\W{{0,4}}{_NUMBER}\s*s", re.IGNORECASE)


def classify(text: str) -> RefusalKind:
    """``rate_limited`` or ``provider_error`` for a provider's error text (rule 1)."""
    status = _STATUS.match(text)
    if status is not None and int(status.group(1)) in _RATE_STATUS:
        return "rate_limited"
    return "rate_limited" if _RATE_WORDS.search(text) else "provider_error"


def is_context_overflow(text: str) -> bool:
    """The error says the conversation no longer fits the model's context (rule 4)."""
    return classify(text) == "provider_error" and _OVERFLOW.search(text) is not None


def _seconds(number: str, unit: str | None) -> float:
    unit = (unit or "s").lower()
    key = "ms" if unit.startswith("mil") or unit == "ms" else unit[0]
    return float(number) * _UNIT_S.get(key, 1.0)


def retry_after_in(text: str) -> float | None:
    """The wait the provider's words ask for, in seconds (rule 2), or ``None``."""
    found: float | None = None
    if (m := _RETRY_AFTER.search(text)) is not None:
        found = _seconds(m.group(1), m.group(2))
    elif (m := _TRY_AGAIN.search(text)) is not None:
        found = sum(_seconds(n, u) for n, u in _PART.findall(m.group(1)))
    elif (m := _RETRY_DELAY.search(text)) is not None:
        found = float(m.group(1))
    if found is None or not math.isfinite(found):
        return None
    return min(max(found, 0.0), MAX_RETRY_AFTER_S)


def provider_or_unknown(name: object) -> str:
    """``name`` when it is a valid provider name, else :data:`UNKNOWN_PROVIDER`."""
    if isinstance(name, str) and re.match(PROVIDER_PATTERN, name):
        return name
    return UNKNOWN_PROVIDER


def refusal_of(text: str, provider: str) -> Refusal:
    """A provider's error text as a :class:`Refusal` (rules 1 to 3): ``provider`` is used when
    valid (else ``unknown``), the text cut to its head."""
    kind = classify(text)
    wait = retry_after_in(text) if kind == "rate_limited" else None
    if len(text) > MAX_REFUSAL_TEXT_CHARS:
        note = "\n[… cut by shepherd …]"
        text = text[: MAX_REFUSAL_TEXT_CHARS - len(note)] + note
    return Refusal(kind=kind, provider=provider_or_unknown(provider), retry_after_s=wait, text=text)


def render_resume_note(refusal: Refusal) -> str:
    """What an agent whose turn was refused is told when it may go on (its conversation has
    the refused turn: it continues, nothing is sent twice)."""
    why = "rate limit" if refusal.kind == "rate_limited" else "error"
    return (
        f"[Shepherd] Your previous turn was stopped by the model provider ({refusal.provider}: "
        f"{why}) before you could finish it. The provider is available again: continue where "
        "you stopped."
    )
