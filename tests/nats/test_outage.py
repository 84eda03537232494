"""Waiting out an outage of the NATS servers: what the failure says when the wait is over."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from actors.transports.nats.outage import Outage, waiting_out
from actors.transports.nats.server import NatsServer


def test_a_wait_given_up_names_how_long_it_waited_not_one_attempts_bound() -> None:
    """Each attempt fails after its own bound (here said to be 5 s); the failure at the end of
    the wait names the wait itself, its attempts and its ceiling, and then the last cause."""
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise Outage("no answer from the NATS servers within 5 s")

    with pytest.raises(Outage) as failed:
        waiting_out(attempt, 0.4, lambda: False)
    message = failed.value.message
    match = re.search(r"out of reach for ([0-9.]+) s \((\d+) attempts, up to 0.4 s\)", message)
    assert match, message
    assert float(match[1]) <= 0.4 and int(match[2]) == len(calls) >= 2
    assert message.endswith("the last: no answer from the NATS servers within 5 s")
    assert failed.value.code == "session_unavailable"


def test_a_wait_given_up_by_its_owner_says_so_the_same_way() -> None:
    def attempt() -> None:
        raise Outage("NATS: NoRespondersError()")

    with pytest.raises(Outage, match=r"\(1 attempt, up to 60 s\); the last: NATS: NoResp"):
        waiting_out(attempt, 60.0, lambda: True)


def test_an_attempt_that_succeeds_after_an_outage_returns_its_value() -> None:
    results: Iterator[Outage | int] = iter([Outage("no leader"), Outage("no leader"), 42])

    def attempt() -> int:
        result = next(results)
        if isinstance(result, Outage):
            raise result
        return result

    assert waiting_out(attempt, 30.0, lambda: False) == 42


def test_a_read_waits_out_a_leader_election_and_a_refusal_goes_out_at_once() -> None:
    """What a session's records reader does when a cluster has no stream leader yet (the
    servers answer 503, a consumer cannot be made): it reads again, within a bound."""
    import asyncio

    import pytest
    from nats.js.errors import NotFoundError, ServiceUnavailableError

    from actors.transports.nats.outage import Outage, through_outage

    troubles: list[Exception] = [ServiceUnavailableError(), Outage("stopped answering")]

    async def read() -> str:
        if troubles:
            raise troubles.pop(0)
        return "records"

    assert asyncio.run(through_outage(read, 30.0, "read s_journal")) == "records"

    async def missing() -> str:
        raise NotFoundError(code=404, description="stream not found")

    with pytest.raises(NotFoundError):
        asyncio.run(through_outage(missing, 30.0, "read s_journal"))

    async def down() -> str:
        raise ServiceUnavailableError()

    with pytest.raises(Outage, match="read s_journal"):
        asyncio.run(through_outage(down, 0.2, "read s_journal"))


def test_making_an_inbox_waits_out_a_consumer_that_does_not_answer_in_time(
    nats_server: NatsServer, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream just made in a cluster has no leader for a moment: the first attempt at its
    consumer gets no answer in time. The parent waits that out (within ``outage_s``), as a
    publish does, and the inbox is made."""
    from actors.runtime.transport import PARENT_INBOX
    from actors.transports.nats import setup
    from actors.transports.nats.transport import NatsTransport

    real = setup.add_consumer
    attempts: list[int] = []

    async def slow_first(*args: Any, **kwargs: Any) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise TimeoutError  # as nats-py's request does when no leader answers
        await real(*args, **kwargs)

    monkeypatch.setattr(setup, "add_consumer", slow_first)
    transport = NatsTransport(
        [nats_server.url], session_id, request_timeout_s=1.0, create=True, outage_s=30.0
    )
    try:
        transport.ensure_inbox(PARENT_INBOX)
        assert transport.has_inbox(PARENT_INBOX)
        assert len(attempts) == 2
    finally:
        transport.close()
    monkeypatch.setattr(setup, "add_consumer", slow_first)
    attempts.clear()
    once = NatsTransport([nats_server.url], session_id, request_timeout_s=1.0, create=True)
    try:  # without a wait allowed (``outage_s`` 0), the first failure is the answer
        with pytest.raises(Outage):
            once.ensure_inbox("shepherd-agent-00000000000000aa")
        assert len(attempts) == 1
    finally:
        once.close()
