"""protocol.core.ids: the id grammar (make / parse / kind_of) and the agent-name grammar.

Ids double as file names in the mailbox, so the tests lean on the safety side: anything the
parser accepts must be a plain ``shepherd-<kind>-<hex>`` string, whatever it was fed.
"""

from __future__ import annotations

import itertools
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.core.errors import InvalidHandle
from protocol.core.ids import PARENT_ID, IdKind, is_id_of, is_valid_name, kind_of, make_id, parse_id

TOKEN = "0123abcd"
SAFE_ID = re.compile(r"shepherd-[a-z]+-[0-9a-f]+")
KINDS = list(IdKind)

# ----------------------------------------------------------------------------- make / kind_of


@pytest.mark.parametrize("kind", KINDS)
def test_make_parse_and_kind_of_round_trip_for_every_kind(kind: IdKind) -> None:
    value = make_id(kind, TOKEN)
    assert value == f"shepherd-{kind.value}-{TOKEN}"
    assert kind_of(value) is kind
    assert parse_id(value) == value
    assert parse_id(value, kind) == value


def test_every_kind_has_a_distinct_prefix() -> None:
    assert {k.value for k in IdKind} == {"session", "agent", "task", "message", "watcher", "prompt"}


@pytest.mark.parametrize("token", ["0" * 8, "f" * 64, "deadbeef" * 4])
def test_make_id_accepts_tokens_of_8_to_64_lowercase_hex(token: str) -> None:
    assert make_id(IdKind.TASK, token) == f"shepherd-task-{token}"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "0" * 7,  # too short
        "0" * 65,  # too long
        "DEADBEEF",  # uppercase hex
        "deadbeeg",  # not hex
        "dead beef",
        "../../etc",
        "dead/beef",
        "deadbeef\x00",
        "deadbeef\n",  # a trailing newline must not slip through `$`
    ],
)
def test_make_id_refuses_bad_tokens(token: str) -> None:
    with pytest.raises(ValueError, match="token"):
        make_id(IdKind.TASK, token)


@pytest.mark.parametrize("value", [None, 1, b"shepherd-task-0123abcd", ["x"], object()])
def test_kind_of_non_str_is_none(value: object) -> None:
    assert kind_of(value) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("suffix", ["\n", "\r\n", " ", "\x00", "/", "/.."])
def test_kind_of_refuses_trailing_junk(suffix: str) -> None:
    # validate_addresses trusts kind_of directly, so it must be as strict as parse_id's result
    assert kind_of(f"shepherd-task-{TOKEN}{suffix}") is None


# ----------------------------------------------------------------------------- parse_id

BAD_IDS = [
    "",
    " ",
    "../x",
    "shepherd-task-../..",
    "shepherd-task-../../etc/passwd",
    "shepherd-task-0123abcd/../../x",
    "/tmp/shepherd-task-0123abcd",
    "shepherd-task-",
    "shepherd--0123abcd",
    "shepherd-task-0123ABCD",  # uppercase hex
    "SHEPHERD-task-0123abcd",
    "shepherd-Task-0123abcd",
    "shepherd-task-0123abc",  # 7 hex: too short
    "shepherd-task-" + "a" * 65,  # too long
    "shepherd-task-0123\x00abcd",  # NUL inside
    "shepherd-task-0123abcd\x00",
    "\x00shepherd-task-0123abcd",
    "shepherd-task-0123 abcd",
    "shepherd-bogus-0123abcd",  # unknown kind
    "shepherd_task_0123abcd",
    "shepherd-task-0123abcd-0123abcd",
    "task-0123abcd",
    "shepherd",
    "scout",
    "shepherd-task-0123abcd\n\x00",
]


@pytest.mark.parametrize("value", BAD_IDS)
def test_parse_id_refuses_malformed_ids_with_invalid_handle(value: str) -> None:
    with pytest.raises(InvalidHandle) as info:
        parse_id(value)
    assert info.value.code == "invalid_handle"
    assert repr(value)[:40] in info.value.message  # the message names what was given


@pytest.mark.parametrize("value", [None, 42, 4.2, b"shepherd-task-0123abcd", ["a"], {"a": 1}])
def test_parse_id_refuses_non_str(value: object) -> None:
    with pytest.raises(InvalidHandle, match="is not an id"):
        parse_id(value)


def test_parse_id_shortens_huge_values_in_its_message() -> None:
    with pytest.raises(InvalidHandle) as info:
        parse_id("x" * 10_000)
    assert len(info.value.message) < 200


@pytest.mark.parametrize(
    ("given", "expected"), [(a, b) for a, b in itertools.permutations(KINDS, 2)]
)
def test_parse_id_wrong_kind_names_the_id_and_both_kinds(given: IdKind, expected: IdKind) -> None:
    value = make_id(given, TOKEN)
    with pytest.raises(InvalidHandle) as info:
        parse_id(value, expected)
    message = info.value.message
    assert value in message

    def article(kind: IdKind) -> str:  # "an agent id", never "a agent id"
        return "an" if kind is IdKind.AGENT else "a"

    assert f" is {article(given)} {given.value} id" in message
    assert f"not {article(expected)} {expected.value} id" in message


