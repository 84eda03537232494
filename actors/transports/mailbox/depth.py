"""How many unread files an inbox holds, as ``publish`` checks it against ``max_queue_depth``.

Rules:
- A publish into an inbox whose ``new/`` holds ``max_queue_depth`` files or more is refused
  (``inbox_full``); the check never lists ``new/`` on the publish path in the steady state.
- On a memory filesystem (tmpfs, where session mailboxes live: ``default_runtime_dir``) the
  kernel keeps the count: a tmpfs directory's size is 20 bytes per entry, ``.`` and ``..``
  included, and it allocates no blocks. The ``lstat`` of ``new/`` that every publish makes
  anyway (it must be a real directory) gives the depth: exact at that instant, for every
  publisher of every process at once, and unable to drift (nothing of ours counts; a crash
  loses no count).
- Elsewhere the depth is counted incrementally: one listing, then each of our own publishes
  adds one; the count is re-synced by listing ``new/`` again after :data:`RESYNC_EVERY` of our
  own publishes (others publish, the receiver drains: a count drifts both ways), and before
  refusing (a refusal is never made on a stale count). Under ``P`` concurrent publishers the
  limit can be overshot by at most ``P * RESYNC_EVERY`` files.
- Which way an inbox is counted is decided once per inbox and process, on the inbox's own
  directory, which nobody changes once it is made (``tmp``, ``new``, ``cur``, ``bell``): the
  size counts only if that directory allocates no block and its size is exactly 20 bytes per
  entry, ``.`` and ``..`` included (ext4's is a block, btrfs's twice the names' lengths, XFS's
  a short-form record: none of them matches).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from protocol.core.errors import InboxFull

__all__ = ["BOGO_DIRENT_SIZE", "RESYNC_EVERY", "InboxDepth"]

#: the size a tmpfs directory gains per entry (``BOGO_DIRENT_SIZE`` in the kernel's shmem.c)
BOGO_DIRENT_SIZE = 20
#: our own publishes before a counted (not tmpfs) depth is listed again
RESYNC_EVERY = 32


@dataclass(slots=True)
class _Count:
    sized: bool  # the directory's size counts its entries (tmpfs)
    counted: int = -1  # files listed at the last re-sync (-1: never listed)
    since: int = 0  # our own publishes since that listing


def _by_size(st: os.stat_result) -> int:
    return st.st_size // BOGO_DIRENT_SIZE - 2


def size_counts(box_dir: str, st: os.stat_result) -> bool:
    """True if ``box_dir`` (whose ``lstat`` is ``st``) keeps its entry count in its size."""
    if st.st_blocks != 0 or st.st_size % BOGO_DIRENT_SIZE:
        return False
    try:
        entries = len(os.listdir(box_dir))
    except OSError:
        return False
    expected = BOGO_DIRENT_SIZE * (entries + 2)
    return st.st_size == expected and os.lstat(box_dir).st_size == expected


class InboxDepth:
    """The depth of each inbox this process publishes into (module rules). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, _Count] = {}
        self.listings = 0  # how many times a new/ was listed (for tests and benchmarks)

    def check(
        self,
        inbox: str,
        box_dir: str,
        box_st: os.stat_result,
        new_dir: str,
        new_st: os.stat_result,
        limit: int,
    ) -> None:
        """Raise :class:`InboxFull` if ``new/`` holds ``limit`` or more files. ``box_st`` and
        ``new_st`` are the ``lstat`` of the inbox's directory and of its ``new/``."""
        with self._lock:
            count = self._counts.get(inbox)
        if count is None:
            count = _Count(sized=size_counts(box_dir, box_st))
            with self._lock:
                count = self._counts.setdefault(inbox, count)
        if count.sized:
            depth = _by_size(new_st)
        else:
            with self._lock:
                depth = count.counted + count.since
                stale = count.counted < 0 or count.since >= RESYNC_EVERY
            if stale or depth >= limit:  # never refuse on a stale count
                depth = self._resync(new_dir, count)
        if depth >= limit:
            raise InboxFull(
                f"inbox {inbox!r} already holds {depth} unread envelopes (limit {limit})"
            )

    def published(self, inbox: str) -> None:
        """One more file of ours in ``inbox``'s ``new/``."""
        with self._lock:
            count = self._counts.get(inbox)
            if count is not None:
                count.since += 1

    def forget(self, inbox: str) -> None:
        with self._lock:
            self._counts.pop(inbox, None)

    def _resync(self, new_dir: str, count: _Count) -> int:
        listed = 0
        with os.scandir(new_dir) as scan:
            for _ in scan:
                listed += 1
        with self._lock:
            self.listings += 1
            count.counted, count.since = listed, 0
        return listed
