"""The agent's output as the ACP SDK reads it, one line at most :data:`LINE_LIMIT` bytes.

The SDK's reader gathers a line longer than its buffer in pieces, without a bound, so an agent
that writes without end would grow the bridge's memory without end. :class:`BoundedLines`
stands between them: the SDK's reads go through it, and a line over the bound raises
:class:`LineTooLong`, which ends the connection (the SDK's receive loop fails and rejects every
call in flight) and sets :attr:`BoundedLines.stopped`; the adapter then fails the agent saying
why, and the parent is told as for any agent that ends. The end of the agent's output sets it
too: an agent that closes its output and lives on is failed the same way (one that exits is
reported with its exit status). A line within the bound that is not
a message is dropped by the SDK (and logged), and the session goes on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.core.limits import MAX_ACP_LINE_BYTES

__all__ = ["BUFFER_LIMIT", "LINE_LIMIT", "OUTPUT_ENDED", "BoundedLines", "LineTooLong"]

#: the longest line read from an ACP agent, in bytes
LINE_LIMIT = MAX_ACP_LINE_BYTES
#: the reader's buffer: a longer line is handed over in pieces of about this size
BUFFER_LIMIT = 1024 * 1024
#: why the reading stopped when the agent closed its output
OUTPUT_ENDED = "it closed its output"


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
        #: why the reading stopped (a line over the bound, the end of the agent's output), once
        #: it has; ``stopped`` is set then
        self.broken: str | None = None
        self.stopped = asyncio.Event()

    @property
    def output_ended(self) -> bool:
        return self.broken == OUTPUT_ENDED

    async def readuntil(self, separator: Any = b"\n") -> bytes:
        try:  # LimitOverrunError: the SDK reads a piece, then asks again
            line = await self._reader.readuntil(separator)
        except asyncio.IncompleteReadError:
            self._stop(OUTPUT_ENDED)
            raise
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
            raise LineTooLong(self._stop(f"it wrote a line over {self._limit} bytes"))

    def _stop(self, why: str) -> str:
        if self.broken is None:
            self.broken = why
        self.stopped.set()
        return why
