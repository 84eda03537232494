"""The model-facing tool schemas (protocol/ops/tools.py): flat roots, required fields that match the
operations' signatures, one written definition per tool, and typed validation errors."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from protocol.calls import api, api_batch, api_worktrees
from protocol.calls.approvals import ApproveArgs, DenyArgs
from protocol.core import limits
from protocol.core.errors import InvalidArgument
from protocol.ops import tools
from protocol.ops import watchdog as watchdog_api
from protocol.ops.approvals import ChildApprovalArgs
from protocol.ops.child import ChildDoneArgs, ChildMessageArgs
from protocol.ops.tools import ToolSpec

from .conftest import Running

PARENT_NAMES = (
    "shepherd_spawn",
    "shepherd_delegate",
    "shepherd_message",
    "shepherd_watch",
    "shepherd_status",
    "shepherd_close",
    "shepherd_read",
    "shepherd_cancel",
    "shepherd_approve",
    "shepherd_deny",
    "shepherd_worktrees",
    "shepherd_merge",
    "shepherd_delegate_many",
    "shepherd_spawn_many",
    "watchdog_list_targets",
    "watchdog_read_events",
    "watchdog_detect_stuck",
    "watchdog_alert_main",
    "watchdog_steer_subagent",
    "watchdog_config",
)
ALL_SPECS = (*tools.parent_tools(), *tools.child_tools(), tools.NOTIFICATIONS)


def _id(spec: ToolSpec) -> str:
    return f"{spec.role}:{spec.name}"


def _walk(node: Any) -> Any:
    """Every dict inside a JSON schema (the root included)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


# ----------------------------------------------------------------------------- schema shape


@pytest.mark.parametrize("spec", ALL_SPECS, ids=_id)
def test_every_schema_has_a_flat_object_root(spec: ToolSpec) -> None:
    root = spec.parameters
    assert root["type"] == "object"
    assert isinstance(root["properties"], dict)
    assert isinstance(root["required"], list)
    assert root["additionalProperties"] is False
    for combinator in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not"):
        assert combinator not in root, f"{spec.name}: {combinator} at the root"
    for node in _walk(root):
        assert "$ref" not in node and "$defs" not in node, f"{spec.name}: not inlined: {node}"
    json.dumps(root)  # JSON through and through


@pytest.mark.parametrize("spec", ALL_SPECS, ids=_id)
def test_required_fields_match_the_operation_signature(spec: ToolSpec) -> None:
    fields = msgspec.structs.fields(spec.args_type)
    required = spec.parameters["required"]
    assert len(required) == len(set(required))
    assert set(required) == {f.name for f in fields if f.required}
    assert list(spec.parameters["properties"]) == [f.name for f in fields]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=_id)
def test_every_tool_and_field_is_described(spec: ToolSpec) -> None:
    for text in (spec.name, spec.label, spec.description, spec.prompt_snippet):
        assert isinstance(text, str) and text.strip()
    assert "\n" not in spec.prompt_snippet, "a prompt snippet is one line"
    assert spec.name.startswith(("shepherd_", "watchdog_"))
    for name, prop in spec.parameters["properties"].items():
        assert prop.get("description", "").strip(), f"{spec.name}.{name} has no description"


def test_parent_tools_are_one_per_parent_operation() -> None:
    specs = tools.parent_tools()
    assert tuple(s.name for s in specs) == PARENT_NAMES
    assert {s.role for s in specs} == {"parent"}
    assert [s.op for s in specs] == [n.removeprefix("shepherd_") for n in PARENT_NAMES]
    by_op = {
        "spawn": api.SpawnArgs,
        "delegate": api.DelegateArgs,
        "message": api.MessageArgs,
        "watch": api.WatchArgs,
        "status": api.StatusArgs,
        "close": api.CloseArgs,
        "read": api.ReadArgs,
        "cancel": api.CancelArgs,
        "worktrees": api_worktrees.WorktreesArgs,
        "merge": api_worktrees.MergeArgs,
        "spawn_many": api_batch.SpawnManyArgs,
        "delegate_many": api_batch.DelegateManyArgs,
        "approve": ApproveArgs,
        "deny": DenyArgs,
        **{name: t.args_type for name, t in watchdog_api.WATCHDOG_TOOLS.items()},
    }
    assert {s.op: s.args_type for s in specs} == by_op


def test_a_child_gets_only_the_child_tools() -> None:
    specs = tools.child_tools()
    assert [s.name for s in specs] == [
        "shepherd_message",
        "shepherd_done",
        "shepherd_request_approval",
    ]
    assert {s.role for s in specs} == {"child"}
    assert [s.args_type for s in specs] == [ChildMessageArgs, ChildDoneArgs, ChildApprovalArgs]
    assert all(spec not in tools.parent_tools() for spec in specs)
    for name in PARENT_NAMES:
        if name != "shepherd_message":
            with pytest.raises(InvalidArgument, match="no child tool"):
                tools.tool_by_name("child", name)
    # the child's message is its own definition: no parent-only fields reach a child
    child_message = tools.tool_by_name("child", "shepherd_message")
    assert child_message is tools.CHILD_MESSAGE
    assert "task_id" not in child_message.parameters["properties"]
    assert "reply_timeout_s" not in child_message.parameters["properties"]
    with pytest.raises(InvalidArgument, match="no parent tool"):
        tools.tool_by_name("parent", "shepherd_done")


