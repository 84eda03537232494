"""The errors of the Pi RPC client (:class:`~actors.child.pi.rpc.PiProcess`), named for the
condition: Pi refused a command, did not answer in time, or is gone. All derive from
:class:`PiError`; none crosses a process boundary.
"""

from __future__ import annotations

__all__ = ["PiCommandError", "PiError", "PiExitedError", "PiTimeoutError"]


class PiError(Exception):
    """Base of the errors this client raises."""


class PiCommandError(PiError):
    """Pi answered a command with ``success: false``."""

    def __init__(self, command: str, error: str) -> None:
        super().__init__(f"pi rejected {command!r}: {error}")
        self.command = command
        self.error = error


class PiTimeoutError(PiError, TimeoutError):
    """Pi did not answer a command in time."""


class PiExitedError(PiError):
    """The Pi process is gone (or its input is closed), so it cannot answer."""
