"""The folders of ``actors/``, and those of ``protocol/``, import each other in one direction
only: no import cycle between two folders (at any length), so each can be read, tested and
replaced on top of the ones below it; the actor runtime knows no transport. ``protocol/``
never imports ``actors/`` (ruff's banned-api rule checks that one). Read from the source with
``ast``: every import, at the top or inside a function, counts."""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _folder(module: str) -> str | None:
    """The folder a module of ``actors/`` or ``protocol/`` lives in (``actors/transports/nats``,
    ``protocol/core``...), or None for any other module."""
    parts = module.split(".")
    if parts[0] not in ("actors", "protocol"):
        return None
    for n in range(len(parts), 0, -1):
        if (ROOT.joinpath(*parts[:n])).is_dir():
            return "/".join(parts[:n])
    return parts[0]


def _graph() -> dict[str, dict[str, set[str]]]:
    """folder -> folder it imports -> the files that do."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for top in ("actors", "protocol"):
        for path in (ROOT / top).rglob("*.py"):
            src = str(path.parent.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                # `from actors.transports import wire` imports the folder's module
                dsts = {d for d in map(_folder, names) if d is not None}
                deepest = max(dsts, key=len, default=None)
                if deepest is not None and deepest != src:
                    edges[src][deepest].add(str(path.relative_to(ROOT)))
    return edges


def _cycle(edges: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """A cycle among the folders (a list of folders, the first repeated last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycle_between_folders() -> None:
    edges = _graph()
    cycle = _cycle(edges)
    if cycle is not None:
        why = [f"{a} -> {b}: {sorted(edges[a][b])}" for a, b in itertools.pairwise(cycle)]
        raise AssertionError("import cycle between folders:\n" + "\n".join(why))


def test_protocol_is_grouped_by_subject() -> None:
    """No module sits directly in ``protocol/``: each lives in the folder of its subject."""
    loose = sorted(p.name for p in (ROOT / "protocol").glob("*.py") if p.name != "__init__.py")
    assert loose == []


def test_the_runtime_knows_no_transport() -> None:
    assert not {d for d in _graph().get("actors/runtime", {}) if d.startswith("actors/transports")}


def test_the_check_finds_a_cycle() -> None:
    """The checker itself: a cycle of two and of three is found, a chain is not."""
    two = {"a": {"b": {"x"}}, "b": {"a": {"y"}}}
    three = {"a": {"b": {"x"}}, "b": {"c": {"y"}}, "c": {"a": {"z"}}}
    chain = {"a": {"b": {"x"}}, "b": {"c": {"y"}}}
    assert _cycle(two) in (["a", "b", "a"], ["b", "a", "b"])
    assert _cycle(three) is not None
    assert _cycle(chain) is None
