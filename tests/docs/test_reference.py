"""The reference pages are what ``scripts/gen_reference.py`` writes from the code now, and the
command line's ``--help`` says what they say (both are read from the same parsers)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

from protocol import ops
from protocol.core import errors
from protocol.ops import tools
from protocol.ops.watchdog import OP_ARGS
from protocol.records.settings import Settings
from protocol.watchdog.config import CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "scripts" / "gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_code_generates(script: ModuleType) -> None:
    pages = script.pages()
    assert set(pages) == {
        str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "reference").glob("*.md")
    }
    stale = [path for path, text in pages.items() if (ROOT / path).read_text() != text]
    assert not stale, f"{stale} are stale: run python scripts/gen_reference.py"


def test_generating_twice_gives_the_same_pages(script: ModuleType) -> None:
    assert script.pages() == script.pages()


def test_the_reference_covers_every_operation_tool_error_and_setting(script: ModuleType) -> None:
    pages = script.pages()
    cli = pages["docs/reference/cli.md"]
    for op in ops.PARENT:
        if op.help:
            assert f"### `shepherd {op.command}`" in cli
        for param in op.params.values():
            if param.cli and param.cli.startswith("-"):
                assert f"`{param.cli}" in cli, (op.name, param.cli)
    for op in ops.CHILD:
        assert f"### `shepherd-child {op.name}`" in cli
    for name in OP_ARGS:
        assert f"| `{name}` |" in cli
    tool_page = pages["docs/reference/tools.md"]
    for spec in (*tools.mcp_tools(), *tools.child_tools()):
        assert f"### `{spec.name}`" in tool_page
    codes = pages["docs/reference/errors-and-notifications.md"]
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.ShepherdError) and cls.code != "error":
            assert f"| `{cls.code}` | `{cls.__name__}` |" in codes
    settings = pages["docs/reference/settings.md"]
    for field in msgspec.structs.fields(Settings):
        if field.name != "watchdog":
            assert f"| `{field.name}` |" in settings
    for key in CONFIG_KEYS:
        assert f"| `{key}` |" in settings


def test_check_mode_names_a_stale_page(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(script, "ROOT", tmp_path)
    assert script.main([]) == 0  # writes every page under tmp_path
    assert script.main(["--check"]) == 0
    page = tmp_path / "docs" / "reference" / "settings.md"
    page.write_text(page.read_text().replace("`coalesce_ms` | `25.0`", "`coalesce_ms` | `30`"))
    assert script.main(["--check"]) == 1


@pytest.mark.processes
def test_help_lists_the_commands_the_reference_lists(script: ModuleType) -> None:
    """``shepherd --help`` and a command's ``--help`` (real processes) name what the reference
    names."""
    cli = script.pages()["docs/reference/cli.md"]
    env = {**os.environ, "COLUMNS": "200"}
    bin_dir = Path(sys.executable).parent
    top = subprocess.run(
        [bin_dir / "shepherd", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert top.returncode == 0, top.stderr
    listed = top.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed == [line.split("`")[1] for line in cli.splitlines() if line.startswith("| [`")]
    spawn = subprocess.run(
        [bin_dir / "shepherd", "spawn", "--help"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert spawn.returncode == 0, spawn.stderr
    section = cli.split("### `shepherd spawn`", 1)[1].split("\n### ", 1)[0]
    flags = [row.split("`")[1].split()[0] for row in section.splitlines() if row.startswith("| `-")]
    assert flags and all(flag in spawn.stdout for flag in flags)
