"""protocol.ops.watchdog and protocol.calls.watchdog: the watchdog tools' and operations' Args
Structs and their routing."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.calls.watchdog import (
    WatchdogConfigArgs,
    WatchdogReadEventsArgs,
    WatchdogSteerSubagentArgs,
)
from protocol.core.errors import InvalidArgument
from protocol.ops.watchdog import (
    OP_ARGS,
    TOOL_OPS,
    WATCHDOG_OPS,
    WATCHDOG_TOOLS,
    check_call,
    check_op,
    is_watchdog_tool,
    tool_call,
)

TOOL_NAMES = [
    "watchdog_list_targets",
    "watchdog_read_events",
    "watchdog_detect_stuck",
    "watchdog_alert_main",
    "watchdog_steer_subagent",
    "watchdog_config",
]


def test_one_tool_per_name_each_running_a_watchdog_operation() -> None:
    assert list(WATCHDOG_TOOLS) == TOOL_NAMES
    assert dict(TOOL_OPS) == {
        "watchdog_list_targets": "list_targets",
        "watchdog_read_events": "read_events",
        "watchdog_detect_stuck": "detect",
        "watchdog_alert_main": "alert_main",
        "watchdog_steer_subagent": "steer",
        "watchdog_config": "config",
    }
    assert set(TOOL_OPS.values()) <= set(WATCHDOG_OPS)
    assert set(OP_ARGS) == set(WATCHDOG_OPS)
    assert all(is_watchdog_tool(n) for n in TOOL_NAMES)
    assert not is_watchdog_tool("watchdog") and not is_watchdog_tool("shepherd_status")


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_tool_has_text_and_a_schema_with_a_flat_object_root(name: str) -> None:
    tool = WATCHDOG_TOOLS[name]
    assert tool.description and tool.prompt_snippet and tool.label
    assert list(tool.fields) == list(tool.args_type.__struct_fields__)
    assert all(tool.fields.values())
    schema = msgspec.json.schema(tool.args_type)
    assert "$ref" in schema  # a Struct: one object definition
    (definition,) = schema["$defs"].values()
    assert definition["type"] == "object"
    assert set(definition.get("properties", {})) == set(tool.fields)


def test_defaults_read_events_50_and_steer_is_dry_run() -> None:
    assert WatchdogReadEventsArgs(agent="a").limit == 50
    steer = WatchdogSteerSubagentArgs(agent="a")
    assert steer.dry_run is True and steer.message is None
    assert WatchdogConfigArgs() == WatchdogConfigArgs(key=None, value=None)


@pytest.mark.parametrize(
    ("name", "fields", "op", "args"),
    [
        ("watchdog_list_targets", {}, "list_targets", {}),
        (
            "watchdog_read_events",
            {"agent": "scout"},
            "read_events",
            {"agent": "scout", "limit": 50},
        ),
        (
            "watchdog_read_events",
            {"agent": "s", "limit": 3},
            "read_events",
            {"agent": "s", "limit": 3},
        ),
        ("watchdog_detect_stuck", {"agent": "scout"}, "detect", {"agent": "scout"}),
        ("watchdog_alert_main", {"agent": "scout"}, "alert_main", {"agent": "scout"}),
        (
            "watchdog_steer_subagent",
            {"agent": "scout"},
            "steer",
            {"agent": "scout", "dry_run": True},
        ),
        (
            "watchdog_steer_subagent",
            {"agent": "scout", "message": "stop", "dry_run": False},
            "steer",
            {"agent": "scout", "message": "stop", "dry_run": False},
        ),
        ("watchdog_config", {}, "config", {}),
        (
            "watchdog_config",
            {"key": "cooldown_s", "value": "5"},
            "set",
            {"key": "cooldown_s", "value": "5"},
        ),
    ],
)
def test_tool_call_maps_to_the_watchdog_operation(
    name: str, fields: dict[str, Any], op: str, args: dict[str, Any]
) -> None:
    assert tool_call(name, fields) == (op, args)


@pytest.mark.parametrize(
    ("name", "fields", "named"),
    [
        ("watchdog_nope", {}, "watchdog_nope"),
        ("watchdog_list_targets", {"agent": "x"}, "agent"),
        ("watchdog_read_events", {}, "agent"),
        ("watchdog_read_events", {"agent": "x", "limit": 0}, "limit"),
        ("watchdog_read_events", {"agent": ""}, "agent"),
        ("watchdog_steer_subagent", {"agent": "x", "dry_run": None}, "dry_run"),
        ("watchdog_steer_subagent", {"agent": "x", "dry_run": "false"}, "dry_run"),
        ("watchdog_config", {"key": "cooldown_s"}, "key and value"),
        ("watchdog_config", {"value": "5"}, "key and value"),
        ("watchdog_config", {"key": "cooldown_s", "value": 5}, "value"),
    ],
)
def test_bad_tool_calls_are_invalid_argument_naming_the_field(
    name: str, fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named) as info:
        tool_call(name, fields)
    assert info.value.code == "invalid_argument"


def test_check_op_validates_and_drops_unset_optionals() -> None:
    assert check_op("status") == ("status", {})
    assert check_op("inspect", {"agent": "scout"}) == ("inspect", {"agent": "scout"})
    assert check_op("inspect", {"agent": "scout", "limit": 2}) == (
        "inspect",
        {"agent": "scout", "limit": 2},
    )
    assert check_op("set", {"key": "k", "value": "v"}) == ("set", {"key": "k", "value": "v"})
    assert check_call({"op": "pause"}) == ("pause", {})


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ({"op": "explode"}, "op"),
        ({}, "op"),
        ({"op": "status", "args": {"x": 1}}, "x"),
        ({"op": "status", "args": [1]}, "args"),
        ({"op": "set", "args": {"key": "k"}}, "value"),
        ({"op": "inspect", "args": {"agent": "a", "limit": "all"}}, "limit"),
        ({"op": "status", "extra": 1}, "extra"),
    ],
)
def test_check_call_refuses_bad_calls(call: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        check_call(call)