def test_the_mcp_surface_adds_only_notifications() -> None:
    names = [s.name for s in tools.mcp_tools()]
    assert names == [*PARENT_NAMES, "shepherd_notifications"]


def test_watch_takes_a_bounded_non_empty_array_of_task_ids() -> None:
    ids = tools.WATCH.parameters["properties"]["ids"]
    assert ids["type"] == "array"
    assert ids["items"] == {"type": "string", "maxLength": limits.MAX_NAME_CHARS}
    assert ids["minItems"] == 1
    assert ids["maxItems"] == limits.MAX_IDS
    assert tools.WATCH.parameters["required"] == ["ids"]


def test_optional_fields_are_shown_as_plain_optional_types() -> None:
    props = tools.MESSAGE.parameters["properties"]
    assert props["task_id"]["type"] == "string"
    assert "anyOf" not in props["task_id"] and "default" not in props["task_id"]
    assert props["expects_reply"] == {
        "description": props["expects_reply"]["description"],
        "type": "boolean",
        "default": False,
    }


def test_spawn_offers_only_adapters_a_real_session_runs() -> None:
    adapter = tools.SPAWN.parameters["properties"]["adapter"]
    assert sorted(adapter["enum"]) == ["acp", "command", "pi-rpc", "scripted"]
    assert tools.SPAWN.path_fields == ("script", "cwd", "repo")


def test_to_json_is_the_printed_form_and_a_copy() -> None:
    for spec in ALL_SPECS:
        data = tools.to_json(spec)
        assert list(data) == ["name", "label", "description", "promptSnippet", "parameters"]
        assert data["parameters"] == spec.parameters
        json.dumps(data)
        had = dict(spec.parameters["properties"])
        data["parameters"]["properties"].clear()
        assert spec.parameters["properties"] == had, "to_json must not hand out the shared schema"


@pytest.mark.parametrize(
    ("args", "params", "error"),
    [
        (api.DelegateArgs, {"target": "t"}, "no Param for field"),
        (api.CloseArgs, {"agent": "a", "extra": tools.Param(description="e")}, "name no field"),
    ],
)
def test_a_field_without_a_param_fails_when_the_tool_is_defined(
    args: type[msgspec.Struct], params: dict[str, tools.Param | str], error: str
) -> None:
    with pytest.raises(TypeError, match=error):
        tools._tool(
            name="shepherd_x",
            label="x",
            role="parent",
            op="x",
            args=args,
            description="x",
            prompt_snippet="x",
            params=params,
        )


def test_a_plain_string_param_is_its_description() -> None:
    spec = tools._tool(
        name="shepherd_x",
        label="x",
        role="parent",
        op="close",
        args=api.CloseArgs,
        description="x",
        prompt_snippet="x",
        params={"agent": "the agent"},
    )
    assert spec.parameters["properties"]["agent"] == {
        "type": "string",
        "description": "the agent",
        "minLength": 1,
        "maxLength": limits.MAX_NAME_CHARS,
    }


# ----------------------------------------------------------------------------- tool calls

EXAMPLES: list[tuple[ToolSpec, dict[str, Any], msgspec.Struct]] = [
    (
        tools.SPAWN,
        {"name": "scout", "script": "/tmp/s.json"},
        api.SpawnArgs(name="scout", script="/tmp/s.json"),
    ),
    (
        tools.DELEGATE,
        {"target": "scout", "task": "look", "timeout_minutes": 5},
        api.DelegateArgs(target="scout", task="look", timeout_minutes=5.0),
    ),
    (
        tools.MESSAGE,
        {"target": "scout", "message": "hi", "expects_reply": True, "reply_timeout_s": 2.5},
        api.MessageArgs(target="scout", message="hi", expects_reply=True, reply_timeout_s=2.5),
    ),
    (tools.WATCH, {"ids": ["t-1", "t-2"]}, api.WatchArgs(ids=("t-1", "t-2"))),
    (tools.STATUS, {}, api.StatusArgs()),
    (tools.CLOSE, {"agent": "scout"}, api.CloseArgs(agent="scout")),
    (tools.READ, {"agent": "scout", "lines": 3}, api.ReadArgs(agent="scout", lines=3)),
    (tools.CANCEL, {"task_id": "t-1"}, api.CancelArgs(task_id="t-1")),
    (
        tools.CHILD_MESSAGE,
        {"target": "shepherd", "message": "q?", "expects_reply": True},
        ChildMessageArgs(target="shepherd", message="q?", expects_reply=True),
    ),
    (
        tools.CHILD_DONE,
        {"status": "blocked", "summary": "no access"},
        ChildDoneArgs(status="blocked", summary="no access"),
    ),
    (tools.NOTIFICATIONS, {"wait_seconds": 1}, tools.NotificationsArgs(wait_seconds=1.0)),
]


