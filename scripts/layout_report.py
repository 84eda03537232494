"""Measure the house: modules per package, the largest modules, import cycles, test-kit leaks.

    python scripts/layout_report.py            # a human report
    python scripts/layout_report.py --json     # the same figures as JSON
    python scripts/layout_report.py --check    # exit 1 on an import cycle or a test-kit leak

The import graph is read from the source with `ast`, never by importing anything: every
`import` and `from ... import` of a module counts, at module level, inside functions and under
`if TYPE_CHECKING:` alike (a lazy import inside a function still ties the two modules together
for a reader, and a type-only import is still a dependency of the text). `from pkg import name`
counts as an import of `pkg.name` when that is a module, else of `pkg`. Importing a package
does not count as importing its `__init__`'s own imports. Cycles are the strongly connected
components of that graph with more than one module.

A "test-kit leak" is a production module (anything outside `actors.testing`) that imports
`actors.testing`, or that mentions `pytest` in its text. Two surfaces run on the seeded
simulation by design and may import it (`SIMULATED`): `shepherd demo` and the watchdog's loop
demo tell a story that must be the same for the same seed.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "protocol")
TEST_KIT = "actors.testing"
#: surfaces that are simulations by design (the only modules allowed to import the kit)
SIMULATED = {
    "actors.surfaces.demo": "shepherd demo: the canonical scenario on the seeded simulation",
    "actors.surfaces.loop_demo": "shepherd demo --loop: an agent stuck in a loop, simulated",
}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(module: str, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = current.split(".")
    # a package's own module is its __init__: its relative imports start from itself
    drop = level - 1 if is_package else level
    base = base[: len(base) - drop] if drop else base
    return ".".join([*base, module] if module else base)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, anywhere in its text."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, name, is_package)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                targets.add(candidate if candidate in modules else base)
    found: set[str] = set()
    for target in targets:
        # `import a.b.c` imports a.b.c; keep the longest prefix that is one of ours
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts and ".".join(parts) != name:
            found.add(".".join(parts))
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    # a deep import chain recurses deeply; the limit is put back so that a process that runs
    # the report (the layout test, inside pytest) keeps its own
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(previous)
    return sorted(found)


def leaks(modules: dict[str, Path], graph: dict[str, set[str]]) -> list[str]:
    """Production modules that import the test kit or mention pytest."""
    found = []
    for name, path in modules.items():
        if name == TEST_KIT or name.startswith(TEST_KIT + ".") or name in SIMULATED:
            continue
        kit = sorted(t for t in graph[name] if t == TEST_KIT or t.startswith(TEST_KIT + "."))
        if kit:
            found.append(f"{name} imports {', '.join(kit)}")
        if "pytest" in path.read_text(encoding="utf-8"):
            found.append(f"{name} mentions pytest")
    return found


@dataclass
class Figures:
    modules_per_folder: dict[str, int]
    largest: list[tuple[str, int]]
    over_450: list[tuple[str, int]]
    cycles: list[list[str]]
    test_kit_leaks: list[str]


def report(root: Path = ROOT) -> Figures:
    modules = module_files(root)
    graph = import_graph(modules)
    per_folder = Counter(
        str(path.parent.relative_to(root))
        for path in modules.values()
        if path.name != "__init__.py"
    )
    sizes = {
        str(path.relative_to(root)): len(path.read_text(encoding="utf-8").splitlines())
        for path in modules.values()
    }
    largest = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))
    return Figures(
        modules_per_folder=dict(sorted(per_folder.items())),
        largest=largest[:15],
        over_450=[item for item in largest if item[1] > 450],
        cycles=cycles(graph),
        test_kit_leaks=leaks(modules, graph),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    figures = report()
    if args.json:
        print(json.dumps(asdict(figures), indent=2))
    else:
        print("modules per folder:")
        for folder, count in figures.modules_per_folder.items():
            print(f"  {count:4d}  {folder}/")
        print("largest modules:")
        for path, lines in figures.largest:
            print(f"  {lines:5d}  {path}")
        print(f"modules over 450 lines: {len(figures.over_450)}")
        print(f"import cycles: {len(figures.cycles)}")
        for component in figures.cycles:
            print("  " + " <-> ".join(component))
        print(f"test-kit leaks: {len(figures.test_kit_leaks)}")
        for leak in figures.test_kit_leaks:
            print("  " + leak)
    if args.check and (figures.cycles or figures.test_kit_leaks):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
