"""``scripts/state_diagram.py`` draws every transition of each machine's table, and the manual's
"State machines" section (``docs/concepts.md``) is exactly what it prints now (so it cannot go
stale)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from protocol.records.requests import REQUEST_TRANSITIONS
from protocol.records.tasks import TERMINAL_STATES, TRANSITIONS
from protocol.session.agents import PROCESS_TRANSITIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "state_diagram", ROOT / "scripts" / "state_diagram.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


def _lines(script: ModuleType, name: str) -> list[str]:
    lines: list[str] = script.mermaid(script.machines()[name]).splitlines()
    return lines


def test_every_task_transition_is_drawn(script: ModuleType) -> None:
    lines = _lines(script, "task")
    assert lines[0] == "stateDiagram-v2"
    assert "    [*] --> created" in lines
    for (state, event), target in TRANSITIONS.items():
        assert f"    {state} --> {target} : {event}" in lines
    for state in TERMINAL_STATES:
        assert f"    {state} --> [*]" in lines
    # nothing drawn that the table does not hold: one line per entry, start and finals
    assert len(lines) == 1 + 1 + len(TRANSITIONS) + len(TERMINAL_STATES)


def test_every_request_transition_is_drawn(script: ModuleType) -> None:
    lines = _lines(script, "request")
    assert "    [*] --> pending" in lines
    edges = [(a, b) for a, targets in REQUEST_TRANSITIONS.items() for b in targets]
    for state, target in edges:
        assert f"    {state} --> {target}" in lines
    finals = [s for s, targets in REQUEST_TRANSITIONS.items() if not targets]
    for state in finals:
        assert f"    {state} --> [*]" in lines
    assert len(lines) == 1 + 1 + len(edges) + len(finals)


def test_every_process_transition_is_drawn(script: ModuleType) -> None:
    lines = _lines(script, "process")
    assert "    [*] --> starting" in lines
    for (state, event), target in PROCESS_TRANSITIONS.items():
        assert f"    {state} --> {target} : {event}" in lines
    assert "    exited --> [*]" in lines
    assert len(lines) == 1 + 1 + len(PROCESS_TRANSITIONS) + 1


def test_one_machine_or_all(script: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert script.main(["--machine", "request"]) == 0
    assert capsys.readouterr().out == script.mermaid(script.machines()["request"])
    assert script.main([]) == 0
    assert capsys.readouterr().out.count("stateDiagram-v2") == 3


def test_manual_section_is_the_script_output(script: ModuleType) -> None:
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    section = concepts.split("\n## State machines\n", 1)[1].split("\n## ", 1)[0]
    generated = script.render(list(script.machines()), markdown=True)
    body = section[section.index("\n### ") + 1 :].rstrip("\n") + "\n"
    assert body == generated, (
        "docs/concepts.md is stale: run python scripts/state_diagram.py --markdown"
    )
