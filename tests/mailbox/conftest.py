"""Fixtures for the mailbox tests: a mailbox factory that always closes, collectors that wait
on a Condition (never a sleep), and helpers to build envelopes and plant hostile files."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import ShepherdError
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope, encode_envelope

WAIT_S = 10.0


def new_id(kind: IdKind) -> str:
    return make_id(kind, secrets.token_hex(8))


def message(
    session_id: str,
    *,
    content: str = "hello",
    sender_id: str | None = None,
    target_id: str = PARENT_ID,
    message_id: str | None = None,
    capability: str = "",
) -> MessageEnvelope:
    return MessageEnvelope(
        message_id=message_id or new_id(IdKind.MESSAGE),
        session_id=session_id,
        sender_id=sender_id or AGENT,
        target_id=target_id,
        created_at=0.0,
        capability=capability,
        content=content,
    )


AGENT = make_id(IdKind.AGENT, "a1a1a1a1")
OTHER_AGENT = make_id(IdKind.AGENT, "b2b2b2b2")


class Collector:
    """A handler that records envelopes; tests wait for a count with a timeout."""

    def __init__(self, fail_on: Callable[[AnyEnvelope], bool] | None = None) -> None:
        self.items: list[AnyEnvelope] = []
        self.threads: set[str] = set()
        self._cond = threading.Condition()
        self._fail_on = fail_on

    def __call__(self, envelope: AnyEnvelope) -> None:
        with self._cond:
            self.threads.add(threading.current_thread().name)
            if self._fail_on is not None and self._fail_on(envelope):
                self._cond.notify_all()
                raise RuntimeError(f"handler refuses {envelope.message_id}")
            self.items.append(envelope)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = WAIT_S) -> list[AnyEnvelope]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.items) >= count, timeout)
            assert ok, f"expected {count} deliveries, got {len(self.items)}"
            return list(self.items)

    @property
    def contents(self) -> list[str]:
        with self._cond:
            return [getattr(item, "content", "") for item in self.items]


class Rejections:
    """An ``on_reject`` callback that records (inbox, envelope, error); ``authenticated``
    records the flag of each, in the same order."""

    def __init__(self) -> None:
        self.items: list[tuple[str, AnyEnvelope | None, ShepherdError]] = []
        self.authenticated: list[bool] = []
        self._cond = threading.Condition()

    def __call__(
        self, inbox: str, envelope: AnyEnvelope | None, error: ShepherdError, authenticated: bool
    ) -> None:
        with self._cond:
            self.items.append((inbox, envelope, error))
            self.authenticated.append(authenticated)
            self._cond.notify_all()

    def wait_for(
        self, count: int, timeout: float = WAIT_S
    ) -> list[tuple[str, AnyEnvelope | None, ShepherdError]]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.items) >= count, timeout)
            assert ok, f"expected {count} rejections, got {len(self.items)}"
            return list(self.items)


MailboxFactory = Callable[..., Mailbox]


@pytest.fixture
def session_id() -> str:
    return new_id(IdKind.SESSION)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "session"


@pytest.fixture
def make_mailbox(root: Path, session_id: str) -> Iterator[MailboxFactory]:
    """``make_mailbox(**kwargs)`` creates (or, with ``open=True``, opens) a mailbox on ``root``;
    every one is closed at teardown. The fallback rescan is slow (30 s) by default, so a test
    that passes within its wait proves the watcher woke the receiver."""
    made: list[Mailbox] = []

    def make(*, open: bool = False, settings: Settings | None = None, **kwargs: Any) -> Mailbox:
        kwargs.setdefault("session_id", session_id)
        factory = Mailbox.open if open else Mailbox.create
        mailbox = factory(root, settings=settings or Settings(fallback_poll_s=30.0), **kwargs)
        made.append(mailbox)
        return mailbox

    yield make
    for mailbox in made:
        mailbox.close()


@pytest.fixture
def rejections() -> Rejections:
    return Rejections()


@pytest.fixture
def parent(make_mailbox: MailboxFactory, rejections: Rejections) -> Mailbox:
    """A parent mailbox with the parent inbox and one agent inbox."""
    mailbox = make_mailbox(on_reject=rejections)
    mailbox.ensure_inbox(PARENT_INBOX)
    mailbox.ensure_inbox(AGENT)
    return mailbox


def plant(mailbox: Mailbox, inbox: str, name: str, data: bytes) -> Path:
    """Put a file into ``new/`` the way a hostile writer would, but atomically (so the test
    does not race the receiver reading a half-written plant)."""
    staging = mailbox.inbox_path(inbox) / "tmp" / f"plant-{secrets.token_hex(4)}"
    staging.write_bytes(data)
    target = mailbox.inbox_path(inbox) / "new" / name
    os.rename(staging, target)
    return target


def file_name(message_id: str, stamp: int = 1) -> str:
    return f"{stamp:020d}.{os.getpid()}.1.{message_id}.json"


def planted_envelope(envelope: MessageEnvelope) -> tuple[str, bytes]:
    return file_name(envelope.message_id), encode_envelope(envelope)


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))
