"""The inbox depth as publish checks it (actors/transports/mailbox/depth.py): read from the
directory's size on tmpfs, else counted incrementally and re-synced; both under concurrent
publishers; and the producers' backoff (actors/transports/mailbox/backoff.py)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox import depth as depth_module
from actors.transports.mailbox.backoff import FIRST_S, LONGEST_S, Backoff
from actors.transports.mailbox.depth import RESYNC_EVERY, size_counts
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import InboxFull
from protocol.core.ids import IdKind
from protocol.records.settings import Settings

from .conftest import WAIT_S, Collector, listing, message, new_id

SHM = Path("/dev/shm")


@pytest.fixture(params=["tmpfs", "counted"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A mailbox root on tmpfs (the size counts) and one where the depth is counted: the
    counted way is forced, so it is tested on any filesystem."""
    if request.param == "tmpfs":
        if not os.access(SHM, os.W_OK):
            pytest.fail("/dev/shm is not writable: the tmpfs depth cannot be tested here")
        base = Path(tempfile.mkdtemp(prefix="shepherd-depth-", dir=SHM))
        try:
            yield "tmpfs", base / "session"
        finally:
            shutil.rmtree(base, ignore_errors=True)
    else:
        mp = pytest.MonkeyPatch()
        mp.setattr(depth_module, "size_counts", lambda box_dir, st: False)
        try:
            yield "counted", tmp_path / "session"
        finally:
            mp.undo()


def _mailbox(root: Path, session_id: str, limit: int) -> Mailbox:
    mailbox = Mailbox.create(root, session_id, Settings(max_queue_depth=limit, fallback_poll_s=30))
    mailbox.ensure_inbox(PARENT_INBOX)
    return mailbox


def test_the_size_of_a_tmpfs_inbox_counts_its_entries_and_other_directories_do_not(
    tmp_path: Path,
) -> None:
    base = Path(tempfile.mkdtemp(prefix="shepherd-depth-", dir=SHM))
    try:
        box = base / "box"
        box.mkdir()
        for name in ("tmp", "new", "cur"):
            (box / name).mkdir()
        (box / "bell").write_bytes(b"")
        assert size_counts(str(box), os.lstat(box))
    finally:
        shutil.rmtree(base)
    box = tmp_path / "box"  # the test's own directory: not tmpfs here (a block is allocated)
    box.mkdir()
    (box / "new").mkdir()
    st = os.lstat(box)
    if st.st_blocks:
        assert not size_counts(str(box), st)


def test_on_tmpfs_publish_never_lists_new_and_the_limit_is_exact() -> None:
    base = Path(tempfile.mkdtemp(prefix="shepherd-depth-", dir=SHM))
    session_id = new_id_session()
    try:
        mailbox = _mailbox(base / "session", session_id, limit=300)
        for i in range(300):
            mailbox.publish(PARENT_INBOX, message(session_id, content=str(i)))
        with pytest.raises(InboxFull, match="already holds 300 unread envelopes"):
            mailbox.publish(PARENT_INBOX, message(session_id))
        # another process's files count the same: planted files are seen at once
        assert mailbox._depth.listings == 0
        new = mailbox.inbox_path(PARENT_INBOX) / "new"
        os.unlink(new / listing(new)[0])  # drained by someone: room for exactly one
        mailbox.publish(PARENT_INBOX, message(session_id))
        with pytest.raises(InboxFull):
            mailbox.publish(PARENT_INBOX, message(session_id))
        assert mailbox._depth.listings == 0
        mailbox.close()
    finally:
        shutil.rmtree(base)


def new_id_session() -> str:
    return new_id(IdKind.SESSION)


