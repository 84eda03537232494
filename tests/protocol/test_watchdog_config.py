"""Watchdog settings and session state."""

from __future__ import annotations

import msgspec
import pytest

from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.watchdog import (
    CONFIG_KEYS,
    DEFAULT_RESCUE_MESSAGE,
    REASON_CODES,
    RULES,
    WatchdogConfig,
    WatchdogConfigError,
    WatchdogSession,
    alert_destinations,
    alerts_active,
    apply_watchdog_overrides,
    config_to_dict,
    effective_rescue_message,
    merge_watchdog_layers,
    parse_config_value,
    pause,
    resume,
    rule_threshold,
    rule_thresholds,
    set_config_value,
    set_rescue_override,
)

# --- defaults ------------------------------------------------------------------------------


def test_every_default() -> None:
    config = WatchdogConfig()
    assert config.enabled is True
    assert config.rescue_message == DEFAULT_RESCUE_MESSAGE
    assert config.repeat_threshold == 3
    assert config.typecheck_repeat_threshold == 2
    assert config.idle_no_progress_s == 300.0
    assert config.cooldown_s == 60.0
    assert config.max_preview_lines == 20
    assert config.max_events_per_agent == 200
    assert config.alert_mode == "main_only"
    assert CONFIG_KEYS == (
        "enabled",
        "rescue_message",
        "repeat_threshold",
        "typecheck_repeat_threshold",
        "idle_no_progress_s",
        "cooldown_s",
        "max_preview_lines",
        "max_events_per_agent",
        "alert_mode",
        "repeated_command.threshold",
        "repeated_failure.threshold",
        "repeated_typecheck_error.threshold",
        "no_progress.threshold",
        "read_only_loop.threshold",
        "alternating_cycle.threshold",
        "monologue.threshold",
        "monologue.match",
        "empty_responses.threshold",
        "error_streak.threshold",
        "condensation_loop.threshold",
    )


# --- per-rule thresholds -------------------------------------------------------------------


def test_every_rule_has_a_threshold_setting_with_its_default() -> None:
    assert [r.code for r in RULES] == list(REASON_CODES)
    assert all(f"{code}.threshold" in CONFIG_KEYS for code in REASON_CODES)
    # the published detector's counts (OpenHands' StuckDetector) where a rule corresponds,
    # Shepherd's shared ones (repeat_threshold 3, typecheck_repeat_threshold 2) elsewhere
    assert rule_thresholds(WatchdogConfig()) == {
        "repeated_command": 3,
        "repeated_failure": 3,
        "repeated_typecheck_error": 2,
        "no_progress": 3,
        "read_only_loop": 3,
        "alternating_cycle": 3,
        "monologue": 3,
        "empty_responses": 3,
        "error_streak": 3,
        "condensation_loop": 10,
    }
    assert WatchdogConfig().monologue_match == "any"
    data = config_to_dict(WatchdogConfig())
    assert data["repeated_failure.threshold"] == 3 and data["condensation_loop.threshold"] == 10
    assert data["repeated_command.threshold"] is None  # none of its own: repeat_threshold


def test_repeat_threshold_is_the_fallback_of_rules_without_their_own() -> None:
    config = set_config_value(WatchdogConfig(), "repeat_threshold", "5")
    config = set_config_value(config, "typecheck_repeat_threshold", "4")
    got = rule_thresholds(config)
    assert {c: got[c] for c in ("repeated_command", "no_progress", "error_streak")} == {
        "repeated_command": 5,
        "no_progress": 5,
        "error_streak": 5,
    }
    assert got["repeated_typecheck_error"] == 4
    assert got["monologue"] == 3 and got["repeated_failure"] == 3  # their own defaults stay
    config = set_config_value(config, "repeated_command.threshold", "7")
    assert rule_threshold(config, "repeated_command") == 7  # its own wins over the fallback
    assert rule_threshold(config, "no_progress") == 5


def test_rule_settings_layer_from_dotted_keys_and_nested_tables() -> None:
    config, warnings = merge_watchdog_layers(
        [
            ("user.toml", {"monologue.threshold": 4, "empty_responses": {"threshold": 6}}),
            ("project.toml", {"monologue": {"match": "identical"}}),
            ("session overrides", {"monologue.threshold": 9}),
        ]
    )
    assert warnings == []
    assert (config.monologue_threshold, config.monologue_match) == (9, "identical")
    assert config.empty_responses_threshold == 6


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("monologue.threshold", 0, ">= 1"),
        ("monologue.threshold", 1_000_001, "<= 1000000"),
        ("condensation_loop.threshold", 10**30, "<= 1000000"),
        ("repeated_failure.threshold", -3, ">= 1"),
        ("alternating_cycle.threshold", 2.5, "int"),
        ("no_progress.threshold", "4", "int"),
        ("monologue.match", "loud", "any, identical"),
    ],
)
def test_a_rule_setting_out_of_range_in_a_file_is_a_warning_naming_file_and_key(
    key: str, value: object, bound: str
) -> None:
    code, _, field = key.partition(".")
    for table in ({key: value}, {code: {field: value}}):
        config, warnings = merge_watchdog_layers(
            [("/home/u/.config/shepherd/config.toml", {**table, "cooldown_s": 9})]
        )
        assert config == WatchdogConfig(cooldown_s=9.0)  # only that key is ignored
        (warning,) = warnings
        assert warning.startswith(f"/home/u/.config/shepherd/config.toml: watchdog.{key}: ")
        assert bound in warning and warning.endswith("; ignored")


