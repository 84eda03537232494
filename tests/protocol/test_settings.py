"""protocol.records.settings: defaults, lenient layering with warnings, and command-line values."""

from __future__ import annotations

from typing import Literal

import msgspec
import pytest

from protocol.records.settings import Settings, apply_overrides, parse_value


class Inner(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    level: int = 1
    mode: Literal["main_only", "direct_subagent", "both"] = "main_only"


class Outer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A settings shape with the field types Settings does not have yet (str, Literal, table)."""

    label: str = "x"
    mode: Literal["main_only", "direct_subagent", "both"] = "both"
    count: int = 1
    limit: float | None = 1.0
    inner: Inner = Inner()


def test_defaults() -> None:
    s = Settings()
    assert s.coalesce_ms == 25.0
    assert s.stale_wait_threshold_s == 120.0
    assert s.max_envelope_bytes == 64 * 1024
    assert s.default_task_timeout_s is None
    assert s.default_reply_timeout_s is None
    assert s.max_queue_depth > 0
    assert s.retention_count > 0
    assert s.fsync is False
    assert s.dedup_window > 0
    assert s.output_lines > 0
    assert s.fallback_poll_s > 0


def test_settings_are_frozen_and_strict() -> None:
    with pytest.raises(AttributeError):
        Settings().coalesce_ms = 1.0  # type: ignore[misc]
    with pytest.raises(msgspec.ValidationError, match="nope"):
        msgspec.convert({"nope": 1}, Settings)


def test_apply_overrides_applies_good_keys() -> None:
    s, warnings = apply_overrides(
        Settings(),
        {"coalesce_ms": 10, "fsync": True, "default_task_timeout_s": 600.5, "max_queue_depth": 5},
        "/home/u/.config/shepherd/config.toml",
    )
    assert warnings == []
    assert s.coalesce_ms == 10.0
    assert isinstance(s.coalesce_ms, float)
    assert s.fsync is True
    assert s.default_task_timeout_s == 600.5
    assert s.max_queue_depth == 5
    assert s.stale_wait_threshold_s == 120.0  # untouched keys keep their value


def test_apply_overrides_does_not_modify_the_base() -> None:
    base = Settings()
    apply_overrides(base, {"coalesce_ms": 1}, "src")
    assert base == Settings()


def test_empty_mapping_is_a_no_op() -> None:
    assert apply_overrides(Settings(), {}, "src") == (Settings(), [])


def test_unknown_key_warns_naming_source_and_key_and_keeps_the_rest() -> None:
    s, warnings = apply_overrides(
        Settings(), {"coalesce_msec": 5, "stale_wait_threshold_s": 30}, ".shepherd/config.toml"
    )
    assert s.stale_wait_threshold_s == 30.0
    assert s.coalesce_ms == 25.0
    assert len(warnings) == 1
    assert ".shepherd/config.toml" in warnings[0]
    assert "coalesce_msec" in warnings[0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_queue_depth", "many"),
        ("max_queue_depth", 1.5),
        ("max_envelope_bytes", True),  # a bool is not an int
        ("stale_wait_threshold_s", "120"),  # files are typed: no str -> number coercion
        ("fsync", "yes"),
        ("fsync", 1),
        ("coalesce_ms", None),
        ("coalesce_ms", [25]),
    ],
)
def test_wrong_type_warns_naming_source_and_key_and_keeps_the_rest(key: str, value: object) -> None:
    s, warnings = apply_overrides(Settings(), {key: value, "output_lines": 7}, "project.toml")
    assert s.output_lines == 7
    assert getattr(s, key) == getattr(Settings(), key)
    assert len(warnings) == 1
    assert "project.toml" in warnings[0]
    assert repr(key) in warnings[0]


def test_several_bad_keys_give_one_warning_each_in_order() -> None:
    _, warnings = apply_overrides(Settings(), {"a": 1, "fsync": "x", "b": 2}, "src")
    assert len(warnings) == 3
    assert "'a'" in warnings[0]
    assert "'fsync'" in warnings[1]
    assert "'b'" in warnings[2]


def test_layers_apply_in_order_later_wins() -> None:
    user, _ = apply_overrides(Settings(), {"coalesce_ms": 10, "fsync": True}, "user")
    project, _ = apply_overrides(user, {"coalesce_ms": 40}, "project")
    session, _ = apply_overrides(project, {"fsync": False}, "session")
    assert (session.coalesce_ms, session.fsync) == (40.0, False)


def test_nested_table_is_layered_key_by_key() -> None:
    s, warnings = apply_overrides(
        Outer(), {"inner": {"level": 3, "bogus": 1}, "count": 2}, "config.toml"
    )
    assert s.inner == Inner(level=3)
    assert s.count == 2
    assert len(warnings) == 1
    assert "config.toml [inner]" in warnings[0]
    assert "bogus" in warnings[0]


def test_nested_field_given_a_non_table_warns() -> None:
    s, warnings = apply_overrides(Outer(), {"inner": 5}, "config.toml")
    assert s.inner == Inner()
    assert len(warnings) == 1
    assert "'inner'" in warnings[0]
    assert "table" in warnings[0]


@pytest.mark.parametrize(
    ("struct", "key", "text", "expected"),
    [
        (Settings, "max_queue_depth", "3", 3),
        (Settings, "max_queue_depth", " 3 ", 3),
        (Settings, "coalesce_ms", "2.5", 2.5),
        (Settings, "coalesce_ms", "3", 3.0),
        (Settings, "fsync", "true", True),
        (Settings, "fsync", "False", False),
        (Settings, "fsync", "TRUE", True),
        (Settings, "default_task_timeout_s", "none", None),
        (Settings, "default_task_timeout_s", "null", None),
        (Settings, "default_task_timeout_s", "None", None),
        (Settings, "default_task_timeout_s", "90", 90.0),
        (Outer, "mode", "main_only", "main_only"),
        (Outer, "mode", "both", "both"),
        (Outer, "label", "hello world", "hello world"),
        (Outer, "limit", "none", None),
    ],
)
def test_parse_value(struct: type[msgspec.Struct], key: str, text: str, expected: object) -> None:
    value = parse_value(struct, key, text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("text", ["123", "true", "none", "[1, 2]"])
def test_parse_value_for_a_str_field_keeps_the_text(text: str) -> None:
    # A string setting set to "123" (or "true") is that text, not a type error.
    assert parse_value(Outer, "label", text) == text


def test_parse_value_unknown_key() -> None:
    with pytest.raises(KeyError, match="nope"):
        parse_value(Settings, "nope", "1")


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("max_queue_depth", "many"),
        ("fsync", "maybe"),
        ("coalesce_ms", "none"),  # not optional
        ("max_queue_depth", "[1]"),
    ],
)
def test_parse_value_bad_text(key: str, text: str) -> None:
    with pytest.raises(msgspec.ValidationError):
        parse_value(Settings, key, text)


def test_parse_value_bad_literal() -> None:
    with pytest.raises(msgspec.ValidationError):
        parse_value(Outer, "mode", "everyone")


def test_parsed_value_applies_cleanly() -> None:
    value = parse_value(Settings, "stale_wait_threshold_s", "30")
    s, warnings = apply_overrides(Settings(), {"stale_wait_threshold_s": value}, "session")
    assert warnings == []
    assert s.stale_wait_threshold_s == 30.0
