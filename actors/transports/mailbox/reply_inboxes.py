"""One-shot reply inboxes: the inbox a CLI call (``shepherd ...``, the MCP server's tool calls)
or a child command (``shepherd-child message|done``) creates for its one answer.

Rules:
- The owner creates the inbox and, before publishing anything that names it, takes an
  exclusive ``flock`` on the inbox's directory, held until the call has ended. The lock is the
  proof that the owner is alive: the kernel drops it when the process ends, however it ends
  (SIGKILL included), so there is no pid file and no pid reuse to get wrong.
- When the call ends (answered, refused or timed out) the owner stops its mailbox receiver
  *first*, so an answer that was handed over has also been moved from ``new/`` to ``cur/``,
  then removes the inbox, then drops the lock. Removing before the receiver stopped lost the
  race with the receiver's rename about half the time, and the inbox stayed behind.
- What is left anyway (an owner killed mid-call, or an answer that came after the owner gave
  up) is removed by the session parent: every :data:`SWEEP_EVERY_S`, each
  ``shepherd-message-*`` inbox at least :data:`MIN_AGE_S` old whose lock can be taken. The age
  only covers the moment between the owner's ``mkdir`` and its ``flock``. So a leftover lives
  at most ``MIN_AGE_S + SWEEP_EVERY_S`` after its owner ended, and a call of any length (a
  ``wait`` of hours) keeps its inbox while its owner runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from actors.runtime.clock import Clock, TimerHandle
from actors.runtime.log import logger
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import SessionUnavailable, ShepherdError

__all__ = [
    "MIN_AGE_S",
    "ONE_SHOT_PREFIX",
    "SWEEP_EVERY_S",
    "ReplyInbox",
    "ReplyInboxSweeper",
    "sweep_reply_inboxes",
    "unread_answers",
]

#: one-shot inboxes are named by a message id; agents' and the parent's never are
ONE_SHOT_PREFIX = "shepherd-message-"
#: a leftover must be this old (seconds since its directory was made) to be swept
MIN_AGE_S = 60.0
#: how often the session parent sweeps
SWEEP_EVERY_S = 30.0

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ReplyInbox:
    """The owner's side: create ``inbox/<owner>`` and hold its lock; :meth:`remove` at the end.

    Use ``mailbox.close()`` before :meth:`remove` (see the module rules)."""

    def __init__(self, mailbox: Mailbox, owner: str) -> None:
        self._mailbox = mailbox
        self.owner = owner
        path = mailbox.ensure_inbox(owner)
        self._fd = os.open(path, _DIR_FLAGS)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._fd)
            # a fresh random id held by someone else: nothing sane can go on
            raise SessionUnavailable(f"reply inbox {owner} is locked by another process") from exc

    def remove(self) -> None:
        """Remove the inbox and drop the lock. Never raises: what cannot be removed now (an
        answer that arrived after the call gave up) is the parent's sweep's to remove."""
        try:
            self._mailbox.remove_inbox(self.owner)
        except (ShepherdError, OSError) as exc:
            logger.bind(inbox=self.owner).debug("reply inbox left for the sweep: {}", exc)
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _owner_gone(path: str) -> int | None:
    """An fd holding ``path``'s lock if its owner is gone (the caller closes it), else None."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None  # gone already, or not a plain directory (a planted link is not ours)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            logger.warning("reply inbox {}: cannot test its lock: {}", path, exc)
        return None  # its owner still runs
    return fd


def sweep_reply_inboxes(inbox_root: Path, now_s: float, min_age_s: float = MIN_AGE_S) -> list[str]:
    """Remove the one-shot inboxes under ``inbox_root`` made at least ``min_age_s`` before
    ``now_s`` whose owner no longer holds their lock; return their names."""
    removed: list[str] = []
    try:
        scan = os.scandir(inbox_root)
    except OSError:
        return removed
    with scan:
        entries = [e for e in scan if e.name.startswith(ONE_SHOT_PREFIX)]
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or now_s - st.st_mtime < min_age_s:
            continue
        fd = _owner_gone(entry.path)
        if fd is None:
            continue
        try:
            unread = _count(os.path.join(entry.path, "new"))
            shutil.rmtree(entry.path)  # fd-based: never follows a link planted inside
        except OSError as exc:
            logger.warning("reply inbox {}: cannot remove it: {}", entry.name, exc)
            continue
        finally:
            os.close(fd)
        removed.append(entry.name)
        # an unread answer was for a call whose caller is gone: nobody can read it any more
        logger.info("removed the reply inbox {} of an ended call ({} unread)", entry.name, unread)
    return removed


def unread_answers(inbox_root: Path) -> int:
    """One-shot inboxes holding an unread answer whose owner still runs (it holds the lock):
    what a shutdown waits for before it removes the mailbox."""
    waiting = 0
    try:
        scan = os.scandir(inbox_root)
    except OSError:
        return 0
    with scan:
        entries = [e for e in scan if e.name.startswith(ONE_SHOT_PREFIX)]
    for entry in entries:
        if not _count(os.path.join(entry.path, "new")):
            continue
        fd = _owner_gone(entry.path)
        if fd is None:
            waiting += 1  # its owner runs and has not read its answer yet
        else:
            os.close(fd)
    return waiting


def _count(directory: str) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(directory))
    return 0


class ReplyInboxSweeper:
    """The session parent's sweep: every ``every_s`` on ``clock``, run :func:`sweep_reply_inboxes`
    through ``submit`` (the parent's call pool: never on the clock's timer thread)."""

    def __init__(
        self,
        mailbox: Mailbox | Path,
        clock: Clock,
        submit: Callable[[Callable[[], object]], object],
        *,
        every_s: float = SWEEP_EVERY_S,
        min_age_s: float = MIN_AGE_S,
        sweep: Callable[[], list[str]] | None = None,
    ) -> None:
        """``mailbox``: the mailbox, or its root directory; ``sweep``: another transport's own
        sweep (NATS: :func:`actors.transports.nats.replies.sweep`), run on the same schedule
        instead."""
        root = mailbox.root if isinstance(mailbox, Mailbox) else mailbox
        self._inbox_root = root / "inbox"
        self._other = sweep
        self._clock = clock
        self._submit = submit
        self._every_s = every_s
        self._min_age_s = min_age_s
        self._lock = threading.Lock()
        self._timer: TimerHandle | None = None
        self._stopped = False
        self.removed = 0  # inboxes removed so far

    def start(self) -> None:
        with self._lock:
            if not self._stopped and self._timer is None:
                self._timer = self._clock.call_later(self._every_s, self._tick)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _tick(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._timer = self._clock.call_later(self._every_s, self._tick)
        with contextlib.suppress(RuntimeError):  # the pool is shutting down: so is the session
            self._submit(self.sweep)

    def sweep(self) -> list[str]:
        """One sweep now; the names removed."""
        if self._other is not None:
            try:
                removed = self._other()
            except ShepherdError as exc:  # a server out of reach: the next sweep tries again
                logger.warning("reply inboxes not swept: {}", exc.message)
                removed = []
        else:
            removed = sweep_reply_inboxes(self._inbox_root, self._clock.now(), self._min_age_s)
        with self._lock:
            self.removed += len(removed)
        return removed
