"""Helpers for the tests against a live supervisor (real bridges, real mailbox).

Real processes give no event for everything a test must see (a pid gone from ``/proc``, a
reason file written by another process), so :func:`wait_until` polls, briefly and bounded by a
timeout; it never stands in for a fixed sleep.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["session_pids", "wait_until", "write_script"]


def wait_until(predicate: Callable[[], object], timeout: float = 20.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def write_script(directory: Path, name: str, script: dict[str, Any]) -> str:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(script))
    return str(path)


def session_pids(session_id: str) -> list[int]:
    """Live processes whose environment names this session (bridges and whatever they ran)."""
    found = []
    marker = f"SHEPHERD_SESSION_ID={session_id}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if marker in environ and ") Z " not in stat:
            found.append(int(entry))
    return found
