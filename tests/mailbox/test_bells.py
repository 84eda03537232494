"""The doorbell (actors/transports/mailbox/bell.py): a publish rings the inbox's FIFO and wakes a
reader that holds no inotify instance; a thing planted at the bell's path is refused, never written
through, and the reader falls back (and says so); the bell goes with its inbox; and no ring is
lost between a rescan and the next wait.

Every mailbox here rescans only every 30 s unless a test says otherwise, so a delivery within
the test's wait proves the bell woke the reader."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox import bell as mailbox_bell
from actors.transports.mailbox.bell import (
    BELL_NAME,
    BellRinger,
    BellWaker,
    bell_path,
    bell_waker,
    make_bell,
)
from actors.transports.mailbox.files import envelope_file_name
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.wakers import InterruptEvent, Waker
from actors.transports.mailbox.watch import Receiver
from protocol.core.ids import IdKind
from protocol.records.settings import Settings
from tests.mailbox.conftest import (
    AGENT,
    Collector,
    MailboxFactory,
    message,
    new_id,
)

BELL_ONLY = bell_waker(inotify="never")


class Modes:
    """An ``on_wake_mode`` callback that records (inbox, mode) and can be waited on."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self._cond = threading.Condition()

    def __call__(self, inbox: str, mode: str) -> None:
        with self._cond:
            self.items.append((inbox, mode))
            self._cond.notify_all()

    def wait_for(self, item: tuple[str, str], timeout: float = 10.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: item in self.items, timeout), self.items


def client_inbox(parent: Mailbox) -> str:
    inbox = new_id(IdKind.MESSAGE)
    parent.ensure_inbox(inbox)
    return inbox


def test_ensure_inbox_makes_a_private_fifo_beside_new(parent: Mailbox) -> None:
    bell = parent.inbox_path(AGENT) / BELL_NAME
    st = os.lstat(bell)
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert sorted(os.listdir(parent.inbox_path(AGENT))) == ["bell", "cur", "new", "tmp"]


def test_a_publish_wakes_a_reader_that_has_only_the_bell(
    parent: Mailbox, make_mailbox: MailboxFactory, session_id: str
) -> None:
    """A child's (or one-shot caller's) receiver holds no inotify instance, only its bell."""
    child = make_mailbox(open=True, waker_factory=BELL_ONLY)
    inbox = client_inbox(parent)
    got = Collector()
    child.subscribe(inbox, got)
    assert child.wait_drained(10)
    assert child.wake_mode(inbox) == "bell"
    for i in range(20):  # each one alone: every delivery needs its own ring
        parent.publish(inbox, message(session_id, content=f"m{i}"))
        got.wait_for(i + 1)
    assert got.contents == [f"m{i}" for i in range(20)]
    assert not [p for p in os.listdir(f"/proc/{os.getpid()}/fd") if "inotify" in _link(p)]


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/{os.getpid()}/fd/{fd}")
    except OSError:
        return ""