@pytest.mark.parametrize(
    ("spec", "arguments", "expected"), EXAMPLES, ids=[_id(e[0]) for e in EXAMPLES]
)
def test_args_from_tool_call_round_trips(
    spec: ToolSpec, arguments: dict[str, Any], expected: msgspec.Struct
) -> None:
    got = tools.args_from_tool_call(spec, arguments)
    assert type(got) is spec.args_type
    assert got == expected
    # the Struct's own builtins form is a valid call of the same tool, minus unset optionals
    again = {k: v for k, v in msgspec.to_builtins(got).items() if v is not None}
    assert tools.args_from_tool_call(spec, again) == got


def test_no_arguments_is_an_empty_object() -> None:
    assert tools.args_from_tool_call(tools.STATUS, None) == api.StatusArgs()


@pytest.mark.parametrize(
    ("spec", "arguments", "field"),
    [
        (tools.DELEGATE, {"target": "scout"}, "task"),
        (tools.DELEGATE, {"target": "scout", "task": 3}, "task"),
        (tools.DELEGATE, {"target": "scout", "task": ""}, "task"),
        (tools.DELEGATE, {"target": "scout", "task": "x", "timeout_minutes": 0}, "timeout_minutes"),
        (tools.DELEGATE, {"target": "scout", "task": "x", "prompt": "y"}, "prompt"),
        (tools.WATCH, {"ids": []}, "ids"),
        (tools.WATCH, {"ids": "t-1"}, "ids"),
        (tools.WATCH, {"id": ["t-1"]}, "id"),
        (tools.SPAWN, {"name": "x", "adapter": "simulated"}, "adapter"),
        (tools.READ, {"agent": "x", "lines": 0}, "lines"),
        (tools.CHILD_DONE, {"status": "finished"}, "status"),
        (tools.CHILD_DONE, {"status": "completed", "task_id": "t-1"}, "task_id"),
        (
            tools.CHILD_MESSAGE,
            {"target": "x", "message": "m", "reply_timeout_s": 1},
            "reply_timeout_s",
        ),
        (tools.NOTIFICATIONS, {"wait_seconds": 301}, "wait_seconds"),
        (tools.SPAWN_MANY, {"names": []}, "names"),
        (tools.SPAWN_MANY, {"names": ["w"] * 1000}, "names"),
        (tools.SPAWN_MANY, {"names": [""]}, "names[0]"),
        (tools.SPAWN_MANY, {"names": ["w"], "adapter": "simulated"}, "adapter"),
        (tools.SPAWN_MANY, {"names": ["w"], "name": "v"}, "name"),
        (tools.DELEGATE_MANY, {"items": []}, "items"),
        (tools.DELEGATE_MANY, {"items": [{"target": "a", "task": "x"}] * 1000}, "items"),
        (tools.DELEGATE_MANY, {"items": [{"target": "a"}]}, "items[0]"),
        (
            tools.DELEGATE_MANY,
            {"items": [{"target": "a", "task": "x", "timeout_minutes": None}]},
            "items[0].timeout_minutes",
        ),
        (
            tools.DELEGATE_MANY,
            {"items": [{"target": "a", "task": "x", "timeout_minutes": -1}]},
            "items[0].timeout_minutes",
        ),
        (tools.DELEGATE_MANY, {"items": [{"target": "a", "task": "x", "agent": "b"}]}, "agent"),
        (tools.DELEGATE_MANY, {"items": [{"target": "a", "task": "x"}], "watch": None}, "watch"),
    ],
)
def test_a_bad_call_is_invalid_argument_naming_tool_and_field(
    spec: ToolSpec, arguments: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        tools.args_from_tool_call(spec, arguments)
    assert caught.value.code == "invalid_argument"
    assert caught.value.message.startswith(f"{spec.name}: ")
    assert field in caught.value.message


# ----------------------------------------------------------------------------- against a session


def test_every_parent_op_is_an_operation_of_the_session(running: Running) -> None:
    """Each tool's op is a name ``Supervisor.call`` knows (an unknown one would say so), and
    its argument check is the same Struct's."""
    for spec in tools.parent_tools():
        try:
            running.supervisor.call(spec.op, {"no_such_field": 1})
        except InvalidArgument as exc:
            assert "unknown operation" not in exc.message, spec.op
            assert "no_such_field" in exc.message, spec.op
        else:  # pragma: no cover - every Args Struct forbids unknown fields
            pytest.fail(f"{spec.op} accepted an unknown field")
    status = running.supervisor.call("status", msgspec.to_builtins(api.StatusArgs()))
    assert status.agents == ()
