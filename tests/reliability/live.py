"""Helpers for the tests against live processes (real bridges, real mailbox), shared by the
reliability and the process tests.

Nothing here sleeps. Every wait blocks on an event, bounded by a timeout:

- a process exiting: a pidfd becoming readable (:func:`wait_gone`);
- a file created in, or renamed into, a directory: inotify, through the mailbox's own
  :class:`~actors.transports.mailbox.inotify.InotifyWaker` (:class:`Changes`), which can also be
  nudged by in-process news (a receipt arriving);
- the supervisor's lifecycle (a task waiting, a process idle or exited): the broker's story
  tap, kept under a condition (:class:`Story`).
"""

from __future__ import annotations

import json
import math
import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from actors.transports.mailbox.inotify import InotifyWaker
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.wakers import InterruptEvent, PollingWaker

__all__ = [
    "PLANNER",
    "SCOUT",
    "Changes",
    "Live",
    "Story",
    "pids_with_env",
    "process_running",
    "session_pids",
    "wait_for_files",
    "wait_gone",
    "wait_terminated",
    "write_script",
]

T = TypeVar("T")

#: asks the planner a question and finishes with its answer
SCOUT = {
    "steps": [
        {"await": "task"},
        {"message": {"to": "planner", "text": "which module first?", "expects_reply": True}},
        {"await": "reply"},
        {"done": {"status": "completed", "summary": "explored {last}"}},
        {"await": "any"},
    ]
}
#: answers the scout's question only after the test says "go" (no race with the test's calls)
PLANNER = {
    "steps": [
        {"await": "task"},
        {"await": "message"},  # the scout's question
        {"await": "message"},  # the test's go-ahead
        {"reply": {"text": "src/core"}},
        {"await": "any"},
    ]
}


def file_mailbox(sup: Supervisor) -> Mailbox:
    """``sup``'s file mailbox (its inboxes are directories a test can look into)."""
    assert isinstance(sup.mailbox, Mailbox), f"not on the file mailbox: {sup.mailbox!r}"
    return sup.mailbox


def write_script(directory: Path, name: str, script: dict[str, Any]) -> str:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(script))
    return str(path)


# ---------------------------------------------------------------------- processes


def pids_with_env(*assignments: str) -> list[int]:
    """Live processes whose environment holds every ``NAME=value`` given (exact entries);
    zombies are not alive."""
    wanted = [a.encode() for a in assignments]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if all(w in environ for w in wanted) and ") Z " not in stat:
            found.append(int(entry))
    return found


def session_pids(session_id: str, agent_id: str | None = None) -> list[int]:
    """Live processes whose environment names this session (bridges and whatever they ran),
    and with ``agent_id`` this agent of it."""
    agent = [f"SHEPHERD_AGENT_ID={agent_id}"] if agent_id is not None else []
    return pids_with_env(f"SHEPHERD_SESSION_ID={session_id}", *agent)


def _wait_exited(pids: Iterable[int], deadline: float) -> bool:
    """Block until every process in ``pids`` has exited (its pidfd is readable: a zombie
    counts), or until ``deadline``; True if they all did."""
    poller = select.poll()
    fds: list[int] = []
    try:
        for pid in set(pids):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:  # already gone (and reaped)
                continue
            fds.append(fd)
            poller.register(fd, select.POLLIN)
        running = len(fds)
        while running:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for fd, _ in poller.poll(math.ceil(remaining * 1000)):
                poller.unregister(fd)
                running -= 1
        return True
    finally:
        for fd in fds:
            os.close(fd)


def wait_terminated(pid: int, timeout: float = 5.0) -> bool:
    """Wait until the process ``pid`` has terminated (a zombie has); False on timeout."""
    return _wait_exited([pid], time.monotonic() + timeout)


def process_running(pid: int) -> bool:
    """False once the process has terminated (a zombie has, too)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(find: Callable[[], Iterable[int]], timeout: float = 20.0) -> bool:
    """Wait until ``find()`` (live pids) finds none: wait for the exit of every process it
    finds, then ask again (one may have started meanwhile). False on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        pids = list(find())
        if not pids:
            return True
        if not _wait_exited(pids, deadline):
            return not list(find())


# ---------------------------------------------------------------------- files


class Changes:
    """Wakes a waiting test when a file is created in (or renamed into) one of ``dirs``, or
    when :meth:`nudge` is called (in-process news, e.g. a receipt). The watch exists from
    construction, so nothing that happens after it can be missed."""

    #: without inotify (refused: e.g. the user's inotify instances are all in use by other
    #: processes), the predicate is checked again at this pace, as the mailbox falls back to
    #: rescanning
    POLL_MS = 50

    def __init__(self, *dirs: Path) -> None:
        self._nudged = InterruptEvent()
        self._step_ms: int | None = None
        self._waker: InotifyWaker | PollingWaker
        try:
            self._waker = InotifyWaker([str(d) for d in dirs], self._nudged)
        except OSError:
            self._waker, self._step_ms = PollingWaker([], self._nudged), self.POLL_MS
        except BaseException:
            self._nudged.close()
            raise

    def nudge(self, *_: object) -> None:
        self._nudged.set()

    def wait_until(self, predicate: Callable[[], T], timeout: float) -> T | None:
        """Check ``predicate`` now and after every change, until it is truthy (its value is
        returned) or ``timeout`` passes (None)."""
        deadline = time.monotonic() + timeout
        while True:
            self._nudged.clear()  # before the check: a nudge from now on wakes the wait
            found = predicate()
            if found:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            wait_ms = math.ceil(remaining * 1000)
            self._waker.wait(wait_ms if self._step_ms is None else min(wait_ms, self._step_ms))

    def close(self) -> None:
        self._waker.close()
        self._nudged.close()

    def __enter__(self) -> Changes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for_files(directory: Path, predicate: Callable[[], T], timeout: float) -> T | None:
    """Wait until ``predicate`` is truthy, checking it again whenever a file is created in or
    renamed into ``directory``."""
    with Changes(directory) as changes:
        return changes.wait_until(predicate, timeout)


# ---------------------------------------------------------------------- a live supervisor


class Story:
    """The supervisor's lifecycle lines (its ``tap``: ``scout: task T waiting ...``,
    ``mallory: process idle``), waited on with a Condition; ``timeout`` is the default wait."""

    def __init__(self, timeout: float = 20.0) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._timeout = timeout

    def __call__(self, text: str) -> None:
        with self._cond:
            self.lines.append(text)
            self._cond.notify_all()

    def wait(self, text: str, *, after: int = 0, timeout: float | None = None) -> int:
        """Index of the first line at or after ``after`` that contains ``text``."""
        found: list[int] = []

        def check() -> bool:
            found[:] = [i for i in range(after, len(self.lines)) if text in self.lines[i]][:1]
            return bool(found)

        with self._cond:
            if not self._cond.wait_for(check, self._timeout if timeout is None else timeout):
                raise AssertionError(f"no story line {text!r} after #{after}: {self.lines}")
        return found[0]


class Live(NamedTuple):
    """An in-process supervisor, what it notified, and its lifecycle story."""

    sup: Supervisor
    sink: CollectingSink
    story: Story
