"""``shepherd mcp``'s stdio, around the MCP SDK's own: bounded lines, a typed answer to every
frame that is not a message, and every request answered before the server ends.

Rules:

1. **A line is bounded** (:class:`StdinLines`): at most
   :data:`~protocol.core.limits.MAX_MCP_LINE_BYTES`; a longer one is read to its end without
   being kept, and answered as rule 2 says (``Invalid Request``, naming the bound).
2. **A frame that is not a JSON-RPC message is answered** (the SDK's reader only logs it): not
   JSON is ``-32700 Parse error``, anything else (an array, a string, an object that is no
   message) ``-32600 Invalid Request``, each with ``id: null`` and the reason, never the input.
   The server goes on serving.
3. **The end waits for the answers** (:class:`Drain`). The SDK's serving loop ends at the end
   of its input and cancels every request still being handled, so a client that writes its
   requests and then closes stdin (a script, a pipe) lost the answers of those not finished
   yet. The reading side notes each request's id, the writing side crosses it off when its
   answer (a result or an error) goes out, and the end of the input is passed on only once
   nothing is open, or after :data:`DRAIN_BOUND_S` (above the longest bounded tool call,
   ``shepherd_notifications`` waiting its 300 s; a request that would outlast it, such as an
   MCP task's ``tasks/result`` on a long task, is then cancelled as before, with a warning
   naming how many were left). A request the client cancels (``notifications/cancelled``) is
   not waited for.
"""

from __future__ import annotations

import contextvars
from types import TracebackType
from typing import IO, Any, Generic, Self, TypeVar, cast

import anyio
import pydantic
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from actors.runtime.log import logger
from protocol.core.limits import MAX_MCP_LINE_BYTES

__all__ = ["DRAIN_BOUND_S", "Drain", "StdinLines", "bad_frame"]

#: how long the end of the client's input waits for the answers still open
DRAIN_BOUND_S = 330.0

T = TypeVar("T")
_CANCELLED = "notifications/cancelled"
#: what :class:`StdinLines` gives in place of a line over its bound (rule 1)
_OVER = "shepherd_line_over_bytes"
#: a reason is cut to this many characters
_REASON_CHARS = 200


class StdinLines:
    """The lines of a binary input as text, each at most ``limit`` bytes (rule 1), for
    ``anyio.wrap_file`` and the SDK's ``stdio_server(stdin=...)``."""

    def __init__(self, raw: IO[bytes], limit: int = MAX_MCP_LINE_BYTES) -> None:
        self._raw = raw
        self._limit = limit

    def readline(self) -> str:
        line = self._raw.readline(self._limit + 1)
        if len(line) <= self._limit or line.endswith(b"\n"):
            return line.decode("utf-8", "replace")
        while (rest := self._raw.readline(1 << 20)) and not rest.endswith(b"\n"):
            pass  # the rest of the line, read and dropped
        return f'{{"{_OVER}": {self._limit}}}\n'

    def wrapped(self) -> anyio.AsyncFile[str]:
        return anyio.wrap_file(cast(IO[str], self))


def bad_frame(exc: Exception) -> SessionMessage:
    """The answer to a frame the SDK's reader could not take as a message (rule 2)."""
    code, reason = INVALID_REQUEST, "not a JSON-RPC 2.0 message"
    if isinstance(exc, pydantic.ValidationError):
        errors = exc.errors(include_url=False)
        given = errors[0].get("input") if errors else None
        if any(e.get("type") == "json_invalid" for e in errors):
            code, reason = PARSE_ERROR, str(errors[0].get("msg", "not JSON"))
        elif isinstance(given, dict) and set(given) == {_OVER}:
            reason = f"a line is at most {given[_OVER]} bytes"
        elif not isinstance(given, dict):
            reason = f"not a JSON-RPC 2.0 message: a JSON {type(given).__name__}, not an object"
    message = "Parse error" if code == PARSE_ERROR else "Invalid Request"
    error = ErrorData(code=code, message=f"{message}: {reason[:_REASON_CHARS]}")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=error))


class Drain:
    """The ids of the requests read and not answered yet, and a wait for none to be left."""

    def __init__(self, bound_s: float = DRAIN_BOUND_S) -> None:
        self.bound_s = bound_s
        self._open: set[Any] = set()
        self._none_open = anyio.Event()
        self._none_open.set()

    def reading(
        self,
        stream: ReadStream[SessionMessage | Exception],
        answers: WriteStream[SessionMessage],
    ) -> ReadStream[SessionMessage | Exception]:
        """``stream``, its end held back (rule 3), a bad frame answered on ``answers``."""
        return _Reading(stream, self, answers)

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


class _Wrapped:
    """A stream around ``_inner``: closing it closes the inner one, also as a context."""

    _inner: ReadStream[Any] | WriteStream[Any]

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class _Reading(_Wrapped, Generic[T]):
    """A read stream whose end waits for :meth:`Drain.settled`."""

    _inner: ReadStream[T]

    def __init__(
        self, inner: ReadStream[T], drain: Drain, answers: WriteStream[SessionMessage]
    ) -> None:
        self._inner = inner
        self._drain = drain
        self._answers = answers

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
        if isinstance(item, Exception):
            await self._answers.send(bad_frame(item))
        else:
            self._drain.read(item)  # type: ignore[arg-type]
        return item

    def __aiter__(self) -> _Reading[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _Writing(_Wrapped):
    """A write stream that crosses off each answer it sends."""

    _inner: WriteStream[SessionMessage]

    def __init__(self, inner: WriteStream[SessionMessage], drain: Drain) -> None:
        self._inner = inner
        self._drain = drain

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(item)
        message = item.message
        if isinstance(message, (JSONRPCResponse, JSONRPCError)):
            self._drain.answered(message.id)
