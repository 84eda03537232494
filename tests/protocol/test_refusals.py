"""The pure reading of a provider's refusal (protocol.records.refusals): its kind, the wait its
words ask for, the bounds of what is reported, and the Struct a command agent's report is."""

from __future__ import annotations

import msgspec
import pytest

from protocol.core.limits import MAX_REFUSAL_TEXT_CHARS, MAX_RETRY_AFTER_S
from protocol.records.refusals import (
    Refusal,
    classify,
    is_context_overflow,
    provider_or_unknown,
    refusal_of,
    retry_after_in,
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("429 Rate limit reached for gpt-4o. Please try again in 2s.", "rate_limited"),
        ("429 status code (no body)", "rate_limited"),
        ("529 Overloaded", "rate_limited"),
        ('{"type":"error","error":{"type":"overloaded_error"}}', "rate_limited"),
        ("RESOURCE_EXHAUSTED: quota", "rate_limited"),
        ("Too Many Requests", "rate_limited"),
        ("ThrottlingException: slow down", "rate_limited"),
        ("500 Internal server error", "provider_error"),
        ("503 Service Unavailable", "provider_error"),
        ("OpenAI API key is required.", "provider_error"),
        ("Provider finish_reason: content_filter", "provider_error"),
        ("", "provider_error"),
    ],
)
def test_the_kind_comes_from_the_status_or_the_words(text: str, kind: str) -> None:
    assert classify(text) == kind


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("429 Rate limit reached. Please try again in 2s.", 2.0),
        ("Please try again in 1m12.5s.", 72.5),
        ("Please try again in 6ms.", 0.006),
        ("please try again in 20 seconds", 20.0),
        ("Retry-After: 20", 20.0),
        ("retry after 3 seconds", 3.0),
        ("retry-after=1.5s", 1.5),
        ('"retryDelay": "30s"', 30.0),
        ("retry-after: 99999999", MAX_RETRY_AFTER_S),  # held to the bound, not dropped
        ("429 status code (no body)", None),
        ("retry after 1e9", None),
        ("try again later", None),
    ],
)
def test_a_retry_after_is_read_from_the_words(text: str, seconds: float | None) -> None:
    found = retry_after_in(text)
    assert (found is None) if seconds is None else found == pytest.approx(seconds)


def test_a_refusal_is_bounded_and_names_a_valid_provider() -> None:
    refusal = refusal_of("429 rate limit " + "x" * 100_000 + " try again in 5s", "my provider")
    assert refusal.kind == "rate_limited" and refusal.provider == "unknown"
    assert len(refusal.text) == MAX_REFUSAL_TEXT_CHARS and refusal.text.endswith(
        "cut by shepherd …]"
    )
    assert refusal.retry_after_s == 5.0  # read before the text is cut
    assert refusal_of("500 boom, retry after 9", "openai").retry_after_s is None  # an error
    assert provider_or_unknown("fake.local-1") == "fake.local-1"
    for bad in ("", " ", "open ai", "x" * 65, None, 3):
        assert provider_or_unknown(bad) == "unknown"
    # what refusal_of makes always passes its own Struct's checks
    encoded = msgspec.json.encode(refusal)
    assert msgspec.json.decode(encoded, type=Refusal) == refusal


@pytest.mark.parametrize(
    "report",
    [
        {"kind": "rate_limited", "provider": ""},
        {"kind": "rate_limited", "provider": "a b"},
        {"kind": "rate_limited", "provider": "p", "retry_after_s": -1},
        {"kind": "rate_limited", "provider": "p", "retry_after_s": 1e9},
        {"kind": "rate_limited", "provider": "p", "text": "t" * (MAX_REFUSAL_TEXT_CHARS + 1)},
        {"kind": "quota", "provider": "p"},
        {"kind": "rate_limited", "provider": "p", "extra": 1},
    ],
)
def test_a_hostile_report_does_not_decode(report: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(report, Refusal)


def test_a_context_overflow_is_not_a_refusal() -> None:
    assert is_context_overflow("400 This model's maximum context length is 128000 tokens")
    assert is_context_overflow("prompt is too long: 210000 tokens > 200000 maximum")
    assert not is_context_overflow("429 Too many tokens per minute: rate limit")
    assert not is_context_overflow("500 Internal server error")
