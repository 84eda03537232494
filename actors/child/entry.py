"""``shepherd-child``'s entry point: the agent's calls go to its bridge, which has everything
loaded, so a command agent does not pay the whole command line's start-up on every call.

An agent started by a bridge finds ``SHEPHERD_COMMAND_SOCKET`` in its environment: the bridge's
command socket (:mod:`actors.runtime.command_socket`). ``message``, ``done``, ``usage`` and
``approve-request`` (without ``--help``) are sent there with the caller's environment; the
bridge runs them with the command line's own code (:func:`actors.child.cli.run_captured`: the
caller's identity, capability and timeout) and answers with the exit status and what the
command printed, which this process prints as its own. Everything else (``run``, ``--help``,
no socket, a socket nobody answers, a busy bridge) runs the whole command line here. The
rules (a call runs in one place only; what this path loads) are
:mod:`actors.runtime.command_wire`'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from actors.runtime.command_wire import (
    ANSWER_TIMEOUT_S,
    CHILD_COMMANDS,
    ENV_COMMAND_SOCKET,
    SANDBOX_SOCKET,
    UNANSWERED_CODE,
    WAIT_MARGIN_S,
    forward,
    option_value,
    socket_address,
    unanswered,
    wants_help,
)

__all__ = ["main"]

#: the call was taken and not answered (:func:`~actors.runtime.command_wire.unanswered`)
MESSAGE = (
    "the agent's bridge took the call and did not answer (it ended, or did not answer in "
    "time): it may or may not have reached the parent"
)
LINE = f"shepherd-child: {MESSAGE} ({UNANSWERED_CODE})"
#: the bridge did not greet (stopped or wedged): nothing was sent
SILENT = (
    "the agent's bridge did not answer its command socket (stopped or wedged?); nothing was sent"
)
SILENT_LINE = f"shepherd-child: {SILENT} ({UNANSWERED_CODE})"


def _answer_within(argv: Sequence[str], environ: Mapping[str, str]) -> float | None:
    """The bridge answers within the call's own deadline (``approve-request --timeout``, else
    the child commands' ``SHEPHERD_CHILD_TIMEOUT_S``) and a margin; an approval with no
    deadline waits as long as the parent takes."""
    given = option_value(argv, "--timeout") if argv[0] == "approve-request" else None
    if argv[0] == "approve-request" and given is None:
        return None
    raw = given if given is not None else environ.get("SHEPHERD_CHILD_TIMEOUT_S", "")
    try:
        seconds = float(raw) if raw.strip() else ANSWER_TIMEOUT_S
    except ValueError:
        seconds = ANSWER_TIMEOUT_S  # refused there at once
    return max(0.0, min(seconds, 10**9)) + WAIT_MARGIN_S


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    named = environ.get(ENV_COMMAND_SOCKET, "")
    address = named if named == SANDBOX_SOCKET else socket_address(named)
    if (
        address is not None
        and arguments
        and arguments[0] in CHILD_COMMANDS
        and not wants_help(arguments)
    ):
        request = {"argv": arguments, "env": dict(environ)}
        code = forward(
            address,
            request,
            unanswered(arguments, MESSAGE, LINE),
            silent=unanswered(arguments, SILENT, SILENT_LINE),
            answer_within=_answer_within(arguments, environ),
        )
        if code is not None:
            return code
    from actors.child.cli import main as run_here

    return run_here(arguments, environ)


if __name__ == "__main__":
    sys.exit(main())
