"""Every request read is answered before ``shepherd mcp`` ends, when its client closes stdin.

The MCP SDK's serving loop ends at the end of its input and cancels every request still being
handled, so a client that writes its requests and then closes stdin (a script, a pipe) lost the
answers of those not finished yet. :class:`Drain` wraps the two streams of the serving loop:
the reading side notes each request's id, the writing side crosses it off when its answer
(a result or an error) goes out, and the end of the input is passed on only once nothing is
open, or after :data:`DRAIN_BOUND_S` (above the longest bounded tool call,
``shepherd_notifications`` waiting its 300 s; a request that would outlast it, such as an MCP
task's ``tasks/result`` on a long task, is then cancelled as before, with a warning naming how
many were left). A request the client cancels (``notifications/cancelled``) is not waited for.
"""

from __future__ import annotations

import contextvars
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from actors.runtime.log import logger

__all__ = ["DRAIN_BOUND_S", "Drain"]

#: how long the end of the client's input waits for the answers still open
DRAIN_BOUND_S = 330.0

T = TypeVar("T")
_CANCELLED = "notifications/cancelled"


class Drain:
    """The ids of the requests read and not answered yet, and a wait for none to be left."""

    def __init__(self, bound_s: float = DRAIN_BOUND_S) -> None:
        self.bound_s = bound_s
        self._open: set[Any] = set()
        self._none_open = anyio.Event()
        self._none_open.set()

    def reading(
        self, stream: ReadStream[SessionMessage | Exception]
    ) -> ReadStream[SessionMessage | Exception]:
        return _Reading(stream, self)

    def writing(self, stream: WriteStream[SessionMessage]) -> WriteStream[SessionMessage]:
        return _Writing(stream, self)

    def read(self, item: SessionMessage | Exception) -> None:
        if not isinstance(item, SessionMessage):
            return
        message = item.message
        if isinstance(message, JSONRPCRequest):
            if not self._open:
                self._none_open = anyio.Event()
            self._open.add(message.id)
        elif isinstance(message, JSONRPCNotification) and message.method == _CANCELLED:
            self.answered((message.params or {}).get("requestId"))

    def answered(self, ident: Any) -> None:
        self._open.discard(ident)
        if not self._open:
            self._none_open.set()

    async def settled(self) -> None:
        """Return once every request read has been answered, or after :attr:`bound_s`."""
        with anyio.move_on_after(self.bound_s):
            await self._none_open.wait()
        if self._open:
            logger.warning(
                "stdin closed; {n} request(s) still unanswered after {s:.0f} s are cancelled",
                n=len(self._open),
                s=self.bound_s,
            )


class _Reading(Generic[T]):
    """A read stream whose end waits for :meth:`Drain.settled`."""

    def __init__(self, inner: ReadStream[T], drain: Drain) -> None:
        self._inner = inner
        self._drain = drain

    @property
    def last_context(self) -> contextvars.Context | None:
        context: contextvars.Context | None = getattr(self._inner, "last_context", None)
        return context

    async def receive(self) -> T:
        try:
            item = await self._inner.receive()
        except anyio.EndOfStream:
            await self._drain.settled()
            raise
        self._drain.read(item)  # type: ignore[arg-type]
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Reading[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Reading[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class _Writing:
    """A write stream that crosses off each answer it sends."""

    def __init__(self, inner: WriteStream[SessionMessage], drain: Drain) -> None:
        self._inner = inner
        self._drain = drain

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(item)
        message = item.message
        if isinstance(message, (JSONRPCResponse, JSONRPCError)):
            self._drain.answered(message.id)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Writing:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None
