"""``shepherd``'s entry point: a session operation goes to the session's supervisor, which has
everything loaded, so the call does not pay the whole command line's start-up.

``shepherd serve`` names its command socket in ``session.json`` (``command_socket``;
:mod:`actors.surfaces.forwarded` runs the calls). A session operation (``status``,
``delegate``, ``wait`` ... every one but ``shutdown``; without ``--help``) is sent there with
the caller's environment and directory when the session is found here as the command line
would find it: ``--session DIR``, else ``$SHEPHERD_SESSION``, else the only live-session
pointer. Anything else (other commands, several pointers, no pointer, a session without a
socket, a supervisor that is gone or busy, a call that names another session) runs the whole
command line here (:func:`actors.surfaces.cli.main`), which finds the session, or says why
not, as before. The rules (a call runs in one place only; what this path loads) are
:mod:`actors.runtime.command_wire`'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from actors.records.live import ENV_SESSION, pointed_sessions
from actors.runtime.command_wire import (
    GREETING_TIMEOUT_S,
    PARENT_COMMANDS,
    UNANSWERED_CODE,
    answer_bound,
    forward,
    option_value,
    socket_address,
    unanswered,
    wants_help,
)

__all__ = ["main"]

#: the call was taken and not answered (:func:`~actors.runtime.command_wire.unanswered`)
MESSAGE = (
    "the session took the call and did not answer (it ended, or did not answer in time): it "
    "may or may not have been done"
)
LINE = f"shepherd: {UNANSWERED_CODE}: {MESSAGE}"
#: the supervisor did not greet (stopped, wedged, in a debugger): nothing was sent
SILENT = (
    f"the session's supervisor did not answer its command socket within {GREETING_TIMEOUT_S:g} s"
    " (stopped or wedged?); nothing was sent"
)
SILENT_LINE = f"shepherd: {UNANSWERED_CODE}: {SILENT}"

#: ``session.json`` is a few hundred bytes; a larger one is not read here
_INFO_MAX_BYTES = 64 * 1024


def _session(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Path, bool] | None:
    """The session directory the command line would use, and whether it was found as the one
    live one; None if that takes more than a look (the command line then decides)."""
    explicit = option_value(argv, "--session")
    if explicit is not None:
        return (Path(explicit).expanduser(), False) if explicit.strip() else None
    named = environ.get(ENV_SESSION, "")
    if named.strip():
        return Path(named).expanduser(), False
    pointed = pointed_sessions()
    return (pointed[0], True) if len(pointed) == 1 else None


def _address(session_dir: Path) -> str | None:
    import json

    try:
        with open(session_dir / "session.json", "rb") as info_file:
            info = json.loads(info_file.read(_INFO_MAX_BYTES))
    except (OSError, ValueError):
        return None
    value = info.get("command_socket") if isinstance(info, dict) else None
    return socket_address(value) if isinstance(value, str) else None


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under us: the command line says what that means for the call
        return None


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    if arguments and arguments[0] in PARENT_COMMANDS and not wants_help(arguments):
        found = _session(arguments, environ)
        address = _address(found[0]) if found is not None else None
        cwd = _cwd()
        if found is not None and address is not None and cwd is not None:
            request = {"argv": arguments, "env": dict(environ), "cwd": cwd, "announce": found[1]}
            code = forward(
                address,
                request,
                unanswered(arguments, MESSAGE, LINE),
                silent=unanswered(arguments, SILENT, SILENT_LINE),
                answer_within=answer_bound(arguments),
            )
            if code is not None:
                return code
    from actors.surfaces.cli import main as run_here

    return run_here(arguments)


if __name__ == "__main__":
    sys.exit(main())
