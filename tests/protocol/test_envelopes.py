"""protocol.wire.envelopes: round trips, strict decoding, address validation, and a decoding fuzz.

The fuzz holds decode_envelope to its one promise: whatever bytes arrive in an inbox, the
answer is an envelope or ``invalid_envelope`` — never another exception that would take the
receiving actor down.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.core.errors import (
    AgentBusy,
    DuplicateIds,
    ErrorInfo,
    ForbiddenSender,
    InvalidArgument,
    InvalidEnvelope,
    InvalidHandle,
    InvalidTransition,
    LimitExceeded,
    MixedIds,
    SessionUnavailable,
    ShepherdError,
    UnresolvedRequests,
    error_from_info,
)
from protocol.core.limits import MAX_NESTING, MAX_TEXT_CHARS
from protocol.records.tasks import TaskResult
from protocol.wire.envelopes import (
    AckEnvelope,
    CallEnvelope,
    ControlEnvelope,
    Envelope,
    MessageEnvelope,
    NoticeEnvelope,
    QueryEnvelope,
    ReplyEnvelope,
    ResultEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
    decode_envelope,
    encode_envelope,
    validate_addresses,
)

SESSION = "shepherd-session-5e5510aa"
AGENT = "shepherd-agent-a9e07001"
PEER = "shepherd-agent-a9e07002"
TASK = "shepherd-task-7a5c0001"
MSG = "shepherd-message-00000001"
OTHER_MSG = "shepherd-message-00000002"
CLIENT = "shepherd-message-c11e0001"  # a CLI client is addressed by its call's message id


def _common(sender: str = AGENT, target: str = "shepherd") -> dict[str, Any]:
    return {
        "message_id": MSG,
        "session_id": SESSION,
        "sender_id": sender,
        "target_id": target,
        "created_at": 12.5,
    }


RESULT = TaskResult(
    task_id=TASK,
    agent_id=AGENT,
    status="completed",
    ok=True,
    return_code=0,
    completed_at=20.0,
    text="done",
)

#: One envelope of every kind, with its optional fields filled in so they round-trip too.
SAMPLES: dict[str, Envelope] = {
    "message": MessageEnvelope(
        **_common(target=PEER),
        content="which file?",
        task_id=TASK,
        thread_id="t-1",
        expects_reply=True,
        delivery="steer",
        reply_timeout_s=30.0,
        sender_name="scout",
        capability="s3cret",
    ),
    "reply": ReplyEnvelope(
        **_common(sender=PEER, target=AGENT),
        content="src/app.py",
        reply_to=OTHER_MSG,
        task_id=TASK,
        thread_id="t-1",
        sender_name="planner",
        late=True,
    ),
    "task": TaskEnvelope(
        **_common(sender="shepherd", target=AGENT),
        task_id=TASK,
        content="fix the bug",
        deadline_at=99.0,
    ),
    "task_done": TaskDoneEnvelope(
        **_common(),
        task_id=TASK,
        status="blocked",
        summary="need access",
        error="permission denied",
        cancel_requests=True,
        reply_inbox="shepherd-message-5be11001",  # sent from the agent's shell: one-shot inbox
    ),
    "runtime": RuntimeEnvelope(
        **_common(),
        event="tool_result",
        tool="bash",
        command="pytest -q",
        output="1 failed",
        exit_code=1,
        is_error=True,
        text="hm",
        pid=4242,
    ),
    "ack": AckEnvelope(
        **_common(sender="shepherd", target=AGENT),
        ack_for=OTHER_MSG,
        accepted=False,
        error=ErrorInfo(code="agent_busy", message="busy"),
        request_id=OTHER_MSG,
        task_id=TASK,
        result=RESULT,
        data={"events": [{"seq": 1, "preview": "ok"}], "dropped": 0},
    ),
    "query": QueryEnvelope(
        **_common(),
        op="events",
        agent=PEER,
        limit=20,
        reply_inbox=OTHER_MSG,
    ),
    "control": ControlEnvelope(
        **_common(sender="shepherd", target=AGENT),
        action="cancel_task",
        task_id=TASK,
        reason="parent cancelled",
    ),
    "notice": NoticeEnvelope(
        **_common(sender="shepherd", target=AGENT),
        code="request_timed_out",
        text="no answer",
        ref_id=OTHER_MSG,
    ),
    "call": CallEnvelope(
        **_common(sender=CLIENT, target="shepherd"),
        op="watch",
        args={"ids": [TASK], "nested": {"a": [1, 2.5, None, True]}},
        reply_inbox=CLIENT,
    ),
    "result": ResultEnvelope(
        **_common(sender="shepherd", target=CLIENT),
        call_id=CLIENT,
        ok=False,
        data={"k": [1, "two", None]},
        error=ErrorInfo(code="invalid_handle", message="nope"),
    ),
}
KINDS = sorted(SAMPLES)


def _as_dict(envelope: Envelope) -> dict[str, Any]:
    raw = json.loads(encode_envelope(envelope))
    assert isinstance(raw, dict)
    return raw


def _encode(raw: dict[str, Any]) -> bytes:
    return json.dumps(raw).encode()


def _all_subclasses(cls: type[Envelope]) -> set[type[Envelope]]:
    out: set[type[Envelope]] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_all_subclasses(sub)}
    return out


# ----------------------------------------------------------------------------- round trips


def test_samples_cover_every_envelope_kind() -> None:
    tags = {cls.__struct_config__.tag for cls in _all_subclasses(Envelope)}
    assert tags == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip(kind: str) -> None:
    envelope = SAMPLES[kind]
    data = encode_envelope(envelope)
    assert json.loads(data)["kind"] == kind
    decoded = decode_envelope(data)
    assert type(decoded) is type(envelope)
    assert decoded == envelope


@pytest.mark.parametrize("kind", KINDS)
def test_capability_is_never_needed_to_decode(kind: str) -> None:
    raw = _as_dict(msgspec.structs.replace(SAMPLES[kind], capability=""))
    assert "capability" not in raw  # defaults are omitted on the wire
    assert decode_envelope(_encode(raw)).capability == ""


@pytest.mark.parametrize("kind", KINDS)
def test_minimal_envelope_with_only_required_fields_decodes(kind: str) -> None:
    cls = type(SAMPLES[kind])
    required = {f.name for f in msgspec.structs.fields(cls) if f.required}
    raw = {k: v for k, v in _as_dict(SAMPLES[kind]).items() if k in required or k == "kind"}
    decoded = decode_envelope(_encode(raw))
    assert type(decoded) is cls


# ----------------------------------------------------------------------------- strict decoding


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_field_is_refused_and_named(kind: str) -> None:
    raw = _as_dict(SAMPLES[kind])
    raw["sneaky_field"] = 1
    with pytest.raises(InvalidEnvelope, match="sneaky_field") as info:
        decode_envelope(_encode(raw))
    assert info.value.code == "invalid_envelope"


@pytest.mark.parametrize(
    ("kind", "field", "value", "path"),
    [
        ("message", "expects_reply", "yes", "$.expects_reply"),
        ("message", "delivery", "shout", "$.delivery"),
        ("message", "created_at", "now", "$.created_at"),
        ("message", "content", None, "$.content"),
        ("task_done", "status", "done", "$.status"),
        ("runtime", "event", "agent_settled", "$.event"),
        ("runtime", "exit_code", "1", "$.exit_code"),
        ("ack", "error", {"code": 1, "message": "x"}, "$.error.code"),
        ("ack", "result", {"task_id": TASK}, "$.result"),
        ("control", "action", "kill", "$.action"),
        ("call", "args", [1, 2], "$.args"),
    ],
)
def test_wrong_type_names_the_path(kind: str, field: str, value: object, path: str) -> None:
    raw = _as_dict(SAMPLES[kind])
    raw[field] = value
    with pytest.raises(InvalidEnvelope) as info:
        decode_envelope(_encode(raw))
    assert path in info.value.message


@pytest.mark.parametrize("kind", KINDS)
def test_missing_required_field_is_named(kind: str) -> None:
    raw = _as_dict(SAMPLES[kind])
    del raw["session_id"]
    with pytest.raises(InvalidEnvelope, match="session_id"):
        decode_envelope(_encode(raw))


def test_unknown_kind() -> None:
    raw = _as_dict(SAMPLES["message"])
    raw["kind"] = "gossip"
    with pytest.raises(InvalidEnvelope, match="gossip") as info:
        decode_envelope(_encode(raw))
    assert "$.kind" in info.value.message


def test_missing_kind() -> None:
    raw = _as_dict(SAMPLES["message"])
    del raw["kind"]
    with pytest.raises(InvalidEnvelope, match="kind"):
        decode_envelope(_encode(raw))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"{not json}",
        b"\xff\xfe\x00",
        b'{"kind": "message",}',
        b"NaN",
        encode_envelope(SAMPLES["message"]) + b" trailing",
        encode_envelope(SAMPLES["message"])[:-1],  # a partial file
    ],
)
def test_invalid_json(data: bytes) -> None:
    with pytest.raises(InvalidEnvelope, match="not valid JSON"):
        decode_envelope(data)


@pytest.mark.parametrize("data", [b"[]", b"null", b"1", b'"message"', b"true"])
def test_json_that_is_not_an_object(data: bytes) -> None:
    with pytest.raises(InvalidEnvelope, match="schema"):
        decode_envelope(data)


def test_oversized_envelope_names_its_size_and_the_limit() -> None:
    data = encode_envelope(SAMPLES["message"])
    with pytest.raises(InvalidEnvelope) as info:
        decode_envelope(data, max_bytes=len(data) - 1)
    assert str(len(data)) in info.value.message
    assert str(len(data) - 1) in info.value.message


def test_envelope_exactly_at_the_limit_is_accepted() -> None:
    data = encode_envelope(SAMPLES["message"])
    assert decode_envelope(data, max_bytes=len(data)) == SAMPLES["message"]


def test_size_is_checked_before_parsing() -> None:
    with pytest.raises(InvalidEnvelope, match="limit"):
        decode_envelope(b"x" * 100, max_bytes=10)  # not JSON either: size wins


@pytest.mark.parametrize("kind", ["call", "result"])
@pytest.mark.parametrize("depth", [2_000, 50_000])
def test_deeply_nested_free_form_data_is_an_invalid_envelope(kind: str, depth: int) -> None:
    # A few kilobytes of brackets in `args` / `data` (well under the 64 KiB limit) must be
    # refused like any other bad envelope, not escape as RecursionError.
    raw = _as_dict(SAMPLES[kind])
    field = "args" if kind == "call" else "data"
    nested = b"[" * depth + b"]" * depth
    data = _encode({**raw, field: "@@"}).replace(b'"@@"', b'{"x":' + nested + b"}")
    with pytest.raises(InvalidEnvelope):
        decode_envelope(data)


def test_odd_strings_at_the_text_bound_survive_a_round_trip() -> None:
    tail = '\x00\u2028\U0001f600\\"' + "\n"
    content = "x" * (MAX_TEXT_CHARS - len(tail)) + tail
    envelope = msgspec.structs.replace(SAMPLES["message"], content=content)
    assert decode_envelope(encode_envelope(envelope)).content == content  # type: ignore[union-attr]


def test_a_text_over_the_bound_fails_decoding_naming_the_field() -> None:
    envelope = msgspec.structs.replace(SAMPLES["message"], content="x" * (MAX_TEXT_CHARS + 1))
    with pytest.raises(InvalidEnvelope, match=r"\$\.content"):
        decode_envelope(encode_envelope(envelope))


@pytest.mark.parametrize("value", [0.0, -1.0, 1e300, float("inf"), float("nan")])
def test_a_reply_deadline_out_of_bounds_fails_decoding(value: float) -> None:
    raw = msgspec.json.decode(encode_envelope(SAMPLES["message"]))
    raw["expects_reply"] = True
    raw["reply_timeout_s"] = value
    data = json.dumps(raw).encode()  # json writes NaN and Infinity, as a forger could
    with pytest.raises(InvalidEnvelope):
        decode_envelope(data)


# ----------------------------------------------------------------------------- addresses


def _with(kind: str, **changes: Any) -> Envelope:
    return msgspec.structs.replace(SAMPLES[kind], **changes)


@pytest.mark.parametrize("kind", KINDS)
def test_samples_have_valid_addresses(kind: str) -> None:
    validate_addresses(SAMPLES[kind])


BAD_SHAPES = [
    "",
    "../x",
    "shepherd-message-../..",
    "scout",
    "shepherd",
    TASK,
    AGENT,
    SESSION,
    "shepherd-message-0000000G",
    "shepherd-message-00000001\x00",
    "shepherd-message-00000001/..",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", BAD_SHAPES)
def test_message_id_must_be_a_message_id(kind: str, value: str) -> None:
    with pytest.raises(InvalidEnvelope, match="message_id"):
        validate_addresses(_with(kind, message_id=value))


@pytest.mark.parametrize(
    "value", ["", "../x", MSG, AGENT, "shepherd-session-zz", f"{SESSION} ", f"{SESSION}/.."]
)
def test_session_id_must_be_a_session_id(value: str) -> None:
    with pytest.raises(InvalidEnvelope, match="session_id"):
        validate_addresses(_with("message", session_id=value))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sender", ["shepherd", AGENT])
def test_sender_may_be_the_parent_or_an_agent_id(kind: str, sender: str) -> None:
    validate_addresses(_with(kind, sender_id=sender))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "sender", ["scout", TASK, SESSION, "", "../x", "Shepherd", f"{AGENT}\x00", f"{AGENT}/.."]
)
def test_sender_may_not_be_a_name_or_another_kind_of_id(kind: str, sender: str) -> None:
    with pytest.raises(InvalidEnvelope, match="sender_id"):
        validate_addresses(_with(kind, sender_id=sender))


@pytest.mark.parametrize("kind", KINDS)
def test_sender_may_be_a_client_only_for_call_and_result(kind: str) -> None:
    envelope = _with(kind, sender_id=CLIENT)
    if kind in {"call", "result"}:
        validate_addresses(envelope)
    else:
        with pytest.raises(InvalidEnvelope, match="sender_id"):
            validate_addresses(envelope)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", ["shepherd", PEER])
def test_target_may_be_the_parent_or_an_agent_id(kind: str, target: str) -> None:
    validate_addresses(_with(kind, target_id=target))


@pytest.mark.parametrize("kind", KINDS)
def test_agent_name_as_target_only_for_message_and_reply(kind: str) -> None:
    envelope = _with(kind, target_id="planner")
    if kind in {"message", "reply"}:
        validate_addresses(envelope)
    else:
        with pytest.raises(InvalidEnvelope, match="target_id"):
            validate_addresses(envelope)


@pytest.mark.parametrize("kind", KINDS)
def test_client_as_target_only_for_call_and_result(kind: str) -> None:
    envelope = _with(kind, target_id=CLIENT)
    if kind in {"call", "result"}:
        validate_addresses(envelope)
    else:
        with pytest.raises(InvalidEnvelope, match="target_id"):
            validate_addresses(envelope)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "target", ["", "../x", "Planner", "planner/..", TASK, SESSION, "a" * 40, "planner\x00"]
)
def test_bad_targets_are_refused(kind: str, target: str) -> None:
    with pytest.raises(InvalidEnvelope, match="target_id"):
        validate_addresses(_with(kind, target_id=target))


def test_task_done_without_a_task_id_means_the_active_task() -> None:
    raw = _as_dict(SAMPLES["task_done"])
    del raw["task_id"]
    decoded = decode_envelope(_encode(raw))
    assert isinstance(decoded, TaskDoneEnvelope)
    assert decoded.task_id is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [TASK, AGENT, "shepherd", "/run/x", "../x", ""])
def test_reply_inbox_must_be_a_message_id(kind: str, value: str) -> None:
    validate_addresses(_with(kind, reply_inbox=OTHER_MSG))
    with pytest.raises(InvalidEnvelope, match="reply_inbox"):
        validate_addresses(_with(kind, reply_inbox=value))


TASK_ID_KINDS = ["message", "reply", "task", "task_done", "ack", "control"]


@pytest.mark.parametrize("kind", TASK_ID_KINDS)
@pytest.mark.parametrize("value", [MSG, AGENT, "../x", "", "shepherd-task-../..", f"{TASK}/.."])
def test_task_id_must_be_a_task_id(kind: str, value: str) -> None:
    with pytest.raises(InvalidEnvelope, match="task_id"):
        validate_addresses(_with(kind, task_id=value))


@pytest.mark.parametrize(
    ("kind", "field"),
    [("reply", "reply_to"), ("ack", "ack_for"), ("result", "call_id")],
)
@pytest.mark.parametrize("value", [TASK, AGENT, "../x", "", "shepherd-message-../.."])
def test_message_references_must_be_message_ids(kind: str, field: str, value: str) -> None:
    with pytest.raises(InvalidEnvelope, match=field):
        validate_addresses(_with(kind, **{field: value}))


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("message", "message_id", MSG),
        ("message", "session_id", SESSION),
        ("message", "sender_id", AGENT),
        ("message", "target_id", PEER),
        ("message", "target_id", "planner"),
        ("message", "task_id", TASK),
        ("reply", "reply_to", OTHER_MSG),
    ],
)
def test_an_id_with_a_trailing_newline_is_refused(kind: str, field: str, value: str) -> None:
    # Ids become file names; Python's `$` matches before a final newline, so this is the
    # one odd suffix a `re.match(...$)` grammar lets through.
    raw = _as_dict(SAMPLES[kind])
    raw[field] = value + "\n"
    with pytest.raises(InvalidEnvelope, match=field):
        decode_envelope(_encode(raw))


def test_decode_runs_address_validation() -> None:
    raw = _as_dict(SAMPLES["task"])
    raw["task_id"] = "shepherd-task-../../etc"
    with pytest.raises(InvalidEnvelope, match="task_id"):
        decode_envelope(_encode(raw))


# ----------------------------------------------------------------------------- errors on the wire

ERROR_CLASSES: list[type[ShepherdError]] = [
    InvalidHandle,
    InvalidTransition,
    AgentBusy,
    UnresolvedRequests,
    MixedIds,
    DuplicateIds,
    ForbiddenSender,
    InvalidArgument,
    InvalidEnvelope,
    LimitExceeded,
    SessionUnavailable,
]


def test_error_codes_are_distinct() -> None:
    codes = [cls.code for cls in ERROR_CLASSES]
    assert len(set(codes)) == len(codes)
    assert all(code.isidentifier() and code.islower() for code in codes)


@pytest.mark.parametrize("cls", ERROR_CLASSES)
def test_error_round_trips_through_its_wire_form(cls: type[ShepherdError]) -> None:
    info = cls("what happened").info()
    wire = msgspec.json.decode(msgspec.json.encode(info), type=ErrorInfo)
    again = error_from_info(wire)
    assert type(again) is cls
    assert again.code == cls.code
    assert again.message == "what happened"


def test_unknown_error_code_keeps_the_peers_code() -> None:
    again = error_from_info(ErrorInfo(code="brand_new", message="m"))
    assert type(again) is ShepherdError
    assert again.code == "brand_new"
    assert ShepherdError.code == "error"  # the class attribute is untouched


# ----------------------------------------------------------------------------- fuzz

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.text(alphabet="\x00\n\\\"'/.", max_size=20)
    | st.sampled_from([SESSION, AGENT, TASK, MSG, "shepherd", "scout", "../x"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELD_NAMES = sorted(
    {f.name for cls in _all_subclasses(Envelope) for f in msgspec.structs.fields(cls)} | {"kind"}
)


def _check(data: bytes | str) -> None:
    try:
        envelope = decode_envelope(data)  # type: ignore[arg-type]
    except InvalidEnvelope:
        return
    assert isinstance(envelope, Envelope)
    validate_addresses(envelope)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _check(data)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_fuzz_arbitrary_json_values(value: object) -> None:
    _check(json.dumps(value).encode())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from([*KINDS, "bogus", ""]),
    drop=st.sets(st.sampled_from(FIELD_NAMES), max_size=3),
    changes=st.dictionaries(
        st.sampled_from(FIELD_NAMES) | st.text(max_size=10), json_values, max_size=4
    ),
    allow_nan=st.booleans(),
)
def test_fuzz_mutated_envelopes(
    kind: str, drop: set[str], changes: dict[str, object], allow_nan: bool
) -> None:
    raw: dict[str, object] = dict(_as_dict(SAMPLES[kind])) if kind in SAMPLES else {"kind": kind}
    for name in drop:
        raw.pop(name, None)
    raw.update(changes)
    _check(json.dumps(raw, allow_nan=allow_nan).encode())


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["call", "result", "ack", "message"]),
    depth=st.integers(min_value=0, max_value=3_000),
    opener=st.sampled_from(["[", '{"a":', '[{"b":[']),
)
def test_fuzz_deep_nesting(kind: str, depth: int, opener: str) -> None:
    closer = {"[": "]", '{"a":': "}", '[{"b":[': "]}]"}[opener]
    raw = _as_dict(SAMPLES[kind])
    field = {"call": "args", "result": "data", "ack": "result", "message": "content"}[kind]
    inner = opener * depth + "1" + closer * depth
    text = json.dumps({**raw, field: "@@"}).replace('"@@"', '{"x":' + inner + "}")
    _check(text.encode())


@settings(max_examples=30, deadline=None)
@given(size=st.integers(min_value=0, max_value=200_000), char=st.sampled_from("a\x00\n\u00e9"))
def test_fuzz_huge_strings(size: int, char: str) -> None:
    raw = _as_dict(SAMPLES["message"])
    raw["content"] = char * size
    raw["thread_id"] = char * (size // 7)
    _check(json.dumps(raw).encode())


# The exact texts: validate_addresses is on the hot path and was rewritten for speed; its
# messages (which reach quarantine reasons and refusals) must not change.
@pytest.mark.parametrize(
    ("kind", "field", "value", "text"),
    [
        ("message", "message_id", TASK, f"message_id {TASK!r} is not a message id"),
        ("message", "session_id", MSG, f"session_id {MSG!r} is not a session id"),
        ("message", "sender_id", "scout", "sender_id 'scout' is not an agent id or shepherd"),
        ("task", "target_id", "planner", "target_id 'planner' is not a valid address"),
        ("message", "task_id", MSG, f"task_id {MSG!r} is not a task id"),
        ("reply", "reply_to", TASK, f"reply_to {TASK!r} is not a message id"),
        ("ack", "ack_for", TASK, f"ack_for {TASK!r} is not a message id"),
        ("result", "call_id", TASK, f"call_id {TASK!r} is not a message id"),
        ("control", "reply_inbox", TASK, f"reply_inbox {TASK!r} is not a message id"),
    ],
)
def test_address_refusals_keep_their_exact_text(
    kind: str, field: str, value: str, text: str
) -> None:
    with pytest.raises(InvalidEnvelope) as info:
        validate_addresses(_with(kind, **{field: value}))
    assert info.value.message == text


def test_optional_ids_are_checked_in_field_order() -> None:
    # task_id before reply_inbox, as before the per-class field table
    envelope = _with("message", task_id="../x", reply_inbox="../y")
    with pytest.raises(InvalidEnvelope, match=r"^task_id"):
        validate_addresses(envelope)


@pytest.mark.parametrize("field", ["message_id", "session_id", "sender_id", "task_id"])
def test_a_non_str_id_in_a_built_envelope_is_an_invalid_envelope(field: str) -> None:
    # msgspec does not check types when a Struct is built in Python: publish() gets whatever
    # the caller built, and must refuse it as invalid_envelope, not raise TypeError
    with pytest.raises(InvalidEnvelope, match=field):
        validate_addresses(_with("message", **{field: 12345678}))


@pytest.mark.parametrize("kind", ["call", "result"])
def test_nesting_is_bounded_whatever_the_recursion_limit(kind: str) -> None:
    # the decoder's own bound is the recursion limit, which any module of the process may
    # raise: the bound on free-form data must not depend on it
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        raw = _as_dict(SAMPLES[kind])
        field = "args" if kind == "call" else "data"
        deep = b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1)
        data = _encode({**raw, field: "@@"}).replace(b'"@@"', b'{"x":' + deep + b"}")
        with pytest.raises(InvalidEnvelope, match=f"more than {MAX_NESTING} levels"):
            decode_envelope(data)
        ok = b"[" * (MAX_NESTING - 1) + b"]" * (MAX_NESTING - 1)
        fine = _encode({**raw, field: "@@"}).replace(b'"@@"', b'{"x":' + ok + b"}")
        assert type(decode_envelope(fine)) is type(SAMPLES[kind])
    finally:
        sys.setrecursionlimit(old)
