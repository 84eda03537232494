"""Waiting out an outage of the NATS servers: no server answering, or a stream with no leader
while a cluster elects one (seconds on three servers). What is waited out is tried again as the
same message (its ``Nats-Msg-Id``), so the servers store it once however often it was tried."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from protocol.errors import SessionUnavailable

__all__ = ["FIRST_PAUSE_S", "LONGEST_PAUSE_S", "Outage", "waiting_out"]

T = TypeVar("T")

#: the backoff between attempts: doubling from the first to the longest pause
FIRST_PAUSE_S = 0.05
LONGEST_PAUSE_S = 1.0


class Outage(SessionUnavailable):
    """No server answered, or the session's stream has no leader: it may pass."""


def waiting_out(attempt: Callable[[], T], ceiling_s: float, given_up: Callable[[], bool]) -> T:
    """``attempt()``, tried again after each :class:`Outage` until ``ceiling_s`` passed or
    ``given_up()``; then the last outage is raised (``session_unavailable``)."""
    deadline = time.monotonic() + ceiling_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            return attempt()
        except Outage:
            if given_up() or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # a backoff between attempts, while the servers recover
        pause = min(pause * 2, LONGEST_PAUSE_S)
