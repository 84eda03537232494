"""A batch operation takes every option of its single operation, on every surface: each of
``spawn``'s options reaches ``spawn-many`` on the command line (parsed to the same value), in
its tool's schema (the same property) and in the Python API (its Struct's field); each of
``delegate``'s fields is a field of a ``delegate_many`` item, and each of its options the
call's (on the command line too). Adding an
option to the single operation without its batch fails here."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actors.surfaces.cli_parser import build_parser
from protocol.calls import api, api_batch
from protocol.core.errors import InvalidArgument
from protocol.ops import tools
from protocol.ops.parent import DELEGATE, SPAWN


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


def test_each_delegate_many_item_is_a_delegate_with_every_field_of_delegate() -> None:
    single = set(api.DelegateArgs.__struct_fields__)
    item = set(api_batch.DelegateItem.__struct_fields__)
    call = set(api_batch.DelegateManyArgs.__struct_fields__) - {"items", "watch"}
    assert item == single  # an item may give each field of delegate
    assert call == single - {"target", "task"}  # the call gives each optional one
    # an item's own value wins; one it left out is the call's
    many = api.build_args(
        api_batch.DelegateManyArgs,
        items=[{"target": "a", "task": "x", "max_tokens": 7}, {"target": "b", "task": "y"}],
        max_tokens=100,
        max_turns=3,
        max_cost=0.5,
        max_minutes=9,
        timeout_minutes=60,
    )
    first, second = (many.single(i) for i in many.items)
    assert (first.max_tokens, second.max_tokens) == (7, 100)
    for one in (first, second):
        assert (one.max_turns, one.max_cost, one.max_minutes, one.timeout_minutes) == (
            3,
            0.5,
            9,
            60,
        )


def test_delegate_many_parses_each_option_of_delegate_as_delegate_does() -> None:
    flags = [(f, spec) for f, spec in DELEGATE.arguments() if f.startswith("-")]
    assert {f for f, _ in flags} >= {"--max-turns", "--max-tokens", "--max-cost", "--max-minutes"}
    for flag, spec in flags:
        given = _values(flag, spec)
        single = build_parser(["delegate"]).parse_args(["delegate", "a", "x", *given])
        many = build_parser(["delegate-many"]).parse_args(
            ["delegate-many", "--task", "a", "x", *given]
        )
        assert getattr(many, spec["dest"]) == getattr(single, spec["dest"]) is not None, flag
