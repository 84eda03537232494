"""A child bridge's way to a full parent inbox (actors/child/outbox.py) on virtual time: it
retries on the producers' schedule (no busy loop: attempts bounded), keeps its order, and
gets through as soon as there is room."""

from __future__ import annotations

import math
from typing import Any

from loguru import logger

from actors.child.outbox import ParentOutbox
from actors.mailbox.backoff import FIRST_S, LONGEST_S
from actors.runtime.clock import VirtualClock
from protocol.errors import InboxFull


class FullInbox:
    """A mailbox whose parent inbox refuses every publish until ``room`` is set."""

    def __init__(self) -> None:
        self.attempts = 0
        self.room = False
        self.published: list[Any] = []

    def publish(self, inbox: str, envelope: Any) -> None:
        self.attempts += 1
        if not self.room:
            raise InboxFull("inbox 'parent' already holds 1000 unread envelopes (limit 1000)")
        self.published.append(envelope)


def test_a_full_parent_inbox_is_retried_a_bounded_number_of_times_then_drained_in_order() -> None:
    clock = VirtualClock()
    inbox = FullInbox()
    outbox = ParentOutbox(inbox, clock, lambda fn: fn(), logger)  # type: ignore[arg-type]
    envelopes = [f"envelope {i}" for i in range(5)]
    for envelope in envelopes:
        outbox.publish(envelope)  # type: ignore[arg-type]
    start, horizon = clock.now(), 10.0
    while clock.fire_next(start + horizon):
        pass
    # one attempt per retry, never one per envelope waiting, and bounded by the schedule
    bound = 1 + math.log2(LONGEST_S / FIRST_S) + 1 + 2 * horizon / LONGEST_S
    assert horizon / LONGEST_S <= inbox.attempts <= bound
    inbox.room = True
    clock.fire_next(clock.now() + LONGEST_S)  # the next retry comes within the longest wait
    assert inbox.published == envelopes
