"""Command sockets, the calling side: a ``shepherd`` or ``shepherd-child`` call handed to the
long-lived process that has everything loaded (the session's supervisor, the agent's bridge),
so that a call costs a connection instead of the command line's start-up. The serving side is
:mod:`actors.runtime.command_socket`; the entry points are :mod:`actors.surfaces.entry` and
:mod:`actors.child.entry`.

Rules:
- A call runs there or here, never both. Whatever was not sent whole runs here (the server
  runs only what it read whole); a server that greets ``busy`` or answers ``elsewhere`` ran
  nothing, so the call runs here; once sent, a server that ends without answering is
  ``session_unavailable`` ("it may or may not have been done"), never a second try.
- Every wait is bounded: a server that does not greet within :data:`GREETING_TIMEOUT_S`
  (stopped, wedged, a debugger) ran nothing, and the call is ``session_unavailable`` naming
  the socket at once (running it here would only wait on the same stopped process); an answer
  is awaited for the caller's bound (``answer_within``: :data:`ANSWER_TIMEOUT_S`, or a
  ``wait``'s ``--timeout`` and :data:`WAIT_MARGIN_S`), then the call is unanswered.
- Standard library only, ``json`` and ``socket`` imported when a call is forwarded: this is
  what the entry points load on that path.

Wire format, one call per connection, each part a JSON object and a newline: the server greets
:data:`READY` (or ``{"busy": true}`` and closes), the caller sends its :class:`request
<actors.runtime.command_socket.Request>` ``{"argv": [...], "env": {...}, "cwd": str,
"announce": bool}`` (at most :data:`MAX_REQUEST_BYTES`) and shuts its side, the server answers
``{"code": int, "stdout": str, "stderr": str}`` or ``{"elsewhere": true}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import socket

__all__ = [
    "ANSWER_TIMEOUT_S",
    "CHILD_COMMANDS",
    "ENV_COMMAND_SOCKET",
    "GREETING_TIMEOUT_S",
    "MAX_REQUEST_BYTES",
    "PARENT_COMMANDS",
    "READY",
    "SANDBOX_SOCKET",
    "UNANSWERED_CODE",
    "WAIT_MARGIN_S",
    "answer_bound",
    "forward",
    "option_value",
    "socket_address",
    "unanswered",
    "wants_help",
    "wants_json",
]

#: the bridge's socket as a sandboxed agent sees it (``spawn --sandbox``:
#: :mod:`actors.child.sandbox`), the one path ``shepherd-child`` connects to
SANDBOX_SOCKET = "/run/shepherd/bridge.sock"
#: the greeting of a server that takes the call
READY = b'{"ready": true}\n'
#: how long a caller waits for a server's greeting: it greets as soon as it accepts
GREETING_TIMEOUT_S = 5.0
#: how long a caller waits for the answer to a call (the same over the session's mailbox)
ANSWER_TIMEOUT_S = 30.0
#: what a blocking call (``wait --timeout S``) waits beyond its own S for the answer
WAIT_MARGIN_S = 10.0
#: where an agent's bridge takes its commands: an abstract Unix socket name, ``@`` for its NUL
ENV_COMMAND_SOCKET = "SHEPHERD_COMMAND_SOCKET"
#: the commands an agent's bridge runs for it (``run`` is the bridge itself)
CHILD_COMMANDS = frozenset(
    {
        "message",
        "done",
        "usage",
        "approve-request",
        "rate-limited",
        "provider-error",
        "watchdog-status",
        "watchdog-events",
        "watchdog-stuck",
        "watchdog-alert",
    }
)
#: the commands a session's supervisor runs for ``shepherd``: every session operation but
#: ``shutdown`` (it ends the server that would answer); checked against the operation table
#: by the tests
PARENT_COMMANDS = frozenset(
    {
        "spawn",
        "delegate",
        "message",
        "watch",
        "status",
        "close",
        "read",
        "cancel",
        "fail",
        "prompt",
        "wait",
        "result",
        "approve",
        "deny",
        "worktrees",
        "merge",
        "delegate-many",
        "spawn-many",
    }
)
#: a request's bound: the arguments (a text is at most ``protocol.core.limits.MAX_TEXT_CHARS``, 1 Mi
#: characters, up to 6 bytes each once escaped) and the environment; a larger one runs here,
#: where the command line refuses it with the bound that applies
MAX_REQUEST_BYTES = 8 * 1024 * 1024
_GREETING_MAX = 64


def socket_address(value: str) -> str | None:
    """The address ``connect`` takes for a socket name this version writes (``@`` then at most
    100 characters: an abstract Unix socket), or None for anything else."""
    if not value.startswith("@") or not 1 < len(value) <= 101:
        return None
    return "\0" + value[1:]


def _head(argv: Sequence[str]) -> Sequence[str]:
    """The options part: everything before ``--``."""
    return argv[: argv.index("--")] if "--" in argv else argv


def wants_help(argv: Sequence[str]) -> bool:
    return any(arg in ("-h", "--help") for arg in _head(argv))


def wants_json(argv: Sequence[str]) -> bool:
    return "--json" in _head(argv)


def option_value(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` / ``--name=VALUE`` before ``--`` (the last one), or None.
    Abbreviations are not seen here; the server checks what it parsed."""
    head = _head(argv)
    found = None
    for i, arg in enumerate(head):
        if arg == name and i + 1 < len(head):
            found = head[i + 1]
        elif arg.startswith(name + "="):
            found = arg[len(name) + 1 :]
    return found


