"""Whatever lands in new/, the receiver delivers it or quarantines it, and keeps going."""

from __future__ import annotations

import secrets
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.ids import IdKind, kind_of, make_id
from protocol.records.settings import Settings
from protocol.wire.envelopes import encode_envelope

from .conftest import Collector, Rejections, file_name, listing, message, plant


def test_any_bytes_in_new_are_delivered_or_quarantined(tmp_path: Path) -> None:
    session_id = make_id(IdKind.SESSION, secrets.token_hex(8))
    collector, rejections = Collector(), Rejections()
    mailbox = Mailbox.create(
        tmp_path / "session",
        session_id,
        Settings(fallback_poll_s=30.0, max_envelope_bytes=2048),
        on_reject=rejections,
    )
    planted = 0
    try:
        mailbox.ensure_inbox(PARENT_INBOX)
        mailbox.subscribe(PARENT_INBOX, collector)

        def valid() -> bytes:
            return encode_envelope(message(session_id, content=secrets.token_hex(4)))

        mangled = st.builds(
            lambda cut, flip, at: _mangle(valid(), cut, flip, at),
            st.integers(0, 400),
            st.binary(min_size=1, max_size=3),
            st.integers(0, 400),
        )
        inputs = st.one_of(st.binary(max_size=3000), mangled, st.builds(valid))

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(data=inputs)
        def check(data: bytes) -> None:
            nonlocal planted
            name = file_name(_named_id(data), stamp=planted + 1)
            plant(mailbox, PARENT_INBOX, name, data)
            planted += 1
            assert mailbox.wait_drained(10)
            assert listing(mailbox.inbox_path(PARENT_INBOX) / "new") == []

        check()
        stats = mailbox.stats()
        assert stats.delivered + stats.quarantined + stats.duplicates == planted
        assert len(rejections.items) == stats.quarantined
        assert stats.delivered == len(collector.items) > 0
        assert stats.quarantined > 0
    finally:
        mailbox.close()


def _named_id(data: bytes) -> str:
    """Name the file for the message id inside, when there is one (as a publisher would)."""
    try:
        decoded = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    found = decoded.get("message_id") if isinstance(decoded, dict) else None
    if isinstance(found, str) and kind_of(found) is IdKind.MESSAGE:
        return found
    return make_id(IdKind.MESSAGE, secrets.token_hex(8))


def _mangle(data: bytes, cut: int, flip: bytes, at: int) -> bytes:
    at = min(at, len(data))
    return (data[:at] + flip + data[at + len(flip) :])[: max(cut, 1)]
