"""Named crash points for fault-injection tests of the real supervisor.

``SHEPHERD_CRASH_AT=<name>`` makes the process kill itself with SIGKILL the first time it
reaches that point — exactly what an outside ``kill -9`` at that instant would do. Unset (the
normal case) the check is one comparison against a value read once at import.

Points: ``settle.before_journal``, ``settle.after_journal``, ``notify.before_write``,
``notify.after_write``, ``done.before_handle``, ``done.after_handle`` (a ``task_done``
envelope read from the parent inbox, before / after the broker handled it),
``mailbox.before_ack`` (any process's mailbox receiver: a batch handed over and handled, none of
its files acknowledged yet), ``spawn.before_launch`` (a spawn accepted and journaled, its bridge
not started yet), ``merge.planned`` / ``merge.moved`` (a merge journaled planned, its branch
not moved yet / moved, not journaled done yet), and two torn
writes: ``settle.torn_journal`` (half of a settlement's journal line written) and
``notify.torn_write`` (half of a notification's line written), each then killed.
"""

from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "crashpoint", "torn_write"]

POINTS = (
    "settle.before_journal",
    "settle.after_journal",
    "notify.before_write",
    "notify.after_write",
    "done.before_handle",
    "done.after_handle",
    "mailbox.before_ack",
    "spawn.before_launch",
    "merge.planned",
    "merge.moved",
    "settle.torn_journal",
    "notify.torn_write",
)

_ARMED = os.environ.get("SHEPHERD_CRASH_AT") or None


def crashpoint(name: str) -> None:
    if _ARMED is not None and name == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)


def torn_write(name: str, fd: int, data: bytes) -> None:
    """At the armed point: write the first half of ``data`` to ``fd``, then SIGKILL — the file
    is left as a kill in the middle of that write would leave it."""
    if _ARMED is not None and name == _ARMED:
        os.write(fd, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
