"""Layout, permissions and where mailboxes live."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox, default_runtime_dir
from protocol.core.errors import (
    ForbiddenSender,
    InvalidArgument,
    InvalidHandle,
    SessionUnavailable,
)
from protocol.core.ids import IdKind

from .conftest import (
    AGENT,
    MailboxFactory,
    Rejections,
    listing,
    message,
    new_id,
    plant,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_directories_0700_and_files_0600(
    parent: Mailbox, root: Path, session_id: str, rejections: Rejections
) -> None:
    parent.publish(PARENT_INBOX, message(session_id))
    plant(parent, PARENT_INBOX, "garbage", b"{")
    parent.subscribe(PARENT_INBOX, lambda envelope: None)
    rejections.wait_for(1)
    assert parent.wait_drained(10)

    dirs = [root, root / "inbox", root / "quarantine"]
    for owner in (PARENT_INBOX, AGENT):
        box = root / "inbox" / owner
        dirs += [box, box / "tmp", box / "new", box / "cur"]
    assert {str(d): mode(d) for d in dirs} == {str(d): 0o700 for d in dirs}
    cur = parent.inbox_path(PARENT_INBOX) / "cur"
    reasons = [n for n in listing(root / "quarantine") if n.endswith(".reason")]
    files = [cur / n for n in listing(cur)] + [root / "quarantine" / n for n in reasons]
    assert len(files) == 2  # the published (now acknowledged) envelope and the reason file
    assert {str(f): mode(f) for f in files} == {str(f): 0o600 for f in files}


def test_directories_are_0700_even_under_a_loose_umask(root: Path, session_id: str) -> None:
    old = os.umask(0o000)
    try:
        mailbox = Mailbox.create(root, session_id)
    finally:
        os.umask(old)
    try:
        mailbox.ensure_inbox(AGENT)
        assert mode(root) == 0o700
        assert mode(mailbox.inbox_path(AGENT) / "new") == 0o700
    finally:
        mailbox.close()


def test_create_makes_missing_ancestors_private(tmp_path: Path, session_id: str) -> None:
    root = tmp_path / "runtime" / "shepherd" / "session"
    Mailbox.create(root, session_id).close()
    assert mode(tmp_path / "runtime") == 0o700
    assert mode(tmp_path / "runtime" / "shepherd") == 0o700


def test_create_refuses_a_symlink_root(tmp_path: Path, session_id: str) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    link = tmp_path / "session"
    link.symlink_to(real)
    with pytest.raises(InvalidArgument, match="symbolic link"):
        Mailbox.create(link, session_id)
    assert listing(real) == []


def test_create_refuses_a_file_root(tmp_path: Path, session_id: str) -> None:
    (tmp_path / "session").write_text("x")
    with pytest.raises(InvalidArgument, match="not a directory"):
        Mailbox.create(tmp_path / "session", session_id)


def make_foreign(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the directory ``path`` someone else's; return the uid it now seems to belong to.
    As root: really chown it. Otherwise: we pretend to be another user (the checks compare
    the owner with ``os.getuid()``), which is the same situation seen from the other side."""
    if os.getuid() == 0:
        os.chown(path, 12345, 12345)
        return "12345"
    owner = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    return str(owner)


def test_create_refuses_a_root_owned_by_someone_else(
    tmp_path: Path, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    foreign = tmp_path / "session"
    foreign.mkdir(mode=0o700)
    uid = make_foreign(foreign, monkeypatch)
    with pytest.raises(InvalidArgument, match=f"uid {uid}"):
        Mailbox.create(foreign, session_id)


def test_create_refuses_a_parent_owned_by_someone_else(
    tmp_path: Path, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    foreign = tmp_path / "shared"
    foreign.mkdir(mode=0o755)
    uid = make_foreign(foreign, monkeypatch)
    with pytest.raises(InvalidArgument, match=f"uid {uid}"):
        Mailbox.create(foreign / "session", session_id)


def test_create_refuses_a_parent_writable_by_others(tmp_path: Path, session_id: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InvalidArgument, match="writable by other users"):
        Mailbox.create(shared / "session", session_id)
    shared.chmod(0o1777)  # sticky, like /tmp and /dev/shm: fine
    Mailbox.create(shared / "session", session_id).close()


def test_create_again_keeps_what_is_there(make_mailbox: MailboxFactory, session_id: str) -> None:
    first = make_mailbox()
    first.ensure_inbox(PARENT_INBOX)
    first.publish(PARENT_INBOX, message(session_id))
    first.close()
    second = make_mailbox()
    assert len(listing(second.inbox_path(PARENT_INBOX) / "new")) == 1


def test_open_needs_an_existing_private_mailbox(
    make_mailbox: MailboxFactory, root: Path, session_id: str
) -> None:
    with pytest.raises(SessionUnavailable):
        Mailbox.open(root, session_id)
    make_mailbox()
    (root / "inbox").chmod(0o755)
    with pytest.raises(InvalidArgument, match="open to other users"):
        Mailbox.open(root, session_id)


def test_create_rejects_a_malformed_session_id(root: Path) -> None:
    with pytest.raises(InvalidHandle):
        Mailbox.create(root, "../session")


def test_an_opened_mailbox_creates_only_client_inboxes(
    parent: Mailbox, make_mailbox: MailboxFactory
) -> None:
    child = make_mailbox(open=True)
    with pytest.raises(ForbiddenSender):
        child.ensure_inbox(new_id(IdKind.AGENT))
    with pytest.raises(ForbiddenSender):
        child.ensure_inbox(PARENT_INBOX)
    client = new_id(IdKind.MESSAGE)
    assert child.ensure_inbox(client) == parent.inbox_path(client)
    assert parent.has_inbox(client)


@pytest.mark.parametrize(
    "owner", ["../parent", "parent/new", "", "Parent", "shepherd-task-abcdef12", "x" * 300]
)
def test_inbox_names_are_strict(parent: Mailbox, session_id: str, owner: str) -> None:
    with pytest.raises(InvalidHandle):
        parent.ensure_inbox(owner)
    with pytest.raises(InvalidHandle):
        parent.publish(owner, message(session_id))
    with pytest.raises(InvalidHandle):
        parent.subscribe(owner, lambda envelope: None)


def test_remove_inbox_only_when_unread_and_unsubscribed(parent: Mailbox, session_id: str) -> None:
    client = new_id(IdKind.MESSAGE)
    parent.ensure_inbox(client)
    envelope = message(session_id, target_id=AGENT)
    parent.publish(client, envelope)
    with pytest.raises(InvalidArgument, match="unread"):
        parent.remove_inbox(client)
    got: list[str] = []
    subscription = parent.subscribe(client, lambda e: got.append(e.message_id))
    assert parent.wait_drained(10)
    with pytest.raises(InvalidArgument, match="subscribed"):
        parent.remove_inbox(client)
    subscription.cancel()
    parent.remove_inbox(client)
    assert got == [envelope.message_id]
    assert not parent.has_inbox(client)
    with pytest.raises(InvalidHandle):
        parent.publish(client, message(session_id))


def test_default_runtime_dir_prefers_the_users_runtime_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert default_runtime_dir() == runtime / "shepherd"


def test_default_runtime_dir_falls_back_to_shared_memory_or_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    chosen = default_runtime_dir()
    assert chosen.name == f"shepherd-{os.getuid()}"
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        assert chosen.parent == Path("/dev/shm")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_runtime_dir() == chosen
