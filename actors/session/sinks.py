"""Where parent notifications go. Observers never break the observed.

A sink is any callable taking a notification. :class:`GuardedSink` wraps one so that a sink
that raises is logged and counted, never propagated into settlement or delivery.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import TextIO

import msgspec

from actors.runtime.log import logger
from protocol.calls.render import render_notification
from protocol.records.notifications import AnyNotification

__all__ = ["CollectingSink", "FanOut", "GuardedSink", "Sink", "StreamSink"]

Sink = Callable[[AnyNotification], None]


class GuardedSink:
    def __init__(self, sink: Sink | None) -> None:
        self._sink = sink
        self.failures = 0
        self.delivered = 0

    def __call__(self, note: AnyNotification) -> bool:
        if self._sink is None:
            return True
        try:
            self._sink(note)
        except Exception:
            self.failures += 1
            logger.opt(exception=True).error(
                "notification sink failed ({kind})", kind=type(note).__name__
            )
            return False
        self.delivered += 1
        return True


class CollectingSink:
    """Keeps every notification (tests, embedding). Thread-safe; can wait for a count."""

    def __init__(self) -> None:
        self.items: list[AnyNotification] = []
        self._cond = threading.Condition()

    def __call__(self, note: AnyNotification) -> None:
        with self._cond:
            self.items.append(note)
            self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[list[AnyNotification]], bool], timeout: float | None
    ) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.items), timeout=timeout)


class StreamSink:
    """Human text (:func:`~protocol.calls.render.render_notification`) or one JSON object per
    line."""

    def __init__(self, stream: TextIO | None = None, *, json: bool = False) -> None:
        self._stream = stream or sys.stdout
        self._json = json
        self._lock = threading.Lock()

    def __call__(self, note: AnyNotification) -> None:
        text = (
            msgspec.json.encode(note).decode() if self._json else render_notification(note) + "\n"
        )
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()


class FanOut:
    """The record of delivery first (the notifications file, or its stream on NATS), then every
    other sink. A notification that could not be recorded is shown nowhere: a restart hands
    over what is not on record, so showing it too would deliver it twice."""

    def __init__(self, record: Sink, sinks: Iterable[Sink]) -> None:
        self._record = record
        self._sinks = list(sinks)

    def __call__(self, note: AnyNotification) -> None:
        self._record(note)
        errors: list[Exception] = []
        for sink in self._sinks:
            try:
                sink(note)
            except Exception as exc:  # one broken sink must not starve the others
                errors.append(exc)
        if errors:
            raise errors[0]
