"""protocol.calls.api: build_args validates operation arguments for every surface."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.calls import api, api_batch, api_worktrees
from protocol.calls.api import build_args
from protocol.core.errors import InvalidArgument

TASK = "shepherd-task-00000001"

#: operation -> (Args class, a valid set of fields)
VALID: dict[str, tuple[type[Any], dict[str, Any]]] = {
    "spawn": (api.SpawnArgs, {"name": "scout", "adapter": "command", "cmd": "agent {message}"}),
    "delegate": (api.DelegateArgs, {"target": "scout", "task": "fix it", "timeout_minutes": 5}),
    "message": (
        api.MessageArgs,
        {"target": "shepherd", "message": "hi", "expects_reply": True, "reply_timeout_s": 1.5},
    ),
    "watch": (api.WatchArgs, {"ids": [TASK]}),
    "prompt": (api.PromptArgs, {"target": "scout", "prompt": "fix it", "timeout_minutes": 1}),
    "wait": (api.WaitArgs, {"ids": [TASK], "timeout_s": 2.5}),
    "status": (api.StatusArgs, {}),
    "close": (api.CloseArgs, {"agent": "scout"}),
    "read": (api.ReadArgs, {"agent": "scout", "lines": 10}),
    "cancel": (api.CancelArgs, {"task_id": TASK, "reason": "enough"}),
    "result": (api.ResultArgs, {"task_id": TASK}),
    "fail": (api.FailArgs, {"task_id": TASK, "error": "gave up"}),
    "worktrees": (api_worktrees.WorktreesArgs, {"cursor": 3}),
    "merge": (api_worktrees.MergeArgs, {"agent": "scout", "into": "main", "strategy": "squash"}),
    "delegate_many": (
        api_batch.DelegateManyArgs,
        {"items": (api_batch.DelegateItem(target="scout", task="x"),), "watch": True},
    ),
    "spawn_many": (api_batch.SpawnManyArgs, {"names": ["a", "b"], "script": "s.json"}),
}
OPS = sorted(VALID)

#: operation -> (field, a value of the wrong type)
WRONG_TYPE: dict[str, tuple[str, Any]] = {
    "spawn": ("name", 7),
    "delegate": ("task", ["fix", "it"]),
    "message": ("expects_reply", "yes"),
    "watch": ("ids", TASK),
    "prompt": ("prompt", None),
    "wait": ("timeout_s", "soon"),
    "status": ("agent", 3),
    "close": ("agent", None),
    "read": ("lines", "50"),
    "cancel": ("reason", 1.5),
    "result": ("task_id", {"id": TASK}),
    "fail": ("error", False),
    "worktrees": ("cursor", "next"),
    "merge": ("check", "yes"),
    "delegate_many": ("items", {"target": "scout", "task": "x"}),
    "spawn_many": ("names", "a"),
}


def test_every_args_struct_is_covered() -> None:
    args_classes = {
        obj
        for module in (api, api_batch, api_worktrees)
        for name, obj in vars(module).items()
        if name.endswith("Args")
        and not name.startswith("_")
        and isinstance(obj, type)
        and issubclass(obj, msgspec.Struct)
    }
    assert args_classes == {cls for cls, _ in VALID.values()}


@pytest.mark.parametrize("op", OPS)
def test_valid_fields_build(op: str) -> None:
    cls, fields = VALID[op]
    args = build_args(cls, **fields)
    assert type(args) is cls
    for key, value in fields.items():
        got = getattr(args, key)
        assert got == (tuple(value) if isinstance(value, list) else value)


@pytest.mark.parametrize("op", OPS)
def test_wrong_type_is_invalid_argument_naming_operation_and_field(op: str) -> None:
    cls, fields = VALID[op]
    field, bad = WRONG_TYPE[op]
    with pytest.raises(InvalidArgument) as info:
        build_args(cls, **{**fields, field: bad})
    assert info.value.code == "invalid_argument"
    assert info.value.message.startswith(f"{op}: ")
    assert f"$.{field}" in info.value.message


@pytest.mark.parametrize("op", OPS)
def test_unknown_field_is_refused_and_named(op: str) -> None:
    cls, fields = VALID[op]
    with pytest.raises(InvalidArgument) as info:
        build_args(cls, **fields, surprise=1)
    assert info.value.message.startswith(f"{op}: ")
    assert "surprise" in info.value.message


@pytest.mark.parametrize(
    ("cls", "op", "missing"),
    [
        (api.SpawnArgs, "spawn", "name"),
        (api.DelegateArgs, "delegate", "task"),
        (api.MessageArgs, "message", "message"),
        (api.WatchArgs, "watch", "ids"),
        (api.PromptArgs, "prompt", "prompt"),
        (api.WaitArgs, "wait", "ids"),
        (api.CloseArgs, "close", "agent"),
        (api.ReadArgs, "read", "agent"),
        (api.CancelArgs, "cancel", "task_id"),
        (api.ResultArgs, "result", "task_id"),
        (api.FailArgs, "fail", "error"),
    ],
)
def test_missing_required_field_is_named(cls: type[Any], op: str, missing: str) -> None:
    fields = {k: v for k, v in VALID[op][1].items() if k != missing}
    with pytest.raises(InvalidArgument) as info:
        build_args(cls, **fields)
    assert info.value.message.startswith(f"{op}: ")
    assert missing in info.value.message


def test_defaults_are_filled_in() -> None:
    spawn = build_args(api.SpawnArgs, name="scout")
    assert spawn.adapter == "scripted"
    message = build_args(api.MessageArgs, target="scout", message="hi")
    assert (message.expects_reply, message.steer, message.task_id) == (False, False, None)
    assert build_args(api.ReadArgs, agent="scout").lines == 50


@pytest.mark.parametrize(
    ("cls", "fields", "path"),
    [
        (api.SpawnArgs, {"name": "scout", "adapter": "telepathy"}, "$.adapter"),
        (api.ReadArgs, {"agent": "scout", "lines": True}, "$.lines"),
        (api.ReadArgs, {"agent": "scout", "lines": 2.5}, "$.lines"),
        (api.WatchArgs, {"ids": [TASK, 5]}, "$.ids[1]"),
        (
            api.DelegateArgs,
            {"target": "scout", "task": "x", "timeout_minutes": "5"},
            "$.timeout_minutes",
        ),
    ],
)
def test_values_are_checked_strictly(cls: type[Any], fields: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidArgument, match=path.replace("$", r"\$").replace("[", r"\[")):
        build_args(cls, **fields)


def test_results_encode_to_json() -> None:
    result = api.MessageResult(message_id="shepherd-message-00000001", accepted=True)
    assert msgspec.json.decode(msgspec.json.encode(result)) == {
        "message_id": "shepherd-message-00000001",
        "accepted": True,
    }
