"""The ACP agent's lines, bounded (:mod:`actors.child.acp_lines`): a line longer than the
reader's buffer is still read whole while within the bound, and one over it raises."""

from __future__ import annotations

import asyncio

import pytest

from actors.child.acp_lines import BoundedLines, LineTooLong


async def _read(data: bytes, limit: int, buffer: int) -> list[bytes]:
    reader = asyncio.StreamReader(limit=buffer)
    reader.feed_data(data)
    reader.feed_eof()
    lines = BoundedLines(reader, limit=limit)
    read: list[bytes] = []
    while True:  # as the SDK reads: pieces while the buffer overflows, then the line's end
        pieces: list[bytes] = []
        try:
            while True:
                try:
                    pieces.append(await lines.readuntil(b"\n"))
                    break
                except asyncio.LimitOverrunError as exc:
                    pieces.append(await lines.readexactly(exc.consumed))
        except asyncio.IncompleteReadError:
            return read
        read.append(b"".join(pieces))


def test_lines_longer_than_the_buffer_are_read_whole_up_to_the_bound() -> None:
    data = b"a\n" + b"b" * 100 + b"\n" + b"c" * 10 + b"\n"
    assert asyncio.run(_read(data, limit=100, buffer=16)) == [
        b"a\n",
        b"b" * 100 + b"\n",
        b"c" * 10 + b"\n",
    ]


def test_a_line_over_the_bound_raises_and_says_why() -> None:
    lines_seen = b"ok\n" + b"x" * 101 + b"\n"
    with pytest.raises(LineTooLong, match="a line over 100 bytes"):
        asyncio.run(_read(lines_seen, limit=100, buffer=16))
