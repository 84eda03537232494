"""The manual's table of notice codes (``docs/concepts.md``) names every code a ``Notice`` is
made with anywhere in the code, and no code that none is made with."""

from __future__ import annotations

import ast
import importlib
import re

from .markdown import DOCS, ROOT


def _made() -> tuple[set[str], set[str]]:
    """(codes written out, prefixes of codes built with an f-string) of every ``Notice(...)``
    in ``protocol/`` and ``actors/``; a code held in a module constant is looked up."""
    codes: set[str] = set()
    prefixes: set[str] = set()
    for path in [*ROOT.joinpath("protocol").rglob("*.py"), *ROOT.joinpath("actors").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Notice"):
                continue
            value = next((k.value for k in node.keywords if k.arg == "code"), None)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                codes.add(value.value)
            elif isinstance(value, ast.Name):
                names = vars(importlib.import_module(module))
                if isinstance(names.get(value.id), str):
                    codes.add(names[value.id])
                else:  # a variable of the function: what it is assigned
                    for assign in ast.walk(tree):
                        if (
                            isinstance(assign, ast.Assign)
                            and any(getattr(t, "id", None) == value.id for t in assign.targets)
                            and isinstance(assign.value, ast.JoinedStr)
                        ):
                            head = assign.value.values[0]
                            assert isinstance(head, ast.Constant)
                            prefixes.add(str(head.value))
            else:
                raise AssertionError(f"{path}:{node.lineno}: a Notice code this test cannot read")
    return codes, prefixes


def _documented() -> set[str]:
    text = (DOCS / "concepts.md").read_text()
    table = text.split("\n## Notice codes\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {code for row in rows for code in re.findall(r"`([a-z_]+)`", row.split("|")[1])}


def test_every_notice_code_is_documented_and_every_documented_one_is_made() -> None:
    codes, prefixes = _made()
    documented = _documented()
    assert codes and prefixes  # the scan found what it looks for
    assert codes - documented == set(), "add these codes to docs/concepts.md#notice-codes"
    for prefix in prefixes:
        assert any(code.startswith(prefix) for code in documented), prefix
    stale = {c for c in documented - codes if not any(c.startswith(p) for p in prefixes)}
    assert stale == set(), "no Notice is made with these codes any more"
