"""The agent's output as the ACP SDK reads it, one line at most :data:`LINE_LIMIT` bytes.

The SDK's reader gathers a line longer than its buffer in pieces, without a bound, so an agent
that writes without end would grow the bridge's memory without end. :class:`BoundedLines`
stands between them: the SDK's reads go through it, and a line over the bound raises
:class:`LineTooLong`, which ends the connection (the SDK's receive loop fails and rejects every
call in flight) and sets :attr:`BoundedLines.stopped`; the adapter then fails the agent saying
why, and the parent is told as for any agent that ends. A line within the bound that is not
a message is dropped by the SDK (and logged), and the session goes on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.core.limits import MAX_ACP_LINE_BYTES

__all__ = ["BUFFER_LIMIT", "LINE_LIMIT", "BoundedLines", "LineTooLong"]

#: the longest line read from an ACP agent, in bytes
LINE_LIMIT = MAX_ACP_LINE_BYTES
#: the reader's buffer: a longer line is handed over in pieces of about this size
BUFFER_LIMIT = 1024 * 1024


class LineTooLong(ConnectionError):
    """The agent wrote a line over :data:`LINE_LIMIT` bytes."""


class BoundedLines(asyncio.StreamReader):
    """``reader``'s reads, counting the bytes of the line being read. A ``StreamReader`` in
    type (the SDK's connection asks for one) whose every read is ``reader``'s: its own buffer
    is never fed."""

    def __init__(self, reader: asyncio.StreamReader, limit: int = LINE_LIMIT) -> None:
        super().__init__()
        self._reader = reader
        self._limit = limit
        self._in_line = 0  # bytes of the current line handed over in pieces
        #: why the reading stopped (a line over the bound), once it has; ``stopped`` is set then
        self.broken: str | None = None
        self.stopped = asyncio.Event()

    async def readuntil(self, separator: Any = b"\n") -> bytes:
        line = await self._reader.readuntil(separator)  # LimitOverrunError: the SDK reads a piece
        self._count(len(line))
        self._in_line = 0
        return line

    async def readexactly(self, n: int) -> bytes:
        piece = await self._reader.readexactly(n)
        self._count(len(piece))
        return piece

    async def readline(self) -> bytes:
        return await self.readuntil(b"\n")

    async def read(self, n: int = -1) -> bytes:
        raise NotImplementedError("an ACP agent's output is read by lines")

    def at_eof(self) -> bool:
        return self._reader.at_eof()

    def exception(self) -> Exception | None:
        return self._reader.exception()

    def _count(self, n: int) -> None:
        self._in_line += n
        if self._in_line > self._limit + 1:  # the bound, and its newline
            self.broken = f"it wrote a line over {self._limit} bytes"
            self.stopped.set()
            raise LineTooLong(self.broken)
