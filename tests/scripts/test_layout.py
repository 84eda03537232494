"""The house keeps its rooms: no import cycle, the simulation kit stays out of production, no
module over 450 lines, and each process imports only its own rooms (read from the source by
``scripts/layout_report.py``).

The report's own reading is checked on a small tree made here, so a report that saw nothing
could not pass for a clean house.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "layout_report", ROOT / "scripts" / "layout_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("layout_report", module)
    spec.loader.exec_module(module)
    return module


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph.get(name, ()))
    return seen


def test_the_report_sees_a_cycle_and_a_leak_in_a_made_up_tree(tmp_path: Path) -> None:
    lr = _report()
    for package, files in {
        "actors": {
            "__init__.py": "",
            "a.py": "from actors import b\n",
            "b.py": "def f():\n    from actors.a import x\n",
            "testing/__init__.py": "",
            "c.py": "import actors.testing\n",
        },
        "protocol": {"__init__.py": ""},
    }.items():
        for name, text in files.items():
            path = tmp_path / package / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    figures = lr.report(tmp_path)
    assert figures.cycles == [["actors.a", "actors.b"]]
    assert figures.test_kit_leaks == ["actors.c imports actors.testing"]


def test_no_import_cycle_no_test_kit_in_production_and_no_module_over_450_lines() -> None:
    figures = _report().report(ROOT)
    assert figures.cycles == []
    assert figures.test_kit_leaks == []
    assert figures.over_450 == []


def test_a_child_never_imports_the_parent_and_a_client_never_imports_the_session() -> None:
    lr = _report()
    graph = lr.import_graph(lr.module_files(ROOT))
    child = _reach(graph, "actors.child.cli")
    assert not {m for m in child if m.startswith(("actors.session", "actors.surfaces"))}
    for client in ("actors.surfaces.client", "actors.surfaces.mcp_server"):
        assert not {m for m in _reach(graph, client) if m.startswith("actors.session")}
