"""The ``acp`` adapter's options (``SHEPHERD_AGENT_OPTIONS``), checked: a bad one is
``invalid_argument`` (the parent checks them before it starts the bridge, the bridge again
before it starts the agent).

Options::

    {"acp_cmd": "CMD ARGS…",     # the ACP agent's command line (shell words, no shell):
                                 # e.g. "npx @zed-industries/codex-acp"
     "cwd": DIR,                 # the agent's working directory (default: the bridge's)
     "startup_timeout_s": 60,    # initialize + session/new (or session/load) must answer in it
     "approve": ["KIND:GLOB"]}   # spawn --approve: which permission requests go to the parent
                                 # (protocol.calls.gates; the others are allowed at once)

Other keys (``description``, ...) are ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from protocol.calls.gates import Gate, gates
from protocol.core.errors import InvalidArgument

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT_S",
    "MAX_ACP_CMD_CHARS",
    "MAX_ACP_CMD_WORDS",
    "SESSION_FILE",
    "AcpOptions",
    "save_session",
    "saved_session",
]

DEFAULT_STARTUP_TIMEOUT_S = 60.0
#: the bounds of ``acp_cmd``
MAX_ACP_CMD_CHARS = 4096
MAX_ACP_CMD_WORDS = 256


class AcpOptions:
    """The adapter's options, checked (a bad one is ``invalid_argument``)."""

    def __init__(self, cwd: str, options: Mapping[str, Any]) -> None:
        self.argv = self._argv(cwd, options.get("acp_cmd"))
        workdir = options.get("cwd")
        if workdir is not None and (not isinstance(workdir, str) or not workdir.strip()):
            raise InvalidArgument('option "cwd" must be the path of a directory')
        self.cwd = str(Path(cwd, workdir or "."))
        if not os.path.isdir(self.cwd):
            raise InvalidArgument(f'option "cwd": {self.cwd} is not a directory')
        timeout = options.get("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not (0 < timeout <= 600)
        ):
            raise InvalidArgument('option "startup_timeout_s" must be in (0, 600] seconds')
        self.startup_timeout_s = float(timeout)
        approve = options.get("approve") or []
        if not isinstance(approve, list | tuple) or not all(isinstance(r, str) for r in approve):
            raise InvalidArgument('option "approve" must be a list of TOOL:GLOB rules')
        self.gates: list[Gate] = gates(approve)

    @staticmethod
    def _argv(cwd: str, value: object) -> list[str]:
        if value is None:
            raise InvalidArgument(
                'the acp adapter needs "acp_cmd" (--acp-cmd): the command line of an Agent '
                'Client Protocol agent, e.g. "npx @zed-industries/codex-acp"'
            )
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgument('option "acp_cmd" must be a non-empty command line')
        if len(value) > MAX_ACP_CMD_CHARS:
            raise InvalidArgument(f'option "acp_cmd" is longer than {MAX_ACP_CMD_CHARS} characters')
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise InvalidArgument(f'option "acp_cmd" is not a valid command line: {exc}') from None
        if not argv:
            raise InvalidArgument('option "acp_cmd" must be a non-empty command line')
        if len(argv) > MAX_ACP_CMD_WORDS:
            raise InvalidArgument(f'option "acp_cmd" has more than {MAX_ACP_CMD_WORDS} words')
        program = argv[0]
        if os.sep in program:
            path = Path(cwd, program)
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise InvalidArgument(f'option "acp_cmd": {path} is not an executable file')
            argv[0] = str(path)
        else:
            found = shutil.which(program)
            if found is None:
                raise InvalidArgument(f'option "acp_cmd": {program!r} is not on PATH')
            argv[0] = found
        return argv


#: the agent's ACP session id, kept in its dir (``serve --recover`` loads that session again)
SESSION_FILE = "acp_session.json"


def saved_session(agent_dir: Path | None) -> str | None:
    """The ACP session id kept in ``agent_dir``, if any."""
    if agent_dir is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((agent_dir / SESSION_FILE).read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("session_id"), str):
            return str(data["session_id"])
    return None


def save_session(agent_dir: Path | None, session_id: str) -> None:
    """Keep ``session_id`` in ``agent_dir`` (best effort)."""
    if agent_dir is not None:
        with contextlib.suppress(OSError):
            (agent_dir / SESSION_FILE).write_text(json.dumps({"session_id": session_id}))
