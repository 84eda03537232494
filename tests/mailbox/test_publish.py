"""Publishing: atomic, bounded, and never into an inbox that does not exist."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import (
    DiskFull,
    InvalidEnvelope,
    InvalidHandle,
    LimitExceeded,
    SessionUnavailable,
)
from protocol.core.ids import IdKind
from protocol.records.settings import Settings

from .conftest import AGENT, Collector, MailboxFactory, listing, message, new_id


def test_publish_to_a_missing_inbox_is_invalid_handle(parent: Mailbox, session_id: str) -> None:
    stranger = new_id(IdKind.AGENT)
    with pytest.raises(InvalidHandle, match=stranger):
        parent.publish(stranger, message(session_id, target_id=stranger))
    assert not parent.has_inbox(stranger)
    assert not parent.inbox_path(stranger).exists()  # never created implicitly


def test_subscribe_to_a_missing_inbox_is_invalid_handle(parent: Mailbox) -> None:
    stranger = new_id(IdKind.AGENT)
    with pytest.raises(InvalidHandle, match=stranger):
        parent.subscribe(stranger, lambda envelope: None)


def test_a_publish_leaves_nothing_in_tmp(parent: Mailbox, session_id: str) -> None:
    envelope = message(session_id)
    parent.publish(PARENT_INBOX, envelope)
    box = parent.inbox_path(PARENT_INBOX)
    assert listing(box / "tmp") == []
    (name,) = listing(box / "new")
    assert name.endswith(f".{os.getpid()}.{name.split('.')[2]}.{envelope.message_id}.json")
    assert parent.stats().published == 1


def test_a_failed_publish_leaves_no_partial_file(
    parent: Mailbox, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_rename(src: object, dst: object) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "rename", broken_rename)
    with pytest.raises(SessionUnavailable, match="simulated"):
        parent.publish(PARENT_INBOX, message(session_id))
    monkeypatch.undo()
    box = parent.inbox_path(PARENT_INBOX)
    assert listing(box / "tmp") == []
    assert listing(box / "new") == []
    assert parent.stats().published == 0


def test_a_full_disk_is_limit_exceeded_that_may_pass(
    parent: Mailbox, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(LimitExceeded, match="no space") as refused:
        parent.publish(PARENT_INBOX, message(session_id))
    assert isinstance(refused.value, DiskFull)  # a sender that must not lose it tries again
    monkeypatch.undo()
    assert listing(parent.inbox_path(PARENT_INBOX) / "tmp") == []


def test_an_oversized_envelope_is_refused_naming_its_size(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox(settings=Settings(max_envelope_bytes=1024))
    mailbox.ensure_inbox(PARENT_INBOX)
    with pytest.raises(LimitExceeded, match=r"is \d+ bytes, over the 1024-byte limit"):
        mailbox.publish(PARENT_INBOX, message(session_id, content="x" * 2000))
    mailbox.publish(PARENT_INBOX, message(session_id, content="x" * 500))
    assert len(listing(mailbox.inbox_path(PARENT_INBOX) / "new")) == 1


def test_queue_depth_limit_refuses_and_loses_nothing_accepted(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox(settings=Settings(max_queue_depth=3, fallback_poll_s=30.0))
    mailbox.ensure_inbox(PARENT_INBOX)
    accepted = [message(session_id, content=f"m{i}") for i in range(3)]
    for envelope in accepted:
        mailbox.publish(PARENT_INBOX, envelope)
    with pytest.raises(LimitExceeded, match="already holds 3 unread envelopes"):
        mailbox.publish(PARENT_INBOX, message(session_id, content="one too many"))
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    collector.wait_for(3)
    assert collector.contents == ["m0", "m1", "m2"]
    assert mailbox.wait_drained(10)
    mailbox.publish(PARENT_INBOX, message(session_id, content="room again"))
    collector.wait_for(4)


def test_envelopes_for_another_session_are_refused_at_publish(parent: Mailbox) -> None:
    with pytest.raises(InvalidEnvelope, match="session"):
        parent.publish(PARENT_INBOX, message(new_id(IdKind.SESSION)))


def test_malformed_ids_are_refused_before_any_file_exists(parent: Mailbox, session_id: str) -> None:
    with pytest.raises(InvalidEnvelope, match="message_id"):
        parent.publish(PARENT_INBOX, message(session_id, message_id="../../etc/passwd"))
    assert listing(parent.inbox_path(PARENT_INBOX) / "tmp") == []


def test_publish_after_close_raises(parent: Mailbox, session_id: str) -> None:
    parent.close()
    with pytest.raises(InvalidHandle, match="closed"):
        parent.publish(PARENT_INBOX, message(session_id))
    with pytest.raises(InvalidHandle, match="closed"):
        parent.subscribe(PARENT_INBOX, lambda envelope: None)


def test_names_sort_in_publish_order_even_when_the_clock_stands_still_or_steps_back(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    ticks = iter([5_000, 5_000, 4_000, 5_000, 1, 9_000_000] * 10)
    mailbox = make_mailbox(now_ns=lambda: next(ticks))
    mailbox.ensure_inbox(PARENT_INBOX)
    sent = [message(session_id, content=str(i)) for i in range(60)]
    for envelope in sent:
        mailbox.publish(PARENT_INBOX, envelope)
    names = listing(mailbox.inbox_path(PARENT_INBOX) / "new")
    assert [name.split(".")[3] for name in names] == [e.message_id for e in sent]


def test_fsync_mode_publishes_the_same_way(make_mailbox: MailboxFactory, session_id: str) -> None:
    mailbox = make_mailbox(settings=Settings(fsync=True))
    mailbox.ensure_inbox(AGENT)
    mailbox.publish(AGENT, message(session_id, target_id=AGENT))
    box: Path = mailbox.inbox_path(AGENT)
    assert len(listing(box / "new")) == 1
    assert listing(box / "tmp") == []
