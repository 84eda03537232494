"""Receiving: order, recovery, duplicates, acknowledgement, retention, one thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from loguru import logger

from actors.runtime.transport import PARENT_INBOX, Transport
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.wakers import polling_waker
from protocol.core.ids import IdKind
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope

from .conftest import AGENT, Collector, MailboxFactory, Rejections, listing, message, new_id


def test_round_trip(parent: Mailbox, session_id: str) -> None:
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    sent = message(session_id, content="ping")
    parent.publish(PARENT_INBOX, sent)
    (got,) = collector.wait_for(1)
    assert got == sent
    assert collector.threads == {"shepherd-mailbox-receiver"}
    assert parent.wait_drained(10)
    box = parent.inbox_path(PARENT_INBOX)
    assert listing(box / "new") == []
    assert len(listing(box / "cur")) == 1
    assert parent.stats().delivered == 1


def test_order_is_kept_for_one_publisher(parent: Mailbox, session_id: str) -> None:
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    for i in range(200):
        parent.publish(PARENT_INBOX, message(session_id, content=str(i)))
    collector.wait_for(200)
    assert collector.contents == [str(i) for i in range(200)]


def test_order_is_kept_per_publisher_thread(parent: Mailbox, session_id: str) -> None:
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)

    def publish(tag: str) -> None:
        for i in range(100):
            parent.publish(PARENT_INBOX, message(session_id, content=f"{tag}{i}"))

    threads = [threading.Thread(target=publish, args=(tag,)) for tag in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    collector.wait_for(300)
    for tag in "abc":
        assert [c for c in collector.contents if c.startswith(tag)] == [
            f"{tag}{i}" for i in range(100)
        ]


def test_many_inboxes_share_one_receiver_thread(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox()
    owners = [new_id(IdKind.AGENT) for _ in range(20)]
    for owner in owners:
        mailbox.ensure_inbox(owner)
    collectors = {owner: Collector() for owner in owners}
    before = set(threading.enumerate())  # threads of earlier tests may end meanwhile

    def started() -> set[threading.Thread]:
        return {t for t in set(threading.enumerate()) - before if t.name.startswith("shepherd-")}

    mailbox.subscribe(owners[0], collectors[owners[0]])
    with_one = started()
    assert [t.name for t in with_one] == ["shepherd-mailbox-receiver"]
    for owner in owners[1:]:
        mailbox.subscribe(owner, collectors[owner])
    assert started() == with_one
    for owner in owners:
        mailbox.publish(owner, message(session_id, target_id=owner, content=owner))
    for owner, collector in collectors.items():
        assert collector.wait_for(1)[0].content == owner  # type: ignore[union-attr]
        assert collector.threads == {"shepherd-mailbox-receiver"}
    assert started() == with_one


def test_files_already_in_new_are_delivered_on_subscribe(parent: Mailbox, session_id: str) -> None:
    for i in range(5):
        parent.publish(PARENT_INBOX, message(session_id, content=str(i)))
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    collector.wait_for(5)
    assert collector.contents == ["0", "1", "2", "3", "4"]


def test_recovery_after_a_restart(make_mailbox: MailboxFactory, session_id: str) -> None:
    first = make_mailbox()
    first.ensure_inbox(PARENT_INBOX)
    delivered = message(session_id, content="before")
    collector = Collector()
    first.subscribe(PARENT_INBOX, collector)
    first.publish(PARENT_INBOX, delivered)
    collector.wait_for(1)
    assert first.wait_drained(10)
    first.close()
    pending = message(session_id, content="while down")
    writer = make_mailbox(open=True)
    writer.publish(PARENT_INBOX, pending)
    writer.publish(PARENT_INBOX, delivered)  # a sender retrying across the restart

    second = make_mailbox()
    again = Collector()
    second.subscribe(PARENT_INBOX, again)
    again.wait_for(1)
    assert second.wait_drained(10)
    assert again.contents == ["while down"]  # the retry was seen in cur/: not re-delivered
    assert second.stats().duplicates == 1


def test_a_duplicate_message_id_is_delivered_once(parent: Mailbox, session_id: str) -> None:
    envelope = message(session_id, content="once")
    parent.publish(PARENT_INBOX, envelope)
    parent.publish(PARENT_INBOX, envelope)
    parent.publish(PARENT_INBOX, message(session_id, content="next"))
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    collector.wait_for(2)
    assert parent.wait_drained(10)
    assert collector.contents == ["once", "next"]
    stats = parent.stats()
    assert (stats.delivered, stats.duplicates, stats.quarantined) == (2, 1, 0)
    assert listing(parent.inbox_path(PARENT_INBOX) / "new") == []


def test_the_same_message_id_in_two_inboxes_is_not_a_duplicate(
    parent: Mailbox, session_id: str
) -> None:
    envelope = message(session_id, target_id=AGENT)  # the parent relays with the same id
    parent.publish(PARENT_INBOX, envelope)
    parent.publish(AGENT, envelope)
    to_parent, to_agent = Collector(), Collector()
    parent.subscribe(PARENT_INBOX, to_parent)
    parent.subscribe(AGENT, to_agent)
    to_parent.wait_for(1)
    to_agent.wait_for(1)


def test_the_duplicate_window_is_bounded(make_mailbox: MailboxFactory, session_id: str) -> None:
    mailbox = make_mailbox(settings=Settings(dedup_window=2, retention_count=0))
    mailbox.ensure_inbox(PARENT_INBOX)
    first = message(session_id, content="first")
    for envelope in (first, message(session_id), message(session_id)):
        mailbox.publish(PARENT_INBOX, envelope)
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    collector.wait_for(3)
    mailbox.publish(PARENT_INBOX, first)  # forgotten by now: memory stays bounded
    collector.wait_for(4)


def test_the_capability_never_reaches_the_handler(parent: Mailbox, session_id: str) -> None:
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    parent.publish(PARENT_INBOX, message(session_id, capability="s3cret"))
    (got,) = collector.wait_for(1)
    assert got.capability == ""


def test_cur_is_pruned_oldest_first(make_mailbox: MailboxFactory, session_id: str) -> None:
    mailbox = make_mailbox(settings=Settings(retention_count=3, fallback_poll_s=30.0))
    mailbox.ensure_inbox(PARENT_INBOX)
    sent = [message(session_id, content=str(i)) for i in range(10)]
    for envelope in sent[:6]:
        mailbox.publish(PARENT_INBOX, envelope)
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    collector.wait_for(6)
    for envelope in sent[6:]:
        mailbox.publish(PARENT_INBOX, envelope)
    collector.wait_for(10)
    assert mailbox.wait_drained(10)
    kept = listing(mailbox.inbox_path(PARENT_INBOX) / "cur")
    assert [name.split(".")[3] for name in kept] == [e.message_id for e in sent[-3:]]


def test_a_handler_exception_quarantines_the_file_and_the_receiver_goes_on(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path
) -> None:
    collector = Collector(fail_on=lambda e: getattr(e, "content", "") == "boom")
    parent.subscribe(PARENT_INBOX, collector)
    bad = message(session_id, content="boom")
    parent.publish(PARENT_INBOX, bad)
    parent.publish(PARENT_INBOX, message(session_id, content="fine"))
    collector.wait_for(1)
    ((inbox, envelope, error),) = rejections.wait_for(1)
    assert (inbox, error.code) == (PARENT_INBOX, "delivery_failed")
    assert envelope is not None and envelope.message_id == bad.message_id
    assert rejections.authenticated == [True]  # it had passed the validator: the sender is told
    assert "handler refuses" in error.message
    names = listing(root / "quarantine")
    assert len(names) == 2 and names[0].endswith(f"{bad.message_id}.json")
    assert (root / "quarantine" / names[0]).read_bytes().startswith(b"{")  # not lost
    parent.publish(PARENT_INBOX, message(session_id, content="later"))
    collector.wait_for(2)
    assert collector.contents == ["fine", "later"]
    assert parent.stats().quarantined == 1


def test_cancel_stops_delivery_and_leaves_files_for_the_next_subscriber(
    parent: Mailbox, session_id: str
) -> None:
    first = Collector()
    subscription = parent.subscribe(PARENT_INBOX, first)
    parent.publish(PARENT_INBOX, message(session_id, content="a"))
    first.wait_for(1)
    subscription.cancel()
    assert parent.wait_drained(10)
    parent.publish(PARENT_INBOX, message(session_id, content="b"))
    assert parent.wait_drained(10)
    assert first.contents == ["a"]
    assert len(listing(parent.inbox_path(PARENT_INBOX) / "new")) == 1
    second = Collector()
    parent.subscribe(PARENT_INBOX, second)
    second.wait_for(1)
    assert second.contents == ["b"]


def test_subscribing_again_replaces_the_handler(parent: Mailbox, session_id: str) -> None:
    first, second = Collector(), Collector()
    old = parent.subscribe(PARENT_INBOX, first)
    parent.subscribe(PARENT_INBOX, second)
    old.cancel()  # a stale subscription cannot cancel its replacement
    parent.publish(PARENT_INBOX, message(session_id))
    second.wait_for(1)
    assert first.items == []


def test_the_fallback_rescan_delivers_without_any_watcher(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox(settings=Settings(fallback_poll_s=0.05), waker_factory=polling_waker())
    mailbox.ensure_inbox(PARENT_INBOX)
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    assert mailbox.wait_drained(10)
    mailbox.publish(PARENT_INBOX, message(session_id, content="polled"))
    collector.wait_for(1)


def test_an_unwatchable_inbox_degrades_to_polling(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    def broken(dirs: object, interrupt: threading.Event) -> object:
        raise OSError("inotify watch limit reached")

    mailbox = make_mailbox(settings=Settings(fallback_poll_s=0.05), waker_factory=broken)
    mailbox.ensure_inbox(PARENT_INBOX)
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    mailbox.publish(PARENT_INBOX, message(session_id))
    collector.wait_for(1)


def test_close_stops_the_receiver_thread(parent: Mailbox, session_id: str) -> None:
    before = set(threading.enumerate())
    parent.subscribe(PARENT_INBOX, Collector())
    (receiver,) = set(threading.enumerate()) - before
    assert receiver.is_alive()
    parent.close()
    assert not receiver.is_alive()  # close() joined it
    assert parent.wait_drained(1) is False
    parent.close()  # idempotent


def test_close_from_a_handler_does_not_deadlock(parent: Mailbox, session_id: str) -> None:
    done = threading.Event()

    def handler(envelope: object) -> None:
        with pytest.raises(RuntimeError):
            parent.wait_drained(1)
        parent.close()
        done.set()

    parent.subscribe(PARENT_INBOX, handler)
    parent.publish(PARENT_INBOX, message(session_id))
    assert done.wait(10)


def test_a_handler_may_publish(parent: Mailbox, session_id: str) -> None:
    replies = Collector()
    parent.subscribe(AGENT, replies)

    def relay(envelope: object) -> None:
        assert isinstance(envelope, MessageEnvelope)
        parent.publish(
            AGENT, message(session_id, target_id=AGENT, content="re: " + envelope.content)
        )

    parent.subscribe(PARENT_INBOX, relay)
    parent.publish(PARENT_INBOX, message(session_id, content="q"))
    assert replies.wait_for(1)[0].content == "re: q"  # type: ignore[union-attr]


def test_a_backlog_larger_than_one_turn_is_drained_in_order_and_fairly(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox(settings=Settings(max_queue_depth=5000, fallback_poll_s=30.0))
    mailbox.ensure_inbox(PARENT_INBOX)
    mailbox.ensure_inbox(AGENT)
    for i in range(2500):  # more than two turns' budget
        mailbox.publish(PARENT_INBOX, message(session_id, content=str(i)))
    mailbox.publish(AGENT, message(session_id, target_id=AGENT, content="not starved"))
    backlog, other = Collector(), Collector()
    seen_by_then: list[int] = []

    def other_handler(envelope: AnyEnvelope) -> None:
        seen_by_then.append(len(backlog.items))
        other(envelope)

    mailbox.subscribe(PARENT_INBOX, backlog)
    mailbox.subscribe(AGENT, other_handler)
    other.wait_for(1)
    backlog.wait_for(2500)
    assert backlog.contents == [str(i) for i in range(2500)]
    assert seen_by_then[0] < 2500  # the other inbox got a turn inside the backlog
    assert mailbox.wait_drained(10)
    assert listing(mailbox.inbox_path(PARENT_INBOX) / "new") == []


def test_a_mailbox_is_a_transport(parent: Mailbox) -> None:
    transport: Transport = parent  # checked by mypy: the Transport protocol is satisfied
    assert transport is parent


def test_each_delivery_stage_logs_one_debug_record_naming_inbox_and_message(
    parent: Mailbox, session_id: str
) -> None:
    # the records carry ``inbox`` and ``message_id`` in ``extra`` (as ``logger.bind`` put them)
    records: list[tuple[str | None, str, dict[str, object]]] = []
    logger.enable("actors")
    sink = logger.add(
        lambda m: records.append((m.record["name"], m.record["message"], dict(m.record["extra"]))),
        level="DEBUG",
        filter=lambda record: str(record["name"]).startswith("actors.transports.mailbox."),
    )
    try:
        envelope = message(session_id, content="once")
        parent.publish(PARENT_INBOX, envelope)
        parent.publish(PARENT_INBOX, envelope)
        collector = Collector()
        parent.subscribe(PARENT_INBOX, collector)
        collector.wait_for(1)
        assert parent.wait_drained(10)
    finally:
        logger.remove(sink)
        logger.disable("actors")
    extra = {"inbox": PARENT_INBOX, "message_id": envelope.message_id}
    stages = [
        (name, text.split(" ")[1], fields)
        for name, text, fields in records
        if text.startswith("mailbox: ") and fields.get("message_id") == envelope.message_id
    ]
    assert stages == [
        ("actors.transports.mailbox.mailbox", "published", extra),
        ("actors.transports.mailbox.mailbox", "published", extra),
        ("actors.transports.mailbox.drain", "received", extra),
        ("actors.transports.mailbox.drain", "delivered", extra),
        ("actors.transports.mailbox.drain", "acknowledged", extra),
        ("actors.transports.mailbox.drain", "received", extra),
        ("actors.transports.mailbox.drain", "duplicate", extra),
    ]
