"""Waiting out an outage of the NATS servers: no server answering, or a stream with no leader
while a cluster elects one (seconds on three servers). What is waited out is tried again as the
same message (its ``Nats-Msg-Id``), so the servers store it once however often it was tried."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from actors.transports.mailbox.backoff import outage_backoff
from protocol.core.errors import Unreachable

__all__ = ["Outage", "outage_backoff", "through_outage", "waiting_out"]

T = TypeVar("T")

# the backoff between attempts is an outage's
# (:func:`actors.transports.mailbox.backoff.outage_backoff`): doubling, each pause drawn from its
# upper half, so processes waiting out the same outage do not come back in step


class Outage(Unreachable):
    """No server answered, or the session's stream has no leader: it may pass."""


def waiting_out(attempt: Callable[[], T], ceiling_s: float, given_up: Callable[[], bool]) -> T:
    """``attempt()``, tried again after each :class:`Outage` until ``ceiling_s`` passed or
    ``given_up()``; then an :class:`Outage` (``session_unavailable``) naming how long it was
    waited out and the last attempt's failure (whose own text names only that attempt's
    bound, a few seconds, not the whole wait)."""
    started = time.monotonic()
    deadline = started + ceiling_s
    backoff = outage_backoff()
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except Outage as exc:
            pause = backoff.next()
            if given_up() or time.monotonic() + pause > deadline:
                waited = time.monotonic() - started
                tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
                raise Outage(
                    f"the NATS servers were out of reach for {waited:.1f} s ({tries}, up to "
                    f"{ceiling_s:g} s); the last: {exc.message}"
                ) from exc
        time.sleep(pause)  # a backoff between attempts, while the servers recover


async def through_outage(attempt: Callable[[], Awaitable[T]], ceiling_s: float, what: str) -> T:
    """``await attempt()`` (something that may be done again: a read, a stream made), tried
    again while the servers have trouble of their own (no stream leader yet, a consumer not
    made yet, no answer, no connection: an :class:`Outage`, a time-out, a client error, an API
    error of 500 or more) for at most ``ceiling_s``; then ``session_unavailable`` naming
    ``what`` and the last trouble. A refusal (an API error below 500) goes out at once."""
    import asyncio

    import nats.errors
    from nats.js.errors import APIError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + ceiling_s
    backoff = outage_backoff()
    while True:
        try:
            return await attempt()
        except APIError as exc:
            if exc.code is not None and exc.code < 500:  # None: no leader (503 said no code)
                raise
            trouble: Exception = exc
        except (Outage, TimeoutError, nats.errors.Error) as exc:
            trouble = exc
        pause = backoff.next()
        if loop.time() + pause > deadline:
            raise Outage(
                f"{what}: the NATS servers had trouble for {ceiling_s:g} s ({trouble!r})"
            ) from None
        await asyncio.sleep(pause)  # a backoff while the servers recover
