"""The ``command`` adapter's options (``SHEPHERD_AGENT_OPTIONS``), checked: a bad one is
``invalid_argument`` (to the parent's ``spawn``, which runs the same check; or the bridge
exits 2) before any turn runs.

Options::

    {"cmd": "mytool -p {message}",            # the first turn
     "resume_cmd": "mytool --continue -p {message}",   # later turns (default: cmd), and
                                                # every turn after serve --recover
     "cwd": "/path",                            # default: the bridge's cwd
     "kill_grace_s": 2.0}                       # SIGTERM -> SIGKILL when interrupting

Rules:
- ``cmd`` (required) and ``resume_cmd`` are shell command lines containing ``{message}``,
  where the agent's input goes, each at most :data:`MAX_TEMPLATE_BYTES` (a template must
  leave room for the message on one command line).
- ``cwd`` is relative to the agent's working directory and must be an existing directory.
- ``kill_grace_s`` is 0..600 seconds (default :data:`~actors.runtime.procs.KILL_GRACE_S`).
- Other keys (``script``, ``description``, ...) are ignored. Checking starts nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from actors.runtime.procs import KILL_GRACE_S
from protocol.core.errors import InvalidArgument

__all__ = ["MAX_TEMPLATE_BYTES", "CommandOptions", "check_command_options"]

#: A command template longer than this is refused (it must leave room for the message).
MAX_TEMPLATE_BYTES = 8 * 1024


class CommandOptions(NamedTuple):
    cmd: str
    resume_cmd: str | None
    cwd: str
    kill_grace_s: float


def check_command_options(options: Mapping[str, Any], cwd: str) -> CommandOptions:
    """The options, checked (``cwd``: the agent's working directory); see the module rules."""
    cmd = options.get("cmd")
    if not isinstance(cmd, str) or "{message}" not in cmd:
        raise InvalidArgument(
            'a command agent needs "cmd": a shell command line containing {message} '
            "(where the agent's input goes)"
            + (f"; got {cmd!r:.200}" if isinstance(cmd, str) else "")
        )
    resume = options.get("resume_cmd")
    if resume is not None and (not isinstance(resume, str) or "{message}" not in resume):
        raise InvalidArgument(
            '"resume_cmd" must be a shell command line containing {message}'
            + (f"; got {resume!r:.200}" if isinstance(resume, str) else "")
        )
    for name, template in (("cmd", cmd), ("resume_cmd", resume)):
        if template is not None and len(template.encode()) > MAX_TEMPLATE_BYTES:
            raise InvalidArgument(f'"{name}" is longer than {MAX_TEMPLATE_BYTES} bytes')
    workdir = options.get("cwd")
    if workdir is not None and not isinstance(workdir, str):
        raise InvalidArgument('"cwd" must be a directory path')
    full = os.path.join(cwd, workdir) if workdir else cwd
    if not os.path.isdir(full):
        raise InvalidArgument(f'"cwd": {full} is not an existing directory')
    grace = options.get("kill_grace_s", KILL_GRACE_S)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 600:
        raise InvalidArgument('"kill_grace_s" must be 0..600 seconds')
    return CommandOptions(cmd=cmd, resume_cmd=resume, cwd=full, kill_grace_s=float(grace))
