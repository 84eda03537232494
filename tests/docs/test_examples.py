"""The manual's examples that are not shell commands hold: the settings file of the settings
guide is read without a warning, and the Python API example of the parents guide runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from protocol.records.settings import Settings, apply_overrides

from .markdown import DOCS, blocks


def test_the_settings_example_is_read_without_a_warning() -> None:
    (example,) = blocks(DOCS / "guides" / "settings.md", "toml")
    settings, warnings = apply_overrides(Settings(), tomllib.loads(example), "example")
    assert warnings == []
    assert settings != Settings()


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_the_python_api_example_runs(tmp_path: Path) -> None:
    (example,) = blocks(DOCS / "guides" / "parents.md", "python")
    # the guide's script is the getting-started guide's greeter
    (script,) = [b for b in blocks(DOCS / "getting-started.md", "sh") if "greeter.json" in b]
    greeter = script.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    (tmp_path / "greeter.json").write_text(greeter)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "greeted: say hello"