def test_the_default_reader_of_an_opened_mailbox_is_woken_by_its_bell(
    parent: Mailbox, make_mailbox: MailboxFactory, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHEPHERD_WAKER", raising=False)
    child = make_mailbox(open=True)
    inbox = client_inbox(parent)
    got = Collector()
    child.subscribe(inbox, got)
    assert child.wait_drained(10)
    assert child.wake_mode(inbox) == "bell"
    parent.publish(inbox, message(session_id))
    got.wait_for(1)


@pytest.mark.parametrize("planted", ["symlink", "regular file"])
def test_a_thing_planted_as_the_bell_is_refused_and_reported(
    planted: str,
    parent: Mailbox,
    make_mailbox: MailboxFactory,
    session_id: str,
    tmp_path: Path,
) -> None:
    inbox = client_inbox(parent)
    bell = parent.inbox_path(inbox) / BELL_NAME
    os.unlink(bell)
    victim = tmp_path / "victim"
    if planted == "symlink":
        os.mkfifo(victim, 0o600)  # a FIFO of ours elsewhere: following the link would "work"
        bell.symlink_to(victim)
    else:
        bell.write_bytes(b"untouched")
    # a listener on the victim FIFO: a ring that followed the link would reach it
    listener = os.open(victim, os.O_RDWR | os.O_NONBLOCK) if planted == "symlink" else -1
    try:
        modes = Modes()
        child = make_mailbox(
            open=True,
            waker_factory=BELL_ONLY,
            settings=Settings(fallback_poll_s=0.05),
            on_wake_mode=modes,
        )
        got = Collector()
        child.subscribe(inbox, got)
        modes.wait_for((inbox, "polling"))  # reported: the inbox is only polled
        assert child.wake_mode(inbox) == "polling"
        parent.publish(inbox, message(session_id, content="found by the rescan"))
        got.wait_for(1)  # the fallback rescan still delivers it
        if planted == "symlink":
            assert os.path.islink(bell)
            with pytest.raises(BlockingIOError):
                os.read(listener, 1)  # nothing was written through the link
        else:
            assert bell.read_bytes() == b"untouched"  # neither written nor replaced
    finally:
        if listener >= 0:
            os.close(listener)


def test_a_refused_bell_falls_back_to_inotify_by_default(
    parent: Mailbox, make_mailbox: MailboxFactory, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHEPHERD_WAKER", raising=False)
    inbox = client_inbox(parent)
    bell = parent.inbox_path(inbox) / BELL_NAME
    os.unlink(bell)
    bell.write_bytes(b"")
    child = make_mailbox(open=True)
    got = Collector()
    child.subscribe(inbox, got)
    assert child.wait_drained(10)
    assert child.wake_mode(inbox) == "inotify"
    parent.publish(inbox, message(session_id))
    got.wait_for(1)


def test_a_bell_replaced_under_its_reader_is_noticed_and_reported(
    parent: Mailbox, make_mailbox: MailboxFactory, session_id: str
) -> None:
    inbox = client_inbox(parent)
    modes = Modes()
    child = make_mailbox(
        open=True,
        waker_factory=BELL_ONLY,
        settings=Settings(fallback_poll_s=0.05),
        on_wake_mode=modes,
    )
    got = Collector()
    child.subscribe(inbox, got)
    modes.wait_for((inbox, "bell"))
    bell = parent.inbox_path(inbox) / BELL_NAME
    os.unlink(bell)
    bell.write_bytes(b"")  # the reader still holds the old FIFO, which nobody rings any more
    modes.wait_for((inbox, "polling"))
    parent.publish(inbox, message(session_id))
    got.wait_for(1)


def test_a_missing_bell_is_made_by_its_reader(
    parent: Mailbox, make_mailbox: MailboxFactory, session_id: str
) -> None:
    """An inbox made before bells existed (or whose bell was removed) gets one."""
    inbox = client_inbox(parent)
    os.unlink(parent.inbox_path(inbox) / BELL_NAME)
    child = make_mailbox(open=True, waker_factory=BELL_ONLY)
    got = Collector()
    child.subscribe(inbox, got)
    assert child.wait_drained(10)
    assert child.wake_mode(inbox) == "bell"
    assert stat.S_ISFIFO(os.lstat(parent.inbox_path(inbox) / BELL_NAME).st_mode)
    parent.publish(inbox, message(session_id))
    got.wait_for(1)


def test_remove_inbox_removes_the_bell(
    parent: Mailbox, make_mailbox: MailboxFactory, session_id: str
) -> None:
    inbox = client_inbox(parent)
    child = make_mailbox(open=True, waker_factory=BELL_ONLY)
    got = Collector()
    subscription = child.subscribe(inbox, got)
    assert child.wait_drained(10)
    parent.publish(inbox, message(session_id))
    got.wait_for(1)
    subscription.cancel()
    assert child.wait_drained(10)
    child.remove_inbox(inbox)
    assert not os.path.lexists(parent.inbox_path(inbox))
    held = [_link(fd) for fd in os.listdir(f"/proc/{os.getpid()}/fd")]
    # neither the reader nor the publisher (a one-shot inbox's bell is not cached) holds it
    assert not [link for link in held if inbox in link]


def test_forgetting_a_bell_closes_its_cached_descriptor(tmp_path: Path) -> None:
    make_bell(tmp_path)
    reader, _ = _reader(tmp_path)
    ringer = BellRinger()
    try:
        assert ringer.ring(str(tmp_path))
        assert any(BELL_NAME in _link(fd) for fd in _fds() if int(fd) != reader)
        ringer.forget(str(tmp_path))
        assert not any(BELL_NAME in _link(fd) for fd in _fds() if int(fd) != reader)
    finally:
        ringer.close()
        os.close(reader)


def _fds() -> list[str]:
    return os.listdir(f"/proc/{os.getpid()}/fd")


def test_a_ring_never_fails_a_publish(parent: Mailbox, session_id: str) -> None:
    """Nobody listens, the bell is gone, or it is a directory: the envelope is still accepted."""
    inbox = client_inbox(parent)
    parent.publish(inbox, message(session_id))  # no reader: ENXIO
    os.unlink(parent.inbox_path(inbox) / BELL_NAME)
    parent.publish(inbox, message(session_id))  # no bell
    os.mkdir(parent.inbox_path(inbox) / BELL_NAME)
    parent.publish(inbox, message(session_id))  # a directory
    assert len(os.listdir(parent.inbox_path(inbox) / "new")) == 3


def test_a_cached_bell_whose_reader_went_away_is_opened_again(tmp_path: Path) -> None:
    make_bell(tmp_path)
    ringer = BellRinger()
    try:
        first, _ = _reader(tmp_path)
        assert ringer.ring(str(tmp_path))
        os.close(first)
        assert not ringer.ring(str(tmp_path))  # EPIPE on the cached one, then ENXIO
        second, _ = _reader(tmp_path)
        try:
            assert ringer.ring(str(tmp_path))
            assert os.read(second, 16) == b"\0"
        finally:
            os.close(second)
    finally:
        ringer.close()


def _reader(box: Path) -> tuple[int, os.stat_result]:
    fd = os.open(bell_path(box), os.O_RDWR | os.O_NONBLOCK)
    return fd, os.fstat(fd)


def test_the_ringer_keeps_a_bounded_number_of_bells_open(tmp_path: Path) -> None:
    boxes = [tmp_path / f"box{i}" for i in range(10)]
    readers = []
    for box in boxes:
        box.mkdir()
        make_bell(box)
        readers.append(_reader(box)[0])
    ringer = BellRinger(cache=3)
    try:
        before = len(os.listdir(f"/proc/{os.getpid()}/fd"))
        for box in boxes:
            assert ringer.ring(str(box))
        assert len(os.listdir(f"/proc/{os.getpid()}/fd")) - before == 3
        for fd in readers:
            assert os.read(fd, 16) == b"\0"
    finally:
        ringer.close()
        for fd in readers:
            os.close(fd)


def test_no_ring_is_lost_between_the_rescan_and_the_wait(tmp_path: Path) -> None:
    """The publish lands after the receiver's rescan listed new/ and before it waits again:
    the bell (emptied before that rescan) must still wake it, long before the 30 s rescan."""
    box = tmp_path / "box"
    new = box / "new"
    new.mkdir(parents=True)
    (box / "tmp").mkdir()
    make_bell(box)
    ringer = BellRinger()
    seen: list[str] = []
    cond = threading.Condition()
    rounds = 0

    def publish(i: int) -> None:
        name = envelope_file_name(new_id(IdKind.MESSAGE), i)
        (box / "tmp" / name).write_text(str(i))
        os.rename(box / "tmp" / name, new / name)
        ringer.ring(str(box))

    def drain(key: str) -> bool:
        nonlocal rounds
        names = sorted(os.listdir(new))  # the rescan
        with cond:
            for name in names:
                seen.append((new / name).read_text())
                os.unlink(new / name)
            rounds += 1
            if rounds <= 5:
                publish(rounds)  # after the listing, before the receiver waits again
            cond.notify_all()
        return True

    receiver = Receiver(drain, BELL_ONLY, fallback_s=30.0)
    try:
        receiver.watch("box", str(new))
        with cond:
            assert cond.wait_for(lambda: len(seen) >= 5, 10), seen
        assert seen[:5] == ["1", "2", "3", "4", "5"]
        assert receiver.mode_of("box") == "bell"
    finally:
        receiver.close()
        ringer.close()


def test_a_wake_only_reads_the_bells_that_rang(tmp_path: Path) -> None:
    dirs = []
    for name in ("a", "b"):
        (tmp_path / name / "new").mkdir(parents=True)
        dirs.append(str(tmp_path / name / "new"))
    interrupt = InterruptEvent()
    waker = BellWaker(dirs, interrupt, inotify="never")
    ringer = BellRinger()
    try:
        assert waker.wait(20).timed_out
        ringer.ring(str(tmp_path / "b"))
        ringer.ring(str(tmp_path / "b"))
        assert waker.wait(5000).dirs == {dirs[1]}
        assert waker.wait(20).timed_out  # both rings were read at once: no second wake
    finally:
        ringer.close()
        waker.close()
        interrupt.close()


def test_the_parent_inbox_has_a_bell_too(parent: Mailbox) -> None:
    parent.ensure_inbox(PARENT_INBOX)
    assert stat.S_ISFIFO(os.lstat(parent.inbox_path(PARENT_INBOX) / BELL_NAME).st_mode)


def test_a_polling_receiver_builds_a_real_waker_again(tmp_path: Path) -> None:
    """Polling is not for ever: an inotify instance freed or a bell repaired is used again."""
    new = tmp_path / "box" / "new"
    new.mkdir(parents=True)
    attempts: list[int] = []

    def flaky(dirs: Sequence[str], interrupt: threading.Event) -> Waker:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise OSError(errno.EMFILE, "no inotify instance left")
        return BELL_ONLY(dirs, interrupt)

    modes = Modes()
    receiver = Receiver(
        lambda key: True, flaky, fallback_s=0.02, on_mode=modes, rebuild_degraded_s=0.05
    )
    try:
        receiver.watch("box", str(new))
        modes.wait_for(("box", "polling"))
        modes.wait_for(("box", "bell"))
        assert receiver.mode_of("box") == "bell"
    finally:
        receiver.close()


def test_a_parent_without_an_inotify_instance_is_woken_by_its_bell(
    parent: Mailbox,
    make_mailbox: MailboxFactory,
    session_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session parent watches its inbox with inotify and its bell: with no instance left
    (EMFILE), the bell alone keeps it at millisecond delivery, and that is what it reports."""

    def exhausted() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(mailbox_bell, "InotifyWatch", exhausted)
    monkeypatch.delenv("SHEPHERD_WAKER", raising=False)
    modes = Modes()
    late = make_mailbox(on_wake_mode=modes)  # created: the parent's default waker
    got = Collector()
    late.subscribe(PARENT_INBOX, got)
    modes.wait_for((PARENT_INBOX, "bell"))
    parent.publish(PARENT_INBOX, message(session_id))
    got.wait_for(1)
