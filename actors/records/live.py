"""Where sessions are found: the state directory and its pointers to live sessions (rule 1 of
:mod:`actors.records.session_info`), in the standard library only, so that ``shepherd``'s entry
point (:mod:`actors.surfaces.entry`) finds the session without loading the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["ENV_SESSION", "live_dir", "pointed_sessions", "state_dir"]

#: names the session a command talks to, when ``--session`` does not
ENV_SESSION = "SHEPHERD_SESSION"


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "shepherd"


def live_dir() -> Path:
    return state_dir() / "live"


def pointed_sessions() -> list[Path]:
    """The session directories the live pointers name (live or not: a killed supervisor leaves
    its pointer; :func:`actors.records.session_info.is_live` tells)."""
    found: list[Path] = []
    try:
        pointers = sorted(live_dir().glob("*.json"))
    except OSError:
        return []
    for pointer in pointers:
        try:
            found.append(Path(json.loads(pointer.read_text())["session_dir"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found
