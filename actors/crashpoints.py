"""Named crash points for fault-injection tests of the real supervisor.

``SHEPHERD_CRASH_AT=<name>`` makes the process kill itself with SIGKILL the first time it
reaches that point — exactly what an outside ``kill -9`` at that instant would do. Unset (the
normal case) the check is one comparison against a value read once at import.

Points: ``settle.before_journal``, ``settle.after_journal``, ``notify.before_write``,
``notify.after_write``, ``done.before_handle``, ``done.after_handle`` (a ``task_done``
envelope read from the parent inbox, before / after the broker handled it).
"""

from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "crashpoint"]

POINTS = (
    "settle.before_journal",
    "settle.after_journal",
    "notify.before_write",
    "notify.after_write",
    "done.before_handle",
    "done.after_handle",
)

_ARMED = os.environ.get("SHEPHERD_CRASH_AT") or None


def crashpoint(name: str) -> None:
    if _ARMED is not None and name == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
