"""Making the session's streams on a cluster that has not all heard of a stream yet: a stream
"in use" to one answer and "not found" to the next is asked for again, within the bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js.errors import BadRequestError, NotFoundError

from actors.transports.nats.setup import make_streams


class _Servers:
    """A JetStream context whose first answers are the cluster's mid-creation ones."""

    def __init__(self, racing: int) -> None:
        self.racing = racing  # how many add/update pairs race a stream being made
        self.calls: list[str] = []

    async def add_stream(self, config: Any) -> None:
        self.calls.append("add")
        if self.racing > 0:
            raise BadRequestError(code=400, err_code=10058, description="stream name in use")

    async def update_stream(self, config: Any) -> None:
        self.calls.append("update")
        self.racing -= 1
        raise NotFoundError(code=404, err_code=10059, description="stream not found")


def test_a_stream_in_use_then_not_found_is_asked_for_again_until_made() -> None:
    servers = _Servers(racing=2)
    asyncio.run(make_streams(servers, [object()], ceiling_s=30.0))  # type: ignore[arg-type]
    assert servers.calls == ["add", "update", "add", "update", "add"]


def test_past_the_bound_the_not_found_is_raised() -> None:
    servers = _Servers(racing=10**9)
    with pytest.raises(NotFoundError):
        asyncio.run(make_streams(servers, [object()], ceiling_s=0.0))  # type: ignore[arg-type]
    assert servers.calls == ["add", "update"]
