"""The parent claim's lease (:mod:`actors.transports.nats.claim`) against a real ``nats-server``: a
claim is taken over only when the servers say nobody listens for its writer *and* it goes a lease
without renewal; a holder that was taken over is told; a released claim is taken at once; the
servers' own trouble at the start is waited out. Nothing sleeps: each step waits on the claim's
own answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.transports.nats import claim as claim_module
from actors.transports.nats.claim import ParentClaim, waited_out
from protocol.core.errors import SessionBusy, SessionUnavailable

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]


def _claim(url: str, session_id: str, name: str, **options: Any) -> ParentClaim:
    return ParentClaim(
        url.split(","),
        session_id,
        f"/sessions/{name}",
        request_timeout_s=2.0,
        outage_s=10.0,
        **options,
    )


def _stop_answering(holder: ParentClaim) -> None:
    """The servers say nobody listens for ``holder`` (as a cluster may, for a moment)."""
    assert holder._answering is not None
    holder._loop.run(holder._answering.unsubscribe(), 10)


def _stop_renewing(holder: ParentClaim) -> None:
    async def stop() -> None:
        assert holder._renewing is not None
        holder._renewing.cancel()
        await asyncio.gather(holder._renewing, return_exceptions=True)

    holder._loop.run(stop(), 10)


def test_a_holder_said_absent_that_still_renews_is_live(nats_url: str, session_id: str) -> None:
    first = _claim(nats_url, session_id, "first")
    try:
        _stop_answering(first)
        with pytest.raises(SessionBusy) as refused:
            _claim(nats_url, session_id, "second")
        assert "/sessions/first" in refused.value.message
    finally:
        first.close()


def test_a_holder_that_renews_between_the_lease_running_out_and_the_claim_is_live(
    nats_url: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The servers say nobody listens for the holder and its lease looks run out, but it
    renews before the new claim is appended (a loaded holder, renewing late): the append
    follows the wrong sequence, and the claim is refused naming the holder, not tried again
    until it gives up ("kept claiming it at the same time")."""
    first = _claim(nats_url, session_id, "first")
    try:
        _stop_answering(first)

        async def ran_out_then_renewed(_self: ParentClaim, _seq: int, _held: object) -> None:
            assert first._loop.run(first._renew_once(), 10)  # on the holder's own loop

        monkeypatch.setattr(ParentClaim, "_watch_lease", ran_out_then_renewed)
        with pytest.raises(SessionBusy) as refused:
            _claim(nats_url, session_id, "second")
        assert "/sessions/first" in refused.value.message
    finally:
        first.close()


def test_a_holder_neither_answering_nor_renewing_is_taken_over_and_told(
    nats_url: str, session_id: str
) -> None:
    told: list[str] = []
    first = _claim(nats_url, session_id, "first", lost=told.append)
    second: ParentClaim | None = None
    try:
        _stop_answering(first)
        _stop_renewing(first)
        second = _claim(nats_url, session_id, "second")  # after the lease ran out
        assert told == []
        assert not first._loop.run(first._renew_once(), 10)  # its next renewal finds out
        (why,) = told
        assert "taken over" in why and "/sessions/second" in why
        # the new holder renews undisturbed, and a third is refused naming it
        assert second._loop.run(second._renew_once(), 10)
        with pytest.raises(SessionBusy) as refused:
            _claim(nats_url, session_id, "third")
        assert "/sessions/second" in refused.value.message
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_released_claim_is_taken_at_once(
    nats_url: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _claim(nats_url, session_id, "first").close()

    async def never(*_: Any) -> None:
        raise AssertionError("a released claim's lease was watched")

    monkeypatch.setattr(ParentClaim, "_watch_lease", never)
    _claim(nats_url, session_id, "second").close()


def test_the_claims_stream_keeps_only_the_newest_claim(nats_url: str, session_id: str) -> None:
    holder = _claim(nats_url, session_id, "holder")
    try:
        for _ in range(5):
            assert holder._loop.run(holder._renew_once(), 10)

        async def count() -> int:
            info = await holder._require_js().stream_info(holder._stream)
            return int(info.state.messages)

        assert holder._loop.run(count(), 10) == 1
    finally:
        holder.close()


def test_a_claims_stream_not_found_while_it_is_made_is_asked_again(
    nats_url: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster, a stream being made may be "not found" to the next answer (the servers
    have not all heard of it yet): the claim's stream is asked for again, as the records'
    streams are, not taken as the servers refusing the claim."""
    from nats.js.client import JetStreamContext
    from nats.js.errors import NotFoundError

    made = JetStreamContext.add_stream
    answers: list[str] = []

    async def not_found_once(self: JetStreamContext, config: Any = None, **params: Any) -> Any:
        if config is not None and config.name.endswith("_parent") and not answers:
            answers.append("not found")
            raise NotFoundError(code=404, err_code=10059, description="stream not found")
        answers.append("made")
        return await made(self, config, **params)

    monkeypatch.setattr(JetStreamContext, "add_stream", not_found_once)
    holder = _claim(nats_url, session_id, "holder")
    try:
        assert answers == ["not found", "made"]
        assert holder._seq > 0
    finally:
        holder.close()


def test_the_servers_trouble_is_waited_out_and_a_refusal_is_not() -> None:
    from nats.js.errors import APIError, NoStreamResponseError

    failures = [NoStreamResponseError(), TimeoutError()]

    async def flaky() -> str:
        if failures:
            raise failures.pop(0)
        return "claimed"

    assert asyncio.run(waited_out(flaky, 30.0, "session s")) == "claimed"

    async def refused() -> str:
        raise APIError(code=400, err_code=10058, description="bad request")

    with pytest.raises(SessionUnavailable, match="refused the claim on session s"):
        asyncio.run(waited_out(refused, 30.0, "session s"))

    async def down() -> str:
        raise NoStreamResponseError()

    with pytest.raises(SessionUnavailable, match=r"waited 0\.2 s"):
        asyncio.run(waited_out(down, 0.2, "session s"))


def test_the_lease_is_longer_than_several_renewals() -> None:
    assert claim_module.LEASE_S >= 4 * claim_module.RENEW_EVERY_S