@pytest.mark.parametrize(
    ("key", "text", "bound"),
    [
        ("monologue.threshold", "0", ">= 1"),
        ("empty_responses.threshold", "1000001", "<= 1000000"),
        ("repeated_command.threshold", "99999999999999999999", "<= 1000000"),
        ("condensation_loop.threshold", "ten", "an integer"),
        ("monologue.match", "similar", "any, identical"),
    ],
)
def test_watchdog_set_out_of_range_names_the_key_and_the_bound(
    key: str, text: str, bound: str
) -> None:
    with pytest.raises(WatchdogConfigError) as caught:
        set_config_value(WatchdogConfig(), key, text)
    err = caught.value
    assert err.code == "invalid_argument" and err.key == key and err.problem == "invalid_value"
    assert key in str(err) and bound in str(err)


def test_an_unknown_rule_key_suggests_the_close_one() -> None:
    with pytest.raises(WatchdogConfigError) as caught:
        set_config_value(WatchdogConfig(), "monologue.treshold", "4")
    assert caught.value.problem == "unknown_key"
    assert "did you mean 'monologue.threshold'" in str(caught.value)


def test_default_rescue_message_says_what_to_do() -> None:
    text = DEFAULT_RESCUE_MESSAGE.lower()
    assert "stop repeating" in text
    assert "summarise" in text
    assert "change your approach" in text
    assert "done" in text and "blocked" in text


# --- layering (no file, global only, global + project, broken, unknown key) ----------------


def test_no_layers_gives_defaults() -> None:
    assert merge_watchdog_layers([]) == (WatchdogConfig(), [])
    assert merge_watchdog_layers([("user", None), ("project", None)]) == (WatchdogConfig(), [])


def test_user_layer_overrides_defaults_and_keeps_the_rest() -> None:
    config, warnings = merge_watchdog_layers(
        [("~/.config/shepherd/config.toml", {"cooldown_s": 5})]
    )
    assert warnings == []
    assert config.cooldown_s == 5.0
    assert config.repeat_threshold == 3
    assert config.alert_mode == "main_only"


def test_project_overrides_user_and_unspecified_keys_keep_defaults() -> None:
    config, warnings = merge_watchdog_layers(
        [
            ("user", {"repeat_threshold": 4, "cooldown_s": 30.0}),
            ("project", {"repeat_threshold": 5, "alert_mode": "both"}),
        ]
    )
    assert warnings == []
    assert config.repeat_threshold == 5  # project wins
    assert config.cooldown_s == 30.0  # user value survives where project is silent
    assert config.alert_mode == "both"
    assert config.idle_no_progress_s == 300.0  # default where both are silent


def test_session_layer_wins_over_project() -> None:
    config, _ = merge_watchdog_layers(
        [
            ("user", {"enabled": True}),
            ("project", {"enabled": True}),
            ("session", {"enabled": False}),
        ]
    )
    assert config.enabled is False


def test_broken_layer_warns_and_is_ignored_without_raising() -> None:
    config, warnings = merge_watchdog_layers(
        [("user", {"cooldown_s": 10}), (".shepherd/config.toml", "not a table"), ("session", [1])]
    )
    assert config == WatchdogConfig(cooldown_s=10)
    assert len(warnings) == 2
    assert ".shepherd/config.toml" in warnings[0] and "table" in warnings[0]
    assert "session" in warnings[1]


def test_unknown_key_is_ignored_with_a_warning_naming_source_and_key() -> None:
    config, warnings = apply_watchdog_overrides(
        WatchdogConfig(), {"repeat_treshold": 9, "cooldown_s": 1}, "project.toml"
    )
    assert config.repeat_threshold == 3
    assert config.cooldown_s == 1.0  # the good key of the same layer still applies
    assert len(warnings) == 1
    assert "project.toml" in warnings[0]
    assert "repeat_treshold" in warnings[0]
    assert "did you mean 'repeat_threshold'" in warnings[0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("repeat_threshold", "3"),  # a TOML string is not an int
        ("repeat_threshold", True),  # a bool is not an int
        ("repeat_threshold", 0),  # out of range
        ("repeat_threshold", 2.5),
        ("idle_no_progress_s", 0),
        ("idle_no_progress_s", float("inf")),
        ("cooldown_s", -1),
        ("enabled", "yes"),
        ("alert_mode", "loud"),
        ("rescue_message", ""),
        ("max_events_per_agent", None),
    ],
)
def test_wrong_type_or_range_is_ignored_with_a_warning(key: str, value: object) -> None:
    config, warnings = apply_watchdog_overrides(
        WatchdogConfig(), {key: value, "max_preview_lines": 7}, "user.toml"
    )
    assert getattr(config, key) == getattr(WatchdogConfig(), key)
    assert config.max_preview_lines == 7
    assert len(warnings) == 1
    assert "user.toml" in warnings[0] and key in warnings[0]


