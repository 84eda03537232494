"""Hostile or broken input in new/: quarantined with a reason, never blocking, never lost."""

from __future__ import annotations

import hmac
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.files import ABANDONED_TMP_S
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import ForbiddenSender, InvalidHandle
from protocol.core.ids import IdKind
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, encode_envelope

from .conftest import (
    AGENT,
    OTHER_AGENT,
    Collector,
    MailboxFactory,
    Rejections,
    file_name,
    listing,
    message,
    new_id,
    plant,
    planted_envelope,
)


def reason(root: Path, name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((root / "quarantine" / f"{name}.reason").read_bytes())
    return data


def quarantined(root: Path) -> list[str]:
    return [name for name in listing(root / "quarantine") if not name.endswith(".reason")]


def deliver_after(parent: Mailbox, session_id: str, collector: Collector) -> None:
    """The file behind a bad one is still delivered."""
    parent.publish(PARENT_INBOX, message(session_id, content="after"))
    collector.wait_for(1)
    assert collector.contents == ["after"]


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b'{"kind": "message", "message_id": ', b"\x00\xff garbage", b"[1, 2, 3]", b"null"],
    ids=["empty", "brace", "truncated", "binary", "array", "null"],
)
def test_garbage_is_quarantined_with_a_reason_and_the_inbox_moves_on(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path, data: bytes
) -> None:
    name = file_name(new_id(IdKind.MESSAGE))
    plant(parent, PARENT_INBOX, name, data)
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    ((inbox, envelope, error),) = rejections.wait_for(1)
    assert (inbox, envelope, error.code) == (PARENT_INBOX, None, "invalid_envelope")
    assert quarantined(root) == [name]
    assert (root / "quarantine" / name).read_bytes() == data
    written = reason(root, name)
    assert written["code"] == "invalid_envelope"
    assert written["inbox"] == PARENT_INBOX
    assert written["message"] == error.message
    assert isinstance(written["quarantined_at"], float)
    deliver_after(parent, session_id, collector)
    assert parent.stats().quarantined == 1