def test_parse_id_returns_the_canonical_form_without_surrounding_whitespace() -> None:
    value = make_id(IdKind.AGENT, TOKEN)
    assert parse_id(f"  {value}\n") == value


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["scout", "a", "a" * 32, "scout_2", "re-viewer", "x9"])
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)


@pytest.mark.parametrize(
    "name",
    [
        PARENT_ID,  # the parent's own address is never an agent name
        "",
        "a" * 33,
        "Scout",
        "SCOUT",
        "1scout",
        "-scout",
        "_scout",
        "sc out",
        "sc/out",
        "../x",
        "sc.out",
        "scout\x00",
        "scout\n",  # `$` would let a trailing newline through
        "scöut",
        None,
        3,
        b"scout",
    ],
)
def test_invalid_names(name: object) -> None:
    assert not is_valid_name(name)


@pytest.mark.parametrize("kind", KINDS)
def test_id_shaped_strings_are_not_names(kind: IdKind) -> None:
    # The two grammars must not overlap: otherwise a task id given where an agent is expected
    # (or an agent *named* like another agent's id) is taken as a name instead of refused.
    assert not is_valid_name(make_id(kind, TOKEN))


# ----------------------------------------------------------------------------- properties

_ID_ALPHABET = string.hexdigits + "./-_ \n\t\x00\\Gz"
near_ids = st.builds(
    lambda pre, kind, token, post: f"{pre}shepherd-{kind}-{token}{post}",
    st.sampled_from(["", " ", "\n", "./", "../", "\x00"]),
    st.sampled_from([k.value for k in IdKind] + ["", "bogus", "TASK", "task-task"]),
    st.one_of(
        st.text(alphabet="0123456789abcdef", min_size=8, max_size=64),
        st.text(alphabet=_ID_ALPHABET, max_size=70),
    ),
    st.sampled_from(["", " ", "\n", "\r\n", "\x00", "/", "/..", "-0"]),
)
any_text = st.one_of(st.text(), near_ids)


@settings(max_examples=400, deadline=None)
@given(value=any_text, expected=st.none() | st.sampled_from(KINDS))
def test_parse_id_raises_only_invalid_handle_and_accepts_only_safe_names(
    value: str, expected: IdKind | None
) -> None:
    try:
        result = parse_id(value, expected)
    except InvalidHandle:
        return
    assert SAFE_ID.fullmatch(result), result
    assert "/" not in result
    assert result not in {".", ".."}
    if expected is not None:
        assert kind_of(result) is expected


@settings(max_examples=400, deadline=None)
@given(value=any_text)
def test_kind_of_accepts_only_safe_names(value: str) -> None:
    if kind_of(value) is not None:
        assert SAFE_ID.fullmatch(value), repr(value)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KINDS), token=st.text(alphabet="0123456789abcdef", min_size=8, max_size=64)
)
def test_every_well_formed_id_round_trips(kind: IdKind, token: str) -> None:
    value = make_id(kind, token)
    assert parse_id(value, kind) == value
    assert kind_of(value) is kind


@settings(max_examples=300, deadline=None)
@given(
    name=st.one_of(
        st.text(max_size=40),
        st.builds(
            str.__add__,
            st.from_regex(r"[a-z][a-z0-9_-]{0,31}", fullmatch=True),
            st.sampled_from(["", "\n", " ", "\x00", "/"]),
        ),
    )
)
def test_valid_names_are_plain_lowercase_words(name: str) -> None:
    if is_valid_name(name):
        assert re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", name), repr(name)
        assert name != PARENT_ID


# ----------------------------------------------------------------------------- is_id_of
# validate_addresses asks is_id_of (one regex per kind) instead of kind_of: it must accept
# exactly what kind_of accepts for that kind, no more (no trailing newline, no path).


class _Str(str):
    pass


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "value",
    [*BAD_IDS, *(make_id(k, TOKEN) for k in KINDS), f"shepherd-task-{TOKEN}\n", None, 1, b"x"],
)
def test_is_id_of_agrees_with_kind_of(kind: IdKind, value: object) -> None:
    assert is_id_of(value, kind) is (kind_of(value) is kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_is_id_of_takes_str_subclasses_like_kind_of(kind: IdKind) -> None:
    value = _Str(make_id(kind, TOKEN))
    assert is_id_of(value, kind)
    assert kind_of(value) is kind


@settings(max_examples=400, deadline=None)
@given(value=any_text, kind=st.sampled_from(KINDS))
def test_is_id_of_is_kind_of_for_any_text(value: str, kind: IdKind) -> None:
    assert is_id_of(value, kind) is (kind_of(value) is kind)
