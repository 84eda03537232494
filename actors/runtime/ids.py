"""Where ids come from: random in production, seeded in the simulation."""

from __future__ import annotations

import random
import secrets

from protocol.ids import IdKind, make_id

__all__ = ["IdSource"]


class IdSource:
    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed) if seed is not None else None

    def new(self, kind: IdKind) -> str:
        if self._rng is None:
            return make_id(kind, secrets.token_hex(8))
        return make_id(kind, f"{self._rng.getrandbits(64):016x}")

    def secret(self) -> str:
        """A capability secret (always from the OS, even in a simulation)."""
        return secrets.token_hex(16)