def test_a_truncated_copy_of_a_real_envelope_is_quarantined(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path
) -> None:
    name, data = planted_envelope(message(session_id))
    plant(parent, PARENT_INBOX, name, data[: len(data) // 2])
    good = message(session_id, content="good")
    parent.publish(PARENT_INBOX, good)  # sorts after the planted one
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    collector.wait_for(1)
    rejections.wait_for(1)
    assert quarantined(root) == [name]
    assert collector.contents == ["good"]


def test_an_oversized_file_in_new_is_quarantined_unread(
    make_mailbox: MailboxFactory, session_id: str, root: Path
) -> None:
    rejections = Rejections()
    mailbox = make_mailbox(settings=Settings(max_envelope_bytes=1024), on_reject=rejections)
    mailbox.ensure_inbox(PARENT_INBOX)
    big = message(session_id, content="x" * 5000)
    name, data = planted_envelope(big)
    plant(mailbox, PARENT_INBOX, name, data)
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    ((_, envelope, error),) = rejections.wait_for(1)
    assert envelope is None
    assert error.code == "limit_exceeded"
    assert str(len(data)) in error.message and "1024" in error.message
    assert reason(root, name)["code"] == "limit_exceeded"
    mailbox.publish(PARENT_INBOX, message(session_id, content="small"))
    collector.wait_for(1)


def test_a_symlink_is_quarantined_without_being_followed(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim.json"
    payload = encode_envelope(message(session_id, content="via symlink"))
    target.write_bytes(payload)
    before = os.stat(target)
    name = file_name(new_id(IdKind.MESSAGE))
    os.symlink(target, parent.inbox_path(PARENT_INBOX) / "new" / name)
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    ((_, envelope, error),) = rejections.wait_for(1)
    assert envelope is None
    assert "symbolic link" in error.message and "not opened" in error.message
    assert quarantined(root) == [name]
    assert os.path.islink(root / "quarantine" / name)  # the link itself moved, not its target
    after = os.stat(target)  # never opened: not even its access time moved
    assert (after.st_ino, after.st_mtime_ns, after.st_atime_ns) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_atime_ns,
    )
    assert target.read_bytes() == payload
    deliver_after(parent, session_id, collector)


def test_a_fifo_is_quarantined_and_the_receiver_does_not_hang(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path
) -> None:
    name = file_name(new_id(IdKind.MESSAGE))
    os.mkfifo(parent.inbox_path(PARENT_INBOX) / "new" / name, 0o600)
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    ((_, _, error),) = rejections.wait_for(1)
    assert "FIFO" in error.message
    assert quarantined(root) == [name]
    deliver_after(parent, session_id, collector)


def test_a_directory_is_quarantined(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path
) -> None:
    name = file_name(new_id(IdKind.MESSAGE))
    os.mkdir(parent.inbox_path(PARENT_INBOX) / "new" / name)
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    ((_, _, error),) = rejections.wait_for(1)
    assert "directory" in error.message
    deliver_after(parent, session_id, collector)


@pytest.mark.parametrize(
    "name", [".hidden", "note.txt", "x" * 250, "line\nbreak.json", "00000000000000000001.1.1.json"]
)
def test_a_file_with_a_foreign_name_is_quarantined_under_a_safe_name(
    parent: Mailbox, session_id: str, rejections: Rejections, root: Path, name: str
) -> None:
    valid = encode_envelope(message(session_id))
    plant(parent, PARENT_INBOX, name, valid)
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    ((_, _, error),) = rejections.wait_for(1)
    assert "not an envelope file name" in error.message
    (kept,) = quarantined(root)
    assert kept.endswith(".invalid-name")
    assert reason(root, kept)["file"] == repr(name)[:120] + ("…" if len(repr(name)) > 120 else "")
    deliver_after(parent, session_id, collector)


def test_a_file_named_for_another_message_is_quarantined(
    parent: Mailbox, session_id: str, rejections: Rejections
) -> None:
    envelope = message(session_id)
    plant(parent, PARENT_INBOX, file_name(new_id(IdKind.MESSAGE)), encode_envelope(envelope))
    parent.subscribe(PARENT_INBOX, Collector())
    ((_, rejected, error),) = rejections.wait_for(1)
    assert rejected is not None and rejected.message_id == envelope.message_id
    assert "named for another message" in error.message


def test_another_sessions_envelope_is_quarantined_and_reported(
    parent: Mailbox, make_mailbox: MailboxFactory, rejections: Rejections, root: Path
) -> None:
    foreign_session = new_id(IdKind.SESSION)
    intruder = make_mailbox(open=True, session_id=foreign_session)
    forged = message(foreign_session, content="from elsewhere")
    intruder.publish(PARENT_INBOX, forged)  # same files, other session id
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    ((inbox, envelope, error),) = rejections.wait_for(1)
    assert inbox == PARENT_INBOX
    assert envelope is not None and envelope.message_id == forged.message_id
    assert error.code == "invalid_envelope"
    assert foreign_session in error.message
    (name,) = quarantined(root)
    written = reason(root, name)
    assert foreign_session in str(written["message"])
    assert written["message_id"] == forged.message_id
    assert written["sender_id"] == AGENT
    assert collector.items == []


class CapabilityCheck:
    """The parent's kind of validator: each agent proves itself with its own secret."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self._secrets = secrets

    def __call__(self, inbox: str, envelope: AnyEnvelope) -> None:
        expected = self._secrets.get(envelope.sender_id, "")
        if not expected or not hmac.compare_digest(expected, envelope.capability):
            raise ForbiddenSender(f"{envelope.sender_id} did not prove its identity")


def test_a_forged_sender_is_quarantined_and_on_reject_gets_the_envelope(
    make_mailbox: MailboxFactory, session_id: str, root: Path
) -> None:
    rejections = Rejections()
    parent = make_mailbox(
        validate=CapabilityCheck({AGENT: "cap-a", OTHER_AGENT: "cap-b"}), on_reject=rejections
    )
    parent.ensure_inbox(PARENT_INBOX)
    child = make_mailbox(open=True)
    # OTHER_AGENT pretends to be AGENT: right id, its own (wrong) capability
    forged = message(session_id, sender_id=AGENT, capability="cap-b", content="forged")
    honest = message(session_id, sender_id=OTHER_AGENT, capability="cap-b", content="honest")
    child.publish(PARENT_INBOX, forged)
    child.publish(PARENT_INBOX, honest)
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    collector.wait_for(1)
    ((_, envelope, error),) = rejections.wait_for(1)
    assert isinstance(error, ForbiddenSender)
    assert envelope is not None
    assert (envelope.message_id, envelope.sender_id) == (forged.message_id, AGENT)
    assert envelope.capability == ""  # the secret is never handed on
    assert rejections.authenticated == [False]  # the claimed sender must not be told
    (name,) = quarantined(root)
    assert reason(root, name)["code"] == "forbidden_sender"
    assert "cap-b" not in json.dumps(reason(root, name))
    assert collector.contents == ["honest"]


def test_a_crashing_validator_or_on_reject_never_stops_the_receiver(
    make_mailbox: MailboxFactory, session_id: str, root: Path
) -> None:
    def validator(inbox: str, envelope: AnyEnvelope) -> None:
        if getattr(envelope, "content", "") == "trips the validator":
            raise KeyError("bug")

    def on_reject(inbox: str, envelope: object, error: object, authenticated: bool) -> None:
        raise RuntimeError("sink down")

    mailbox = make_mailbox(validate=validator, on_reject=on_reject)
    mailbox.ensure_inbox(PARENT_INBOX)
    mailbox.publish(PARENT_INBOX, message(session_id, content="trips the validator"))
    plant(mailbox, PARENT_INBOX, file_name(new_id(IdKind.MESSAGE), stamp=2), b"junk")
    mailbox.publish(PARENT_INBOX, message(session_id, content="fine"))
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    collector.wait_for(1)
    assert mailbox.wait_drained(10)
    assert mailbox.stats().quarantined == 2
    codes = sorted(str(reason(root, name)["code"]) for name in quarantined(root))
    assert codes == ["delivery_failed", "invalid_envelope"]


def test_a_flood_planted_directly_is_handled_in_order(
    parent: Mailbox, session_id: str, rejections: Rejections
) -> None:
    sent = []
    for i in range(50):
        envelope = message(session_id, content=str(i))
        sent.append(envelope)
        plant(
            parent,
            PARENT_INBOX,
            file_name(envelope.message_id, stamp=10 + 2 * i),
            encode_envelope(envelope),
        )
        plant(parent, PARENT_INBOX, file_name(new_id(IdKind.MESSAGE), stamp=11 + 2 * i), b"x")
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    collector.wait_for(50)
    rejections.wait_for(50)
    assert collector.contents == [str(i) for i in range(50)]


def test_an_inbox_replaced_by_a_symlink_is_not_read(
    parent: Mailbox, tmp_path: Path, session_id: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    for sub in ("tmp", "new", "cur"):
        (elsewhere / sub).mkdir(parents=True)
    box = parent.inbox_path(AGENT)
    shutil.rmtree(box)
    box.symlink_to(elsewhere)
    with pytest.raises(InvalidHandle, match="symbolic link"):
        parent.subscribe(AGENT, Collector())
    with pytest.raises(InvalidHandle, match="symbolic link"):
        parent.publish(AGENT, message(session_id, target_id=AGENT))
    assert os.listdir(elsewhere / "tmp") == []


@pytest.mark.parametrize("swapped", ["inbox", "new"])
def test_a_symlink_swapped_in_after_publishing_is_still_refused(
    parent: Mailbox, tmp_path: Path, session_id: str, swapped: str
) -> None:
    # the directory checks run on every publish: an earlier publish into the real inbox does
    # not vouch for whatever is there now
    parent.publish(AGENT, message(session_id, target_id=AGENT))
    elsewhere = tmp_path / "elsewhere"
    for sub in ("tmp", "new", "cur"):
        (elsewhere / sub).mkdir(parents=True)
    box = parent.inbox_path(AGENT)
    victim = box if swapped == "inbox" else box / "new"
    victim.rename(tmp_path / "moved-away")
    victim.symlink_to(elsewhere if swapped == "inbox" else elsewhere / "new")
    for _ in range(40):  # more than any count or check a publish could reuse
        with pytest.raises(InvalidHandle, match="symbolic link; refusing to write"):
            parent.publish(AGENT, message(session_id, target_id=AGENT))
    assert os.listdir(elsewhere / "tmp") == []
    assert os.listdir(elsewhere / "new") == []


def test_files_abandoned_in_tmp_are_removed_and_fresh_ones_kept(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox()
    tmp = mailbox.ensure_inbox(PARENT_INBOX) / "tmp"
    abandoned = tmp / file_name(new_id(IdKind.MESSAGE))
    abandoned.write_bytes(b'{"kind": "message", "half')  # a writer died mid-publish
    old = time.time() - ABANDONED_TMP_S - 5
    os.utime(abandoned, (old, old))
    old_link = tmp / "planted-link"
    old_link.symlink_to("/etc/passwd")
    os.utime(old_link, (old, old), follow_symlinks=False)
    fresh = tmp / file_name(new_id(IdKind.MESSAGE), stamp=2)  # a publish in progress
    fresh.write_bytes(b"{")
    mailbox.publish(PARENT_INBOX, message(session_id, content="after"))
    collector = Collector()
    mailbox.subscribe(PARENT_INBOX, collector)
    collector.wait_for(1)
    assert mailbox.wait_drained(10)
    assert sorted(os.listdir(tmp)) == [fresh.name]  # the link itself went, not its target
    assert os.path.exists("/etc/passwd")
