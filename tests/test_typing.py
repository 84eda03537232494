"""The whole project type-checks: ``mypy .`` from the root, with the project's own settings
(``[tool.mypy]`` in pyproject.toml), covers the tests and scripts as well as ``actors/`` and
``protocol/``, so a test that reaches for an attribute its object does not have, or a stale
``type: ignore``, is found here and not by the next reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)  # a cold mypy cache on a busy machine takes minutes
def test_mypy_passes_for_the_whole_project() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"mypy . failed:\n{done.stdout}{done.stderr}"
