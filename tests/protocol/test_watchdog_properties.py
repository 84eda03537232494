"""Watchdog property tests: normalisation is idempotent, the detector never crashes."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.watchdog import (
    CONFIDENCE_LEVELS,
    REASON_CODES,
    AlertGate,
    EventKind,
    EventWindow,
    ToolEvent,
    WatchdogConfig,
    detect_stuck,
    gate_verdict,
    hash_output,
    make_event,
    make_preview,
    merge_watchdog_layers,
    normalize_command,
    normalize_output,
    pair_calls,
)
from protocol.watchdog.replay import replay

# Text biased towards the things normalisation rewrites.
FRAGMENTS = st.sampled_from(
    [
        "\x1b[31m",
        "\x1b[0m",
        "\x1b",
        "\x1b]0;t\x07",
        "\r",
        "\n",
        "\r\n",
        " ",
        "\t",
        "pid ",
        "12345",
        "[4242]",
        "/tmp/",
        "/var/folders/x/",
        "tmpab12cd34",
        "2024-01-02",
        "T",
        "10:11:12",
        ":",
        ".5",
        "0.42s",
        "12ms",
        " s",
        "0x7f3a2c1d",
        "a1b2c3d4e5",
        "-",
        "123e4567-e89b-12d3-a456-426614174000",
        "1700000000",
        "<tmp>",
        "<pid>",
        "<",
        ">",
        "(",
        ")",
        "error",
        "a.py",
        "1",
    ]
)
TEXT = st.one_of(
    st.text(max_size=80),
    st.lists(FRAGMENTS | st.text(max_size=4), max_size=25).map("".join),
)
FAST = settings(max_examples=300, deadline=None, database=None)


@FAST
@given(TEXT)
def test_normalize_output_is_idempotent(text: str) -> None:
    once = normalize_output(text)
    assert normalize_output(once) == once
    assert "\x1b" not in once and "\r" not in once


@FAST
@given(TEXT)
def test_normalize_command_is_idempotent(text: str) -> None:
    once = normalize_command(text)
    assert normalize_command(once) == once
    assert once == once.strip() and "  " not in once


@FAST
@given(TEXT)
def test_hashing_a_normalised_output_gives_the_same_hash(text: str) -> None:
    assert hash_output(normalize_output(text)) == hash_output(text)


@FAST
@given(TEXT, st.integers(min_value=0, max_value=30))
def test_preview_respects_max_lines(text: str, max_lines: int) -> None:
    preview = make_preview(text, max_lines)
    assert len(preview.split("\n")) <= max(max_lines, 1)
    assert "\x1b" not in preview


COMMANDS = st.sampled_from(
    ["rg foo src", "cat a.py", "head a.py", "pytest", "tsc", "sed -i s/a/b/ a.py", "ls", ""]
)
OUTPUTS = st.sampled_from(
    ["", "same", "other", "a.ts(1,1): error TS2304: x", "pid 1", "pid 2", "  ", "boom"]
)


KINDS: list[EventKind] = [
    "tool_call",
    "tool_result",
    "error",
    "message",
    "condensation",
    "output",
]


@st.composite
def event_lists(draw: st.DrawFn) -> list[ToolEvent]:
    """Arbitrary event shapes, built directly (fast): any kind, pairing, hash or signature."""
    count = draw(st.integers(min_value=0, max_value=30))
    events = []
    ts = 0.0
    for seq in range(count):
        ts += draw(st.sampled_from([0.0, 1.0, 50.0, 400.0]))
        kind: EventKind = draw(st.sampled_from(KINDS))
        blank = draw(st.booleans())
        events.append(
            ToolEvent(
                agent_id="a",
                seq=seq,
                ts=ts,
                kind=kind,
                tool=draw(st.sampled_from(["bash", "read", "edit", ""])),
                command=draw(COMMANDS),
                output_hash=None if kind == "tool_call" else draw(st.sampled_from(["h1", "h2"])),
                exit_code=draw(st.sampled_from([None, 0, 1])),
                is_error=kind == "error" or draw(st.booleans()),
                source=draw(st.sampled_from(["agent", "agent", "user"])),
                call_id=draw(st.sampled_from([None, "c1", "c2"])),
                error_signature=draw(st.sampled_from([None, None, "sig"])),
                blank=blank,
            )
        )
    return events


@st.composite
def made_events(draw: st.DrawFn) -> list[ToolEvent]:
    """Events built by make_event from raw commands and outputs (slower, fewer examples)."""
    config = WatchdogConfig(max_preview_lines=3)
    count = draw(st.integers(min_value=0, max_value=20))
    events = []
    for seq in range(count):
        events.append(
            make_event(
                agent_id="a",
                seq=seq,
                ts=float(seq * draw(st.sampled_from([1, 100]))),
                kind=draw(st.sampled_from(KINDS)),
                tool=draw(st.sampled_from(["bash", "read", "edit", ""])),
                command=draw(COMMANDS),
                output=draw(OUTPUTS),
                exit_code=draw(st.sampled_from([None, 0, 1])),
                source=draw(st.sampled_from(["agent", "agent", "user"])),
                config=config,
            )
        )
    return events


DETECT = settings(max_examples=60, deadline=None, database=None)


@settings(max_examples=30, deadline=None, database=None)
@given(made_events())
def test_detector_never_crashes_on_made_events(events: list[ToolEvent]) -> None:
    now = events[-1].ts if events else 0.0
    verdict = detect_stuck(events, WatchdogConfig(), now)
    assert verdict.likely_stuck == (verdict.confidence in {"medium", "high"})


@DETECT
@given(
    event_lists(),
    st.integers(min_value=1, max_value=4),
    st.floats(0, 5000),
    st.sampled_from(["any", "identical"]),
    st.booleans(),
)
def test_detector_never_crashes_and_is_consistent(
    events: list[ToolEvent], threshold: int, extra: float, match: str, own: bool
) -> None:
    config = WatchdogConfig(repeat_threshold=threshold, typecheck_repeat_threshold=threshold)
    if own:  # every rule its own threshold, not the fallback
        config = merge_watchdog_layers(
            [("test", {f"{code}.threshold": threshold for code in REASON_CODES})], config
        )[0]
    config = merge_watchdog_layers([("test", {"monologue.match": match})], config)[0]
    now = (events[-1].ts if events else 0.0) + extra
    verdict = detect_stuck(events, config, now)
    assert verdict.confidence in CONFIDENCE_LEVELS
    assert verdict.likely_stuck == (verdict.confidence in {"medium", "high"})
    assert verdict.reasons == [c for c in REASON_CODES if c in {e.code for e in verdict.evidence}]
    assert (verdict.confidence == "none") == (verdict.reasons == [])
    for item in verdict.evidence:
        assert item.key.startswith(item.code + ":")
        assert item.count >= 1
    assert detect_stuck(events, config, now) == verdict  # deterministic
    msgspec.json.encode(verdict)
    decision, _ = gate_verdict(AlertGate(), verdict, config, now)
    assert decision.alert == verdict.likely_stuck


@DETECT
@given(
    event_lists(), st.sampled_from([None, "h1", "h2", "h3"]), st.sampled_from(["any", "identical"])
)
def test_no_rule_reads_an_instructions_hash(
    events: list[ToolEvent], hashed: str | None, match: str
) -> None:
    """Instructions are kept without a hash (make_event): whatever hash they carry, every
    verdict is the same."""
    config = merge_watchdog_layers([("test", {"monologue.match": match})], WatchdogConfig())[0]
    now = (events[-1].ts if events else 0.0) + 100.0
    changed = [
        msgspec.structs.replace(e, output_hash=hashed)
        if e.kind == "message" and e.source == "user"
        else e
        for e in events
    ]
    assert detect_stuck(changed, config, now) == detect_stuck(events, config, now)


@DETECT
@given(event_lists())
def test_a_trailing_instruction_always_clears_the_verdict(events: list[ToolEvent]) -> None:
    last_ts = events[-1].ts if events else 0.0
    instruction = ToolEvent(
        agent_id="a", seq=len(events), ts=last_ts, kind="message", source="user"
    )
    verdict = detect_stuck([*events, instruction], WatchdogConfig(), last_ts + 1000.0)
    assert verdict.confidence == "none" and not verdict.likely_stuck


@DETECT
@given(event_lists())
def test_logical_calls_count_each_call_once(events: list[ToolEvent]) -> None:
    calls = pair_calls(events)
    n_calls = sum(1 for e in events if e.kind == "tool_call")
    n_results = sum(1 for e in events if e.kind in {"tool_result", "error"})
    assert n_calls <= len(calls) <= n_calls + n_results
    assert len(calls) == n_calls + sum(1 for c in calls if c.seq == c.result_seq)


@DETECT
@given(event_lists(), st.integers(min_value=1, max_value=10))
def test_window_is_bounded_and_its_episode_is_a_suffix(events: list[ToolEvent], bound: int) -> None:
    window = EventWindow("a", bound)
    window.extend(events)
    retained = window.events()
    assert len(retained) == min(bound, len(events))
    assert retained == events[len(events) - len(retained) :]
    episode = window.episode()
    assert episode == retained[len(retained) - len(episode) :]
    assert not any(e.kind == "message" and e.source == "user" for e in episode[1:])


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"kind": st.sampled_from(["tool_call", "tool_result", "error", "message"])},
            optional={
                "tool": st.sampled_from(["bash", "read"]),
                "command": COMMANDS,
                "output": OUTPUTS,
                "exit_code": st.integers(-1, 2),
                "source": st.sampled_from(["user", "agent"]),
                "ts": st.floats(0, 1e6),
                "args": st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
            },
        ),
        max_size=20,
    )
)
def test_replay_handles_any_well_formed_transcript(lines: list[dict[str, object]]) -> None:
    for line in lines:
        if line["kind"] != "message":
            line.setdefault("tool", "bash")
    results = replay(lines)
    assert len(results) == len(lines) + 1
    assert results[-1]["final"] is True


@FAST
@given(st.text(alphabet=st.sampled_from(list("ab '\"\\\t$|")), max_size=20))
def test_word_splitting_matches_posix_shlex(text: str) -> None:
    import shlex

    from protocol.watchdog.classify import _split_words

    try:
        expected = shlex.split(text)
    except ValueError:  # unterminated quote: shlex gives up, we never do
        _split_words(text)
        return
    assert _split_words(text) == expected


@FAST
@given(st.text(max_size=20))
def test_quoted_words_split_back_to_themselves(word: str) -> None:
    from protocol.watchdog.classify import _split_words
    from protocol.watchdog.normalize import _quote

    assert _split_words(_quote(word)) == [word]
