"""Where ids come from: random in production, seeded in the simulation.

In production an id's token is 8 bytes from the OS, drawn :data:`_BATCH` ids at a time: each
``os.urandom`` call is a system call that releases the GIL, and the broker (the session's one
serial actor) makes an id for every receipt it sends. Released, the GIL goes to another
thread, and the broker waits up to the interpreter's switch interval (5 ms) to get it back:
one draw per id made a burst of settlements wait on GIL hand-offs, not on work. The tokens
are the same OS randomness, only fetched in bulk; a forked child never reuses its parent's.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from protocol.core.ids import IdKind, make_id

if TYPE_CHECKING:
    import random

__all__ = ["IdSource"]

#: tokens drawn from the OS per system call
_BATCH = 256
_TOKEN_BYTES = 8

#: bumped in a forked child: tokens drawn before the fork belong to the parent
_forks = [0]


def _forked() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_forked)


class IdSource:
    def __init__(self, seed: int | None = None) -> None:
        self._rng: random.Random | None = None
        if seed is not None:
            # imported here: a one-shot command makes a production id, and ``random`` (with
            # ``secrets``, below) is a few ms of its start-up
            import random

            self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._tokens: list[str] = []
        self._drawn_in = _forks[0]

    def new(self, kind: IdKind) -> str:
        if self._rng is None:
            return make_id(kind, self._token())
        return make_id(kind, f"{self._rng.getrandbits(64):016x}")

    def _token(self) -> str:
        with self._lock:
            if self._drawn_in != _forks[0]:
                self._tokens.clear()
                self._drawn_in = _forks[0]
            if not self._tokens:
                raw = os.urandom(_TOKEN_BYTES * _BATCH).hex()
                step = 2 * _TOKEN_BYTES
                self._tokens = [raw[i : i + step] for i in range(0, len(raw), step)]
            return self._tokens.pop()

    def secret(self) -> str:
        """A capability secret (always from the OS, even in a simulation)."""
        import secrets

        return secrets.token_hex(16)