def test_counted_depth_lists_new_once_per_resync_and_never_refuses_on_a_stale_count(
    where: tuple[str, Path],
) -> None:
    kind, root = where
    session_id = new_id_session()
    mailbox = _mailbox(root, session_id, limit=100)
    try:
        for i in range(100):
            mailbox.publish(PARENT_INBOX, message(session_id, content=str(i)))
        listed = mailbox._depth.listings
        if kind == "tmpfs":
            assert listed == 0
        else:  # one listing at the first publish, then one per RESYNC_EVERY of ours
            assert listed == 1 + (100 - 1) // RESYNC_EVERY
        with pytest.raises(InboxFull, match="already holds 100 unread envelopes"):
            mailbox.publish(PARENT_INBOX, message(session_id))
        # the receiver drains: a count that says full is re-synced before it refuses
        collector = Collector()
        mailbox.subscribe(PARENT_INBOX, collector)
        collector.wait_for(100)
        assert mailbox.wait_drained(WAIT_S)
        mailbox.publish(PARENT_INBOX, message(session_id, content="room again"))
        collector.wait_for(101)
    finally:
        mailbox.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_publishers_overshoot_the_limit_by_a_bounded_amount_and_lose_nothing(
    where: tuple[str, Path], seed: int
) -> None:
    """Several threads, each with its own Mailbox (as separate processes would have), publish
    into one inbox that nobody drains until they are all refused; some files are taken away
    meanwhile (a receiver). The inbox never holds more than the limit plus the bound of the
    way it is counted (tmpfs: the publishes in flight, fewer than one per publisher; counted:
    RESYNC_EVERY per publisher), and every accepted publish is in new/ or was taken."""
    kind, root = where
    rng = random.Random(seed)
    session_id = new_id_session()
    limit, publishers = 60, 4
    first = _mailbox(root, session_id, limit)
    settings = Settings(max_queue_depth=limit)
    boxes = [first] + [Mailbox.open(root, session_id, settings) for _ in range(publishers - 1)]
    new = first.inbox_path(PARENT_INBOX) / "new"
    accepted: list[list[str]] = [[] for _ in boxes]
    taken: list[str] = []
    peak = 0
    stop = threading.Event()
    lock = threading.Lock()

    def publish(index: int, box: Mailbox, pause: float) -> None:
        refusals = 0
        while refusals < 20 and len(accepted[index]) < 300:
            envelope = message(session_id)
            try:
                box.publish(PARENT_INBOX, envelope)
            except InboxFull:
                refusals += 1
                continue
            accepted[index].append(envelope.message_id)
            if pause:
                stop.wait(pause)

    def take() -> None:
        nonlocal peak
        while not stop.is_set():
            names = listing(new)
            with lock:
                peak = max(peak, len(names))
            for name in names[: rng.randint(0, 3)]:
                try:
                    os.unlink(new / name)
                except FileNotFoundError:
                    continue
                taken.append(name.split(".")[3])
            stop.wait(0.0005)

    threads = [
        threading.Thread(target=publish, args=(i, box, rng.choice([0.0, 0.0001])))
        for i, box in enumerate(boxes)
    ]
    taker = threading.Thread(target=take)
    taker.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    stop.set()
    taker.join(60)
    try:
        left = {name.split(".")[3] for name in listing(new)}
        every = {message_id for mine in accepted for message_id in mine}
        assert every == left | set(taken), "an accepted publish is missing"
        bound = publishers if kind == "tmpfs" else publishers * RESYNC_EVERY
        assert max(peak, len(left)) <= limit + bound
    finally:
        for box in boxes:
            box.close()


# ---------------------------------------------------------------------- backoff


def test_the_backoff_doubles_with_jitter_up_to_its_ceiling_and_starts_over() -> None:
    backoff = Backoff(rng=random.Random(7))
    waits = [backoff.next() for _ in range(12)]
    ceilings = [min(FIRST_S * 2**i, LONGEST_S) for i in range(12)]
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling
    assert backoff.refusals == 12 and backoff.waiting
    backoff.reset()
    assert not backoff.waiting and backoff.refusals == 0
    assert FIRST_S / 2 <= backoff.next() <= FIRST_S


def test_a_producer_refused_for_a_while_makes_a_bounded_number_of_attempts() -> None:
    """No busy loop: against an inbox that stays full for 10 s of (virtual) time, a producer
    on the schedule makes at most log2(LONGEST/FIRST) + 1 + 2 * T / LONGEST attempts."""
    import math

    horizon = 10.0
    for seed in range(20):
        backoff = Backoff(rng=random.Random(seed))
        now, attempts = 0.0, 0
        while now < horizon:
            attempts += 1  # refused
            now += backoff.next()
        bound = math.log2(LONGEST_S / FIRST_S) + 1 + 2 * horizon / LONGEST_S
        assert attempts <= bound
        assert attempts >= horizon / LONGEST_S  # and it keeps trying: never longer than the cap


def test_refusals_desynchronise_producers() -> None:
    """Producers refused together come back at different times."""
    backoffs = [Backoff(rng=random.Random(seed)) for seed in range(8)]
    for _ in range(6):
        waits = [b.next() for b in backoffs]
    assert len({round(w, 6) for w in waits}) == len(waits)
