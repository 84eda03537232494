"""What the board's requests carry, checked before anything is asked of the session: an
action's JSON body, and the numbers and names of a query.

Rules: a body is at most :data:`MAX_WEB_REQUEST_BYTES` (one declared larger is refused
unread, ``limit_exceeded``), ``application/json``, a JSON object nested at most
``MAX_NESTING`` deep; a query's number is a whole number of at most 9 digits; anything else
is ``invalid_argument`` naming what is wrong. Nothing here talks to the session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from starlette.requests import Request

from protocol.core.errors import InvalidArgument, LimitExceeded
from protocol.core.limits import MAX_NESTING
from protocol.wire.envelopes import nested_deeper

__all__ = ["MAX_WEB_REQUEST_BYTES", "json_body", "number", "only_known"]

#: a request body's bound
MAX_WEB_REQUEST_BYTES = 256 * 1024


async def json_body(request: Request) -> dict[str, Any]:
    """The JSON object of an action's body, within its bounds."""
    declared = request.headers.get("content-length")
    too_big = LimitExceeded(f"a request body is at most {MAX_WEB_REQUEST_BYTES} bytes")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_WEB_REQUEST_BYTES):
        raise too_big
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise InvalidArgument("an action's body must be application/json")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_WEB_REQUEST_BYTES:
            raise too_big
        chunks.append(chunk)
    try:
        fields = msgspec.json.decode(b"".join(chunks))
    except RecursionError:
        raise InvalidArgument(f"the body nests more than {MAX_NESTING} levels deep") from None
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"the body is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise InvalidArgument("the body must be a JSON object of the operation's arguments")
    if nested_deeper(fields, MAX_NESTING):
        raise InvalidArgument(f"the body nests more than {MAX_NESTING} levels deep")
    return fields


def number(query: Mapping[str, str], key: str, default: int = 0, *, most: int | None = None) -> int:
    """A whole number of the query (at most 9 digits, at most ``most``), or ``default``."""
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > 9:
        raise InvalidArgument(f"{key} must be a whole number, got {raw[:40]!r}")
    value = int(raw)
    if most is not None and value > most:
        raise InvalidArgument(f"{key} is at most {most}, got {value}")
    return value


def only_known(query: Mapping[str, str], known: Iterable[str]) -> None:
    """Refuse a query naming a parameter the route does not take."""
    allowed = set(known)
    for key in query:
        if key not in allowed:
            raise InvalidArgument(
                f"unknown parameter {key[:40]!r}; this takes {', '.join(sorted(allowed))}"
            )
