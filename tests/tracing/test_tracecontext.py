"""The W3C traceparent: parsed strictly, never raising; carried by envelopes as an optional,
bounded field that old envelopes do without; a malformed one is dropped, not the envelope."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.core.errors import InvalidEnvelope
from protocol.core.ids import PARENT_ID, IdKind
from protocol.core.limits import MAX_TRACEPARENT_CHARS
from protocol.core.tracecontext import (
    TRACEPARENT_ROOM,
    format_traceparent,
    parse_traceparent,
    task_trace_id,
)
from protocol.wire.envelopes import MessageEnvelope, TaskEnvelope, decode_envelope, encode_envelope
from tests.child.conftest import new_id

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_is_read() -> None:
    parsed = parse_traceparent(VALID)
    assert parsed is not None
    assert parsed.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert (parsed.span_id, parsed.flags) == (0x00F067AA0BA902B7, 1)
    assert format_traceparent(*parsed) == VALID
    assert len(TRACEPARENT_ROOM) == len(VALID)


def test_a_later_version_is_read_as_version_00() -> None:
    later = "01" + VALID[2:] + "-what-comes-next"
    assert parse_traceparent(later) == parse_traceparent(VALID)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "garbage",
        VALID.upper(),  # upper case is not allowed
        VALID + "-extra",  # version 00 has exactly four fields
        "ff" + VALID[2:],  # version ff is invalid
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        VALID[:-1],
        VALID.replace("-", "_"),
        "01" + VALID[2:] + "x",  # a later version's extra fields start with "-"
        "01" + VALID[2:] + "-" + "x" * MAX_TRACEPARENT_CHARS,  # longer than the bound
        " " + VALID,
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
    ],
)
def test_anything_else_is_no_trace_context(bad: str) -> None:
    assert parse_traceparent(bad) is None


@pytest.mark.parametrize("value", [None, 0, float("nan"), b"00-", ["x"]])
def test_non_strings_are_no_trace_context(value: object) -> None:
    assert parse_traceparent(value) is None


@given(st.text(max_size=300))
def test_parsing_never_raises(text: str) -> None:
    parsed = parse_traceparent(text)
    if parsed is not None:
        assert parsed.trace_id > 0 and parsed.span_id > 0


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.integers(0, 255))
def test_format_and_parse_round_trip(trace_id: int, span_id: int, flags: int) -> None:
    assert parse_traceparent(format_traceparent(trace_id, span_id, flags)) == (
        trace_id,
        span_id,
        flags,
    )


@given(st.text(max_size=80), st.text(max_size=80))
def test_a_tasks_trace_id_is_a_valid_one_of_its_session_and_its_id_alone(
    session_id: str, task_id: str
) -> None:
    trace_id = task_trace_id(session_id, task_id)
    parsed = parse_traceparent(format_traceparent(int(trace_id, 16), 1, 1))
    assert parsed is not None and f"{parsed.trace_id:032x}" == trace_id
    assert task_trace_id(session_id, task_id) == trace_id  # the same on every surface
    assert task_trace_id(session_id + "x", task_id) != trace_id
    assert task_trace_id(session_id, task_id + "x") != trace_id


def _message(**fields: object) -> MessageEnvelope:
    return MessageEnvelope(
        message_id=new_id(IdKind.MESSAGE),
        session_id=new_id(IdKind.SESSION),
        sender_id=new_id(IdKind.AGENT),
        target_id="planner",
        created_at=1.0,
        content="hello",
        **fields,  # type: ignore[arg-type]
    )


def test_an_envelope_carries_a_valid_traceparent() -> None:
    env = _message(traceparent=VALID)
    assert decode_envelope(encode_envelope(env)) == env


def test_an_old_envelope_without_the_field_still_decodes_and_none_is_not_written() -> None:
    env = _message()
    data = encode_envelope(env)
    assert b"traceparent" not in data  # omitted when absent: old readers see what they knew
    assert decode_envelope(data).traceparent is None


@pytest.mark.parametrize("bad", ["garbage", VALID.upper(), "ff" + VALID[2:], ""])
def test_a_malformed_traceparent_is_dropped_and_the_envelope_delivered(bad: str) -> None:
    env = _message(traceparent=bad)
    decoded = decode_envelope(encode_envelope(env))
    assert decoded == msgspec.structs.replace(env, traceparent=None)


def test_a_traceparent_over_its_bound_fails_decoding_like_any_field_out_of_bounds() -> None:
    env = TaskEnvelope(
        message_id=new_id(IdKind.MESSAGE),
        session_id=new_id(IdKind.SESSION),
        sender_id=PARENT_ID,
        target_id=new_id(IdKind.AGENT),
        created_at=1.0,
        task_id=new_id(IdKind.TASK),
        content="x",
        traceparent="0" * (MAX_TRACEPARENT_CHARS + 1),
    )
    with pytest.raises(InvalidEnvelope, match="traceparent"):
        decode_envelope(encode_envelope(env))


@pytest.mark.parametrize("value", [1, None, True, ["x"], {"a": 1}])
def test_a_traceparent_of_another_type_fails_decoding(value: object) -> None:
    data = msgspec.json.decode(encode_envelope(_message()))
    data["traceparent"] = value
    if value is None:
        assert decode_envelope(msgspec.json.encode(data)).traceparent is None
        return
    with pytest.raises(InvalidEnvelope, match="traceparent"):
        decode_envelope(msgspec.json.encode(data))
