"""A batch operation takes every option of its single operation, on every surface: each of
``spawn``'s options reaches ``spawn-many`` on the command line (parsed to the same value), in
its tool's schema (the same property) and in the Python API (its Struct's field); each of
``delegate``'s per-task fields is a field of a ``delegate_many`` item or of the call. Adding an
option to the single operation without its batch fails here."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actors.surfaces.cli_parser import build_parser
from protocol import api, api_batch, tools
from protocol.errors import InvalidArgument
from protocol.ops.parent import SPAWN

#: delegate's fields that delegate_many does not take yet (its budgets)
DELEGATE_NOT_IN_BATCH = {"max_turns", "max_tokens", "max_cost", "max_minutes"}


def _spawn_options() -> list[tuple[str, dict[str, Any]]]:
    """spawn's command-line options (its flags, not the agent's name)."""
    return [(flag, spec) for flag, spec in SPAWN.arguments() if flag.startswith("-")]


def _values(flag: str, spec: dict[str, Any]) -> list[str]:
    """A value of the option's type that the parser takes."""
    if spec.get("action") == "store_true":
        return [flag]
    if spec.get("choices"):
        return [flag, str(spec["choices"][-1])]
    if spec.get("type") in (int, float):
        return [flag, "1"]
    if flag == "--approve":
        return [flag, "bash:git push*"]
    return [flag, "value"]


def test_spawn_has_options_to_compare() -> None:
    flags = {flag for flag, _ in _spawn_options()}
    assert {"--worktree", "--repo", "--branch", "--base", "--approve", "--node"} <= flags


@pytest.mark.parametrize("flag", [flag for flag, _ in _spawn_options()])
def test_spawn_many_parses_each_option_of_spawn_as_spawn_does(flag: str) -> None:
    spec = dict(_spawn_options())[flag]
    given = _values(flag, spec)
    single = build_parser(["spawn"]).parse_args(["spawn", "a", *given])
    many = build_parser(["spawn-many"]).parse_args(["spawn-many", "a", "b", *given])
    dest = spec["dest"]
    assert getattr(many, dest) == getattr(single, dest) is not None
    assert many.names == ["a", "b"]


def test_spawn_many_tool_has_each_property_of_spawn() -> None:
    single = tools.SPAWN.parameters["properties"]
    many = tools.SPAWN_MANY.parameters["properties"]
    for name, prop in single.items():
        if name == "name":
            continue
        assert name in many, name
        # the same type and bounds (the description may say more of a batch)
        assert {k: v for k, v in many[name].items() if k != "description"} == {
            k: v for k, v in prop.items() if k != "description"
        }, name
    assert set(many) == set(single) - {"name"} | {"names"}
    assert set(tools.SPAWN_MANY.path_fields) == set(tools.SPAWN.path_fields)


def test_spawn_many_struct_has_each_field_of_spawn() -> None:
    single = {f.name: f for f in msgspec.structs.fields(api.SpawnArgs)}
    many = {f.name: f for f in msgspec.structs.fields(api_batch.SpawnManyArgs)}
    for name, field in single.items():
        if name == "name":
            continue
        assert name in many, name
        assert (many[name].type, many[name].default) == (field.type, field.default), name
    # and each name's spawn carries every option given to the batch
    options = {"worktree": True, "repo": "/r", "base": "main", "approve": ("bash:*",)}
    batch = api.build_args(api_batch.SpawnManyArgs, names=("a", "b"), **options)
    one = batch.one("b")
    assert (one.name, one.worktree, one.repo, one.base, one.approve) == (
        "b",
        True,
        "/r",
        "main",
        ("bash:*",),
    )


def test_one_branch_for_several_worktrees_is_refused_whole() -> None:
    from protocol.session.batch import check_spawn_many

    many = api.build_args(
        api_batch.SpawnManyArgs, names=("a", "b"), worktree=True, branch="feature"
    )
    with pytest.raises(InvalidArgument, match="branch"):
        check_spawn_many(many)
    one = api.build_args(api_batch.SpawnManyArgs, names=("a",), worktree=True, branch="feature")
    check_spawn_many(one)  # one name may name its branch


def test_delegate_many_items_take_delegate_fields_or_say_which_not() -> None:
    single = set(api.DelegateArgs.__struct_fields__)
    item = set(api_batch.DelegateItem.__struct_fields__)
    call = set(api_batch.DelegateManyArgs.__struct_fields__) - {"items", "watch"}
    # every field of delegate is an item's, the call's, or listed as not taken (with why)
    assert single - item - call == DELEGATE_NOT_IN_BATCH
