"""What ``shepherd-child``'s entry point (:mod:`actors.child.entry`) and the bridge's command
socket (:mod:`actors.child.commands`) agree on; the wire format is described in the first.
Standard library only: the entry point's forwarded path loads nothing else."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ENV_COMMAND_SOCKET",
    "FORWARDED",
    "MAX_REQUEST_BYTES",
    "READY",
    "socket_address",
    "wants_help",
    "wants_json",
]

#: the greeting of a bridge that takes the call
READY = b'{"ready": true}\n'
#: where the agent's bridge takes commands: an abstract Unix socket name, ``@`` for its NUL
ENV_COMMAND_SOCKET = "SHEPHERD_COMMAND_SOCKET"
#: the commands the bridge runs for its agent (``run`` is the bridge itself)
FORWARDED = frozenset({"message", "done", "usage", "approve-request"})
#: a request's bound: the arguments (a text is at most ``protocol.limits.MAX_TEXT_CHARS``, 1 Mi
#: characters, up to 6 bytes each once escaped) and the environment; a larger one is run here,
#: where the full command line refuses it with the bound that applies
MAX_REQUEST_BYTES = 8 * 1024 * 1024


def socket_address(value: str) -> str | None:
    """The address ``connect`` takes for an ``ENV_COMMAND_SOCKET`` value, or None if it is not
    one this version writes (an abstract name: ``@`` then at most 100 characters)."""
    if not value.startswith("@") or not 1 < len(value) <= 101:
        return None
    return "\0" + value[1:]


def wants_help(argv: Sequence[str]) -> bool:
    head = argv[: argv.index("--")] if "--" in argv else argv
    return any(arg in ("-h", "--help") for arg in head)


def wants_json(argv: Sequence[str]) -> bool:
    head = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in head
