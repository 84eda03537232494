"""``shepherd-child``'s entry point: the agent's calls go to its bridge, which has everything
loaded, so a command agent does not pay the whole command line's start-up on every call.

An agent started by a bridge finds ``SHEPHERD_COMMAND_SOCKET`` in its environment: the bridge's
command socket (:mod:`actors.child.commands`). ``message``, ``done``, ``usage`` and
``approve-request`` (without ``--help``) are sent there as one request (the arguments and the
caller's environment); the bridge runs them with the same code as the full command line
(:func:`actors.child.cli.main`, with the caller's environment: its identity, capability and
timeout) and answers with the exit status and what the command printed, which this process
prints as its own. Everything else (``run``, ``--help``, no socket, a socket nobody answers, a
bridge busy with too many calls) runs the full command line in this process, as before.

Rules:
- The command is either run by the bridge or here, never both: a request that could not be
  sent whole falls back to running here (the bridge runs only what it read whole); once sent,
  a bridge that ends without answering is ``session_unavailable`` (the command may or may not
  have reached the parent), never a second try.
- This module imports only the standard library's ``socket`` and ``json`` on the forwarded
  path: that is the point of it (``tests/child/test_light_commands.py`` checks what a call
  loads).

Wire format, one call per connection, each part a JSON object and a newline: the bridge greets
``{"ready": true}`` (or ``{"busy": true}`` and closes: the caller has sent nothing, and runs the
command itself), the caller sends ``{"argv": [...], "env": {...}}`` (at most
:data:`MAX_REQUEST_BYTES`) and shuts its side, the bridge answers ``{"code": int, "stdout":
str, "stderr": str}``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

from actors.child.command_wire import (
    ENV_COMMAND_SOCKET,
    FORWARDED,
    MAX_REQUEST_BYTES,
    READY,
    socket_address,
    wants_help,
    wants_json,
)

__all__ = ["forward", "main"]


def _unanswered(argv: Sequence[str]) -> int:
    """The bridge took the request and ended without an answer (the command line's error
    format: ``{"error": ...}`` on stdout under ``--json``, else a line on stderr; exit 2)."""
    code, message = (
        "session_unavailable",
        "the agent's bridge ended during the call: it may or may not have reached the parent",
    )
    if wants_json(argv):
        import json

        print(json.dumps({"error": {"code": code, "message": message}}))
    else:
        print(f"shepherd-child: {message} ({code})", file=sys.stderr)
    return 2


def _greeting(conn: socket.socket) -> bytes:
    """The bridge's first line (at most 64 bytes): :data:`READY`, or a ``busy`` one."""
    line = b""
    while not line.endswith(b"\n") and len(line) < 64:
        chunk = conn.recv(64 - len(line))
        if not chunk:
            break
        line += chunk
    return line


def forward(address: str, argv: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """Run the command through the bridge at ``address``: its exit status once printed, or
    None if it was not run there (nobody listens, the request could not be sent whole, or the
    bridge is busy)."""
    import json
    import socket

    request = json.dumps({"argv": list(argv), "env": dict(environ)}).encode() + b"\n"
    if len(request) > MAX_REQUEST_BYTES:
        return None  # the full command line refuses it with the bound that applies
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(address)
            if _greeting(conn) != READY:
                return None  # busy (or not a bridge): nothing was sent
            conn.sendall(request)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            return None  # not sent whole: the bridge runs nothing it did not read whole
        chunks = []
        try:
            while chunk := conn.recv(1 << 16):
                chunks.append(chunk)
        except OSError:
            chunks = []
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return _unanswered(argv)
    if not isinstance(answer, dict):
        return _unanswered(argv)
    code, out, err = answer.get("code"), answer.get("stdout"), answer.get("stderr")
    if not (isinstance(code, int) and isinstance(out, str) and isinstance(err, str)):
        return _unanswered(argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    address = socket_address(environ.get(ENV_COMMAND_SOCKET, ""))
    if (
        address is not None
        and arguments
        and arguments[0] in FORWARDED
        and not wants_help(arguments)
    ):
        code = forward(address, arguments, environ)
        if code is not None:
            return code
    from actors.child.cli import main as run_here

    return run_here(arguments, environ)


if __name__ == "__main__":
    sys.exit(main())
