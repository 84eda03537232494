"""How a producer waits for room in a full inbox (``inbox_full``): one schedule for every
producer (a child bridge's backlog, ``shepherd-child message|done``, the benchmarks' producers).

Rules:
- The waits double from :data:`FIRST_S` to :data:`LONGEST_S`, and each is drawn at random
  from its upper half: producers refused together do not come back together (in step, they
  would find the inbox full again, all at once, and the receiver idle in between).
- No busy loop: after ``n`` refusals a producer has waited at least ``FIRST_S * (2**n - 1) / 2``
  (while doubling), then at least ``LONGEST_S / 2`` per refusal, so it makes at most
  ``log2(LONGEST_S / FIRST_S) + 1 + 2 * T / LONGEST_S`` attempts in ``T`` seconds.
- A publish that gets through starts the schedule over (:meth:`Backoff.reset`).

Why these numbers: a full inbox holds ``max_queue_depth`` (1,000) envelopes and its receiver
hands over thousands a second even on a loaded two-core machine, so it stays busy for 100 ms
or more after a refusal. A producer that is back within :data:`LONGEST_S` (25 ms) finds room
while most of the inbox is still queued: the receiver never waits for producers, and a refused
attempt (one ``lstat`` and an exception) costs the receiver's core next to nothing. The
previous schedule (up to 1 s) left the receiver idle after each drain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

__all__ = [
    "FIRST_S",
    "LONGEST_S",
    "OUTAGE_FIRST_S",
    "OUTAGE_LONGEST_S",
    "Backoff",
    "outage_backoff",
]

#: the first wait after a refusal
FIRST_S = 0.001
#: the longest wait between two attempts
LONGEST_S = 0.025
#: an outage's schedule (the session out of reach: a NATS stream electing its leader, a server
#: restarting): it passes in seconds, not in the milliseconds a full inbox takes to drain
OUTAGE_FIRST_S = 0.05
OUTAGE_LONGEST_S = 1.0


class Backoff:
    """The waits of one producer (module rules); not thread-safe (one per producer)."""

    def __init__(
        self,
        first_s: float = FIRST_S,
        longest_s: float = LONGEST_S,
        rng: random.Random | None = None,
    ) -> None:
        self._first = first_s
        self._longest = max(longest_s, first_s)
        self._rng = rng  # made at the first refusal: a command that is never refused skips it
        self._ceiling = 0.0
        self.refusals = 0  # since the last reset

    def next(self) -> float:
        """How long to wait after one more refusal."""
        self.refusals += 1
        self._ceiling = min(max(self._ceiling * 2, self._first), self._longest)
        if self._rng is None:
            import random

            self._rng = random.Random()
        return self._ceiling * (0.5 + 0.5 * self._rng.random())

    def reset(self) -> None:
        self._ceiling = 0.0
        self.refusals = 0

    @property
    def waiting(self) -> bool:
        """True after a refusal, until :meth:`reset`."""
        return self._ceiling > 0.0


def outage_backoff() -> Backoff:
    """The pauses between the attempts of one wait through an outage."""
    return Backoff(OUTAGE_FIRST_S, OUTAGE_LONGEST_S)