#: what a caller says when the server took its call and ended without an answer
UNANSWERED_CODE = "session_unavailable"


def unanswered(argv: Sequence[str], message: str, line: str) -> Callable[[], int]:
    """The report of a call the server took and ended without answering, in the command
    line's error format: ``{"error": {"code", "message"}}`` on stdout under ``--json``, else
    ``line`` on stderr; exit status 2."""

    def report() -> int:
        import json
        import sys

        if wants_json(argv):
            print(json.dumps({"error": {"code": UNANSWERED_CODE, "message": message}}))
        else:
            print(line, file=sys.stderr)
        return 2

    return report


def answer_bound(argv: Sequence[str]) -> float | None:
    """How long a ``shepherd`` call may wait for its answer: a ``wait`` its ``--timeout`` and
    :data:`WAIT_MARGIN_S` (None: it waits as long as it was told, without one), any other
    call :data:`ANSWER_TIMEOUT_S`."""
    if not argv or argv[0] != "wait":
        return ANSWER_TIMEOUT_S
    given = option_value(argv, "--timeout")
    if given is None:
        return None
    try:
        seconds = float(given)
    except ValueError:
        return ANSWER_TIMEOUT_S  # refused by the server at once
    return seconds + WAIT_MARGIN_S if 0 <= seconds < 10**9 else ANSWER_TIMEOUT_S


def _greeting(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and len(line) < _GREETING_MAX:
        chunk = conn.recv(_GREETING_MAX - len(line))
        if not chunk:
            break
        line += chunk
    return line


def forward(
    address: str,
    request: Mapping[str, Any],
    unanswered: Callable[[], int],
    *,
    silent: Callable[[], int],
    answer_within: float | None,
) -> int | None:
    """Run a call through the server at ``address``: its exit status once its output is
    printed, ``unanswered()`` if the server took it and ended (or stayed silent past
    ``answer_within`` seconds) without an answer, ``silent()`` if it did not greet in time, or
    None if it ran nothing there (module rules)."""
    import json
    import socket
    import sys

    data = json.dumps(dict(request)).encode() + b"\n"
    if len(data) > MAX_REQUEST_BYTES:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.settimeout(GREETING_TIMEOUT_S)
            conn.connect(address)
            if _greeting(conn) != READY:
                return None  # busy, or not a server of ours: nothing was sent
            conn.settimeout(None)
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except TimeoutError:
            return silent()  # stopped or wedged: nothing was sent
        except OSError:
            return None  # not sent whole: the server runs nothing it did not read whole
        chunks = []
        try:
            conn.settimeout(answer_within)
            while chunk := conn.recv(1 << 16):
                chunks.append(chunk)
        except OSError:  # a timeout too: taken, and not answered in time
            chunks = []
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return unanswered()
    if not isinstance(answer, dict):
        return unanswered()
    if answer.get("elsewhere") is True:
        return None
    code, out, err = answer.get("code"), answer.get("stdout"), answer.get("stderr")
    if not (isinstance(code, int) and isinstance(out, str) and isinstance(err, str)):
        return unanswered()
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return code
