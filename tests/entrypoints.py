"""Running a command's entry point as its console script does, and seeing what it loaded: how
the tests tell a call the long-lived process ran (the caller loaded none of the command line)
from one the caller ran itself."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["run_entry"]

#: runs ``module``'s ``main`` with the arguments, then writes the loaded modules
_RUN_AND_LIST = """
import importlib, json, sys
main = importlib.import_module(sys.argv[1]).main
code = main(sys.argv[3:])
with open(sys.argv[2], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""


def run_entry(
    module: str, listing: Path, args: tuple[str, ...], cwd: Path, env: Mapping[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """(the finished call, the modules it had loaded: none if it did not get that far)."""
    listing.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, module, str(listing), *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    modules: list[str] = json.loads(listing.read_text()) if listing.exists() else []
    return done, modules
