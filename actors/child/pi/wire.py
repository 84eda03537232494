"""Pi's RPC framing: what one line on Pi's stdin and stdout is (measured with Pi 0.73.1).

Rules:
- stdin takes one JSON object per line (:func:`encode_line`).
- stdout carries JSON lines split on ``\\n`` only, never on U+2028/U+2029, which are legal
  inside JSON strings (:func:`read_lines`; a trailing ``\\r`` is dropped, an empty line
  skipped).
- A line that is not JSON, or JSON that is not an object, is refused with :class:`BadLine`
  (the reader logs it and goes on); it never ends the stream.
- A line whose ``type`` is ``response`` answers a command (:func:`is_response`); every other
  line is an event.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import IO, Any

import msgspec

__all__ = ["BadLine", "decode_line", "encode_line", "is_response", "read_lines"]

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


class BadLine(Exception):
    """A stdout line that is not a JSON object; ``str()`` says what it is instead."""


def encode_line(obj: Mapping[str, Any]) -> bytes:
    """One command as the line Pi's stdin takes."""
    return _encode.encode(obj) + b"\n"


def read_lines(stdout: IO[bytes]) -> Iterator[bytes]:
    """Pi's stdout, line by line, until end of file (an error reading it propagates)."""
    # A binary stream's readline splits on b"\n" only, as Pi's framing requires.
    for raw in iter(stdout.readline, b""):
        line = raw.rstrip(b"\n").removesuffix(b"\r")
        if line:
            yield line


def decode_line(line: bytes) -> dict[str, Any]:
    """One stdout line as the JSON object it carries; :class:`BadLine` if it carries none."""
    try:
        msg = _decode.decode(line)
    except msgspec.DecodeError as exc:
        raise BadLine("a line that is not JSON") from exc
    if not isinstance(msg, dict):
        raise BadLine("JSON that is not an object")
    return msg


def is_response(msg: Mapping[str, Any]) -> bool:
    """Whether a decoded line answers a command (else it is an event)."""
    return msg.get("type") == "response"
