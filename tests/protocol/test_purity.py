"""protocol/ is sans-IO: no threads, files, clocks, processes,
randomness or logging. Two independent checks keep it that way:

1. a fresh interpreter imports every protocol module and must not load any runtime module
   that importing msgspec alone does not already load (pytest itself loads half the world,
   so this cannot be checked in-process);
2. an AST scan of every ``protocol/*.py`` (the watchdog modules included) allows imports only
   from a short list of pure modules and refuses calls to clocks, sleeps, files, uuids and
   random numbers.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import protocol

PROTOCOL_DIR = Path(protocol.__file__).resolve().parent
REPO = PROTOCOL_DIR.parent
SOURCES = sorted(PROTOCOL_DIR.rglob("*.py"))


def _module(path: Path) -> str:
    """``session.agents`` for ``protocol/session/agents.py``, ``session`` for its package."""
    parts = path.relative_to(PROTOCOL_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p) for p in SOURCES} - {""}

# ----------------------------------------------------------------------------- 1. runtime imports

#: Modules whose presence means threads, processes, sockets, files, clocks, randomness or
#: logging (or the actor side of the project). A submodule of any of them counts too.
BANNED_MODULES = (
    "actors",
    "pykka",
    "watchfiles",
    "loguru",
    "rich",
    "subprocess",
    "socket",
    "_socket",
    "ssl",
    "select",
    "selectors",
    "threading",
    "_thread",
    "queue",
    "asyncio",
    "concurrent",
    "multiprocessing",
    "signal",
    "logging",
    "tempfile",
    "shutil",
    "glob",
    "pathlib",
    "random",
    "secrets",
    "uuid",
    "datetime",
    "time",
    "sqlite3",
    "http",
    "urllib",
)

_PREAMBLE = """
import importlib, json, pkgutil, sys
import msgspec, msgspec.json, msgspec.structs, msgspec.toml, msgspec.inspect
"""
_BASELINE = _PREAMBLE + "print(json.dumps(sorted(sys.modules)))\n"
_WITH_PROTOCOL = (
    _PREAMBLE
    + """
import protocol
names = sorted(m.name[9:] for m in pkgutil.walk_packages(protocol.__path__, "protocol."))
for name in names:
    importlib.import_module("protocol." + name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""
)


def _run(code: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def _banned(name: str) -> bool:
    return any(name == b or name.startswith(b + ".") for b in BANNED_MODULES)


def test_importing_protocol_loads_no_runtime_module() -> None:
    baseline = set(_run(_BASELINE))
    result = _run(_WITH_PROTOCOL)
    assert isinstance(result, dict)
    # every module file was imported (discovery did not silently find nothing)
    assert set(result["imported"]) == MODULES
    added = set(result["modules"]) - baseline
    assert {f"protocol.{name}" for name in MODULES} <= added
    offenders = sorted(name for name in added if _banned(name))
    assert offenders == [], f"importing protocol/ loaded runtime modules: {offenders}"


def test_the_baseline_itself_is_meaningful() -> None:
    # If msgspec ever started importing threading, the check above would silently pass for
    # it; this pins the assumption down so that a change is noticed.
    baseline = set(_run(_BASELINE))
    for name in ("threading", "subprocess", "logging", "random", "asyncio", "actors", "pykka"):
        assert name not in baseline


# ----------------------------------------------------------------------------- 2. AST scan

ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "typing",
        "enum",
        "re",
        "bisect",
        "collections",
        "collections.abc",
        "dataclasses",
        "hashlib",
        "itertools",
        "math",
        "string",
        "unicodedata",
        "json",
        "functools",
        "operator",
    }
)
ALLOWED_PACKAGES = ("msgspec", "protocol")

#: calls refused by bare name, and by module -> attribute (``time.monotonic``, ...)
FORBIDDEN_NAMES = frozenset(
    {"open", "print", "input", "breakpoint", "__import__", "uuid4", "uuid1", "random", "Random"}
    | {"SystemRandom"}
)
FORBIDDEN_ATTRIBUTES = {
    "uuid": {"uuid4", "uuid1"},
    "time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "sleep"},
    "datetime": {"now", "utcnow"},
    "datetime.datetime": {"now", "utcnow"},
    "os": {"urandom", "getpid"},
}
FORBIDDEN_CALLS = FORBIDDEN_NAMES | {
    f"{module}.{attribute}"
    for module, attributes in FORBIDDEN_ATTRIBUTES.items()
    for attribute in attributes
}
SAMPLE = Path(__file__).parent / "data" / "impure_sample.txt"


def _import_allowed(module: str) -> bool:
    if module in ALLOWED_IMPORTS:
        return True
    return any(module == p or module.startswith(p + ".") for p in ALLOWED_PACKAGES)


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def violations(source: str, filename: str = "<src>") -> list[str]:
    """Every disallowed import and forbidden call in ``source``, as ``file:line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found.extend(
                f"{filename}:{node.lineno}: import {alias.name}"
                for alias in node.names
                if not _import_allowed(alias.name)
            )
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and not _import_allowed(node.module or ""):
                found.append(f"{filename}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is not None and (name in FORBIDDEN_CALLS or name.startswith("random.")):
                found.append(f"{filename}:{node.lineno}: call {name}()")
    return found


def test_the_scan_finds_what_it_should() -> None:
    source = SAMPLE.read_text(encoding="utf-8")
    expected = sorted(
        line.split("# expect: ", 1)[1] for line in source.splitlines() if "# expect: " in line
    )
    assert len(expected) == 10  # the sample names what it must trip
    found = sorted(v.split(": ", 1)[1] for v in violations(source))
    assert found == expected


def test_every_protocol_module_is_scanned() -> None:
    names = {p.relative_to(PROTOCOL_DIR).with_suffix("").as_posix() for p in SOURCES}
    assert {
        "core/ids",
        "records/tasks",
        "wire/envelopes",
        "scripted/script",
        "calls/render",
    } <= names
    assert any(name.startswith("watchdog") for name in names)


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(PROTOCOL_DIR)) for p in SOURCES])
def test_module_is_sans_io(path: Path) -> None:
    found = violations(
        path.read_text(encoding="utf-8"), f"protocol/{path.relative_to(PROTOCOL_DIR)}"
    )
    assert found == [], "protocol/ must stay sans-IO:\n" + "\n".join(found)
