"""One asyncio event loop on a daemon thread, for a synchronous caller.

Why: ``nats-py`` is asyncio, and Shepherd's actors and transports are threads that call
``publish`` synchronously. A transport runs its connection on this loop and the caller waits on
a :class:`concurrent.futures.Future` with a timeout, so an actor never blocks forever on a
server that went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["LoopThread", "PullLoop"]

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "shepherd-nats") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop and wait for it; a timeout cancels it and raises."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def answer(self, coro: Coroutine[Any, Any, T], limit: float, what: str) -> T:
        """:meth:`run`, with a time-out said as ``session_unavailable`` naming ``what``."""
        from protocol.core.errors import SessionUnavailable

        try:
            return self.run(coro, limit)
        except TimeoutError:
            raise SessionUnavailable(
                f"the NATS servers did not answer within {limit:g} s ({what})"
            ) from None

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel what still runs on the loop, let it finish, then stop the thread."""
        if not self._thread.is_alive():
            return
        if not self.in_loop():
            with contextlib.suppress(Exception):
                self.run(_cancel_others(), timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop():
            self._thread.join(timeout)


async def _cancel_others() -> None:
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


class PullLoop:
    """One inbox's subscription: a task on the loop pulling from the inbox's consumer;
    ``cancel`` hands it to its transport's ``unsubscribe``."""

    def __init__(
        self, unsubscribe: Callable[[PullLoop], None], inbox: str, handler: Callable[..., Any]
    ) -> None:
        self._unsubscribe = unsubscribe
        self.inbox = inbox
        self.handler = handler
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        self._unsubscribe(self)
