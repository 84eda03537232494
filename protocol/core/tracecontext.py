"""W3C Trace Context: the ``traceparent`` that joins a child's spans to its task's trace.

A traceparent travels in envelopes (the optional ``traceparent`` field) and in a child's
environment (``TRACEPARENT``). It is ``VERSION-TRACEID-PARENTID-FLAGS`` in lower-case hex:
``00-<32 hex>-<16 hex>-<2 hex>`` (https://www.w3.org/TR/trace-context/).

Rules:
- Parsing is strict and never raises: anything that is not a valid traceparent (wrong length,
  upper case, version ``ff``, an all-zero trace or span id, a version-00 value with extra
  fields, longer than :data:`~protocol.core.limits.MAX_TRACEPARENT_CHARS`) is ``None``, and the
  reader starts a new trace. A bad trace context never costs a delivery or a task.
- A later version is read as version 00 (its first four fields), as the standard asks.
- A task's trace id is a function of its session's id and its own
  (:func:`task_trace_id`: 128 bits of BLAKE2b, never zero), so every surface can name a task's
  trace without asking the tracer, and a task resumed after a parent restart stays in its trace.

Sans-IO: pure functions only.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, NamedTuple

from protocol.core.limits import MAX_TRACEPARENT_CHARS

__all__ = [
    "ENV_TRACEPARENT",
    "TRACEPARENT_ROOM",
    "TraceParent",
    "format_traceparent",
    "parse_traceparent",
    "task_trace_id",
]

#: the child's environment variable (the name the OpenTelemetry tools use for it)
ENV_TRACEPARENT: Final = "TRACEPARENT"

_FIELDS: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


class TraceParent(NamedTuple):
    trace_id: int
    span_id: int
    flags: int


def parse_traceparent(value: object) -> TraceParent | None:
    """The trace context in ``value``, or None if it is not a valid traceparent."""
    if not isinstance(value, str) or len(value) > MAX_TRACEPARENT_CHARS:
        return None
    match = _FIELDS.match(value)
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex = match.groups()
    rest = value[match.end() :]
    if version == "ff" or (version == "00" and rest) or (rest and not rest.startswith("-")):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, int(flags_hex, 16))


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The version-00 traceparent of a span context."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}"


#: as long as the traceparent the parent stamps on what it sends: the room a size check keeps
TRACEPARENT_ROOM: Final = format_traceparent(1, 1, 1)


def task_trace_id(session_id: str, task_id: str) -> str:
    """The trace id of task ``task_id`` of session ``session_id``: 32 lower-case hex digits."""
    digest = hashlib.blake2b(f"{session_id}/{task_id}".encode(), digest_size=16).hexdigest()
    return digest if digest.strip("0") else "0" * 31 + "1"
