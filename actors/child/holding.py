"""When an agent may start a turn: the parent's ``hold`` / ``resume`` and the wait after a
refusal the agent reported (a model provider's rate limit or error), the same in every adapter.

Rules:
- ``control hold`` (a provider's cool-down): the agent starts no new turn until ``control
  resume``; what is delivered meanwhile is queued by the adapter, never dropped, and released
  in arrival order by ``resume``. A turn already running goes on (the parent can ``abort`` it).
- A refused turn (the adapter saw the provider refuse it, or a command agent reported it with
  ``shepherd-child rate-limited|provider-error``) is reported once, as the runtime event of its
  kind (``rate_limited``: ``provider``, ``retry_after_s`` when the provider said one, ``text``;
  ``provider_error``: ``provider``, ``text``); then the agent **waits**: it starts no new turn
  and does not retry by itself until ``resume``, which runs the refused turn again first
  (each adapter says how), then what was queued.
- ``cancel_task`` of the refused turn's task, and ``abort``, drop the refused turn (a cancelled
  task's turn is never run again) and end the wait; a ``hold`` still stands until ``resume``.
  ``close`` works as always.
- Only the owner's one thread uses this (an adapter's core thread, :mod:`actors.child.adapters`;
  the scripted driver's, also in the simulation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from protocol.records.refusals import Refusal
from protocol.wire.envelopes import ControlEnvelope

__all__ = ["Holding"]

T = TypeVar("T")


class Holding(Generic[T]):
    """One agent's hold (the parent's) and wait (its refused turn, ``T``: what the adapter
    needs to run it again)."""

    def __init__(self, runtime: Callable[..., Any]) -> None:
        #: publishes a runtime event of the agent: ``runtime(event, **fields)``
        self._runtime = runtime
        #: the parent's hold, with its reason, until resume
        self.held: str | None = None
        #: the refusal reported and the turn to run again on resume (with its task), if any
        self.refusal: Refusal | None = None
        self.refused_turn: T | None = None
        self.refused_task: str | None = None

    @property
    def blocked(self) -> bool:
        """No new turn may start: held, or waiting after a refusal."""
        return self.held is not None or self.refusal is not None

    def hold(self, envelope: ControlEnvelope) -> None:
        self.held = envelope.reason or "hold"
        self._runtime(
            "output", text=f"[shepherd] held by the parent: {self.held}; no new turn until resume"
        )

    def queued(self, what: str) -> None:
        """Say that ``what`` waits here (held, or waiting after a refusal) until resume."""
        self._runtime("output", text=f"[shepherd] {what} queued: no new turn until resume")

    def refused(self, refusal: Refusal, turn: T, task_id: str | None) -> None:
        """Report the refused turn and wait (the module rules)."""
        self.refusal, self.refused_turn, self.refused_task = refusal, turn, task_id
        self._runtime(
            refusal.kind,
            provider=refusal.provider,
            retry_after_s=refusal.retry_after_s,
            text=refusal.text or None,
            is_error=True,
        )
        self._runtime(
            "output", text=f"[shepherd] {_said(refusal)}; waiting for the parent's resume"
        )

    def resume(self) -> T | None:
        """``control resume``: nothing blocks any more; the refused turn to run again, if any."""
        turn = self.refused_turn
        if self.blocked:
            self._runtime("output", text="[shepherd] resumed by the parent")
        self.held, self.refusal, self.refused_turn, self.refused_task = None, None, None, None
        return turn

    def drop_refused(self, task_id: str | None = None) -> bool:
        """``abort`` (``task_id`` None) or ``cancel_task`` of the refused turn's task: the
        refused turn is not run again and the wait ends; whether there was one to drop."""
        if self.refusal is None or (task_id is not None and task_id != self.refused_task):
            return False
        self.refusal, self.refused_turn, self.refused_task = None, None, None
        self._runtime("output", text="[shepherd] the refused turn is dropped, not run again")
        return True


def _said(refusal: Refusal) -> str:
    what = "rate-limited" if refusal.kind == "rate_limited" else "failed"
    wait = refusal.retry_after_s
    after = f" (retry after {wait:g} s)" if wait is not None else ""
    return f"the model provider {refusal.provider} {what} this turn{after}"
