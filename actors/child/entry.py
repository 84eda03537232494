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
    CHILD_COMMANDS,
    ENV_COMMAND_SOCKET,
    UNANSWERED_CODE,
    forward,
    socket_address,
    unanswered,
    wants_help,
)

__all__ = ["main"]

#: the call was taken and not answered (:func:`~actors.runtime.command_wire.unanswered`)
MESSAGE = "the agent's bridge ended during the call: it may or may not have reached the parent"
LINE = f"shepherd-child: {MESSAGE} ({UNANSWERED_CODE})"


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    address = socket_address(environ.get(ENV_COMMAND_SOCKET, ""))
    if (
        address is not None
        and arguments
        and arguments[0] in CHILD_COMMANDS
        and not wants_help(arguments)
    ):
        request = {"argv": arguments, "env": dict(environ)}
        code = forward(address, request, unanswered(arguments, MESSAGE, LINE))
        if code is not None:
            return code
    from actors.child.cli import main as run_here

    return run_here(arguments, environ)


if __name__ == "__main__":
    sys.exit(main())