def test_int_is_accepted_for_a_seconds_field() -> None:
    config, warnings = apply_watchdog_overrides(WatchdogConfig(), {"idle_no_progress_s": 600}, "x")
    assert warnings == []
    assert config.idle_no_progress_s == 600.0
    assert isinstance(config.idle_no_progress_s, float)


def test_whole_config_decoding_refuses_unknown_fields() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"bogus": 1}, type=WatchdogConfig)


# --- watchdog set KEY VALUE ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("repeat_threshold", "3", 3),
        ("repeat_threshold", " 5 ", 5),
        ("enabled", "true", True),
        ("enabled", "off", False),
        ("enabled", "NO", False),
        ("idle_no_progress_s", "2.5", 2.5),
        ("cooldown_s", "0", 0.0),
        ("alert_mode", "main_only", "main_only"),
        ("alert_mode", "direct_subagent", "direct_subagent"),
        ("rescue_message", "Please  stop.", "Please  stop."),
        ("monologue.threshold", " 4 ", 4),
        ("repeated_command.threshold", "1000000", 1_000_000),
        ("monologue.match", "identical", "identical"),
    ],
)
def test_parse_config_value(key: str, text: str, expected: object) -> None:
    value = parse_config_value(key, text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("key", "text", "problem"),
    [
        ("nope", "1", "unknown_key"),
        ("repeat_threshold", "three", "invalid_value"),
        ("repeat_threshold", "0", "invalid_value"),
        ("repeat_threshold", "2.5", "invalid_value"),
        ("enabled", "maybe", "invalid_value"),
        ("cooldown_s", "nan", "invalid_value"),
        ("cooldown_s", "soon", "invalid_value"),
        ("alert_mode", "loud", "invalid_value"),
        ("rescue_message", "", "invalid_value"),
    ],
)
def test_parse_config_value_errors_name_the_key(key: str, text: str, problem: str) -> None:
    with pytest.raises(WatchdogConfigError) as caught:
        parse_config_value(key, text)
    err = caught.value
    assert err.key == key
    assert err.problem == problem
    assert key in str(err)
    assert isinstance(err, ValueError)
    assert isinstance(err, InvalidArgument) and isinstance(err, ShepherdError)
    assert err.code == "invalid_argument"


def test_set_config_value_returns_a_new_config() -> None:
    before = WatchdogConfig()
    after = set_config_value(before, "repeat_threshold", "4")
    assert after.repeat_threshold == 4
    assert before.repeat_threshold == 3


def test_config_to_dict_is_plain_and_ordered() -> None:
    data = config_to_dict(WatchdogConfig())
    assert tuple(data) == CONFIG_KEYS
    assert msgspec.json.decode(msgspec.json.encode(data)) == data


def test_alert_destinations() -> None:
    assert alert_destinations("main_only") == {"parent"}
    assert alert_destinations("direct_subagent") == {"agent"}
    assert alert_destinations("both") == {"parent", "agent"}


# --- session state -------------------------------------------------------------------------


def test_session_starts_unpaused_without_override() -> None:
    state = WatchdogSession()
    assert state.paused is False
    assert state.rescue_message_override is None


def test_pause_and_resume_toggle() -> None:
    state = pause(WatchdogSession())
    assert state.paused is True
    assert resume(state).paused is False
    assert pause(pause(WatchdogSession())).paused is True


def test_rescue_override_takes_precedence_over_config() -> None:
    config = WatchdogConfig(rescue_message="from config")
    state = WatchdogSession()
    assert effective_rescue_message(config, state) == "from config"
    state = set_rescue_override(state, "from session")
    assert effective_rescue_message(config, state) == "from session"
    assert effective_rescue_message(config, set_rescue_override(state, None)) == "from config"


def test_blank_rescue_override_is_refused() -> None:
    with pytest.raises(WatchdogConfigError) as caught:
        set_rescue_override(WatchdogSession(), "   ")
    assert caught.value.key == "rescue_message"


@pytest.mark.parametrize(
    ("enabled", "paused", "active"),
    [(True, False, True), (True, True, False), (False, False, False), (False, True, False)],
)
def test_alerts_active(enabled: bool, paused: bool, active: bool) -> None:
    assert alerts_active(WatchdogConfig(enabled=enabled), WatchdogSession(paused=paused)) is active
