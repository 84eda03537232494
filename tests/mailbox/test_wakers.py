"""The wakers behave the same behind the Waker protocol: files added wake them, an interrupt
wakes them at once, nothing wakes them spuriously, and a mailbox works end to end on each;
and each kind of process gets the waker it should (the doorbell itself: test_bells.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from actors.transports.mailbox.bell import BellWaker, bell_waker, default_waker
from actors.transports.mailbox.inotify import InotifyWaker, inotify_available, inotify_waker
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.wakers import (
    InterruptEvent,
    PollingWaker,
    WakerFactory,
    WatchfilesWaker,
    watchfiles_waker,
)
from protocol.core.ids import IdKind, make_id
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope

#: inotify exists on Linux only; elsewhere the watchfiles waker is the default, and its cases
#: below still run. On Linux (CI) nothing here is skipped.
LINUX_ONLY = pytest.mark.skipif(not inotify_available(), reason="inotify exists on Linux only")

FACTORIES: dict[str, WakerFactory] = {
    "inotify": inotify_waker(),
    "watchfiles": watchfiles_waker(debounce_ms=10, step_ms=1),
    "bell+inotify": bell_waker(inotify="always"),
}
NAMES = [
    pytest.param("inotify", marks=LINUX_ONLY),
    "watchfiles",
    pytest.param("bell+inotify", marks=LINUX_ONLY),
]


@pytest.mark.parametrize("name", NAMES)
def test_a_renamed_in_file_wakes_the_waker(name: str, tmp_path: Path) -> None:
    new = tmp_path / "new"
    new.mkdir()
    interrupt = InterruptEvent()
    waker = FACTORIES[name]([str(new)], interrupt)
    try:
        assert waker.wait(20).timed_out  # nothing happened: no spurious wake
        (tmp_path / "x.tmp").write_text("{}")
        os.rename(tmp_path / "x.tmp", new / "x.json")
        wake = waker.wait(5000)
        assert str(new) in wake.dirs
    finally:
        waker.close()
        interrupt.close()


@pytest.mark.parametrize("name", NAMES)
def test_an_interrupt_wakes_a_blocked_waker_at_once(name: str, tmp_path: Path) -> None:
    interrupt = InterruptEvent()
    waker = FACTORIES[name]([str(tmp_path)], interrupt)
    woke = threading.Event()

    def block() -> None:
        if waker.wait(60_000).interrupted:
            woke.set()

    thread = threading.Thread(target=block)
    thread.start()
    interrupt.set()
    assert woke.wait(5), "the waker did not notice the interrupt"
    thread.join(5)
    waker.close()
    interrupt.close()


@LINUX_ONLY
@pytest.mark.parametrize(
    ("creator", "forced", "waker", "mode"),
    [
        (True, "", BellWaker, "inotify"),  # the parent: one inotify instance, and its bell
        (False, "", BellWaker, "bell"),  # every other process: its bell, no inotify instance
        (False, "bell", BellWaker, "bell"),
        (True, "bell", BellWaker, "bell"),
        (False, "inotify", InotifyWaker, "inotify"),
        (False, "watchfiles", WatchfilesWaker, "watchfiles"),
        (True, "polling", PollingWaker, "polling"),
    ],
)
def test_the_default_waker_of_each_process(
    creator: bool,
    forced: str,
    waker: type,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("SHEPHERD_WAKER", forced)
    new = tmp_path / "new"
    new.mkdir()
    interrupt = InterruptEvent()
    built = default_waker(creator=creator, debounce_ms=10, step_ms=1)([str(new)], interrupt)
    try:
        assert isinstance(built, waker)
        modes = getattr(built, "modes", None)
        assert (modes[str(new)] if modes is not None else built.mode) == mode  # type: ignore[attr-defined]
    finally:
        built.close()
        interrupt.close()


@pytest.mark.parametrize("name", NAMES)
def test_a_mailbox_delivers_in_order_on_each_waker(name: str, tmp_path: Path) -> None:
    session = make_id(IdKind.SESSION, "ab" * 8)
    box = Mailbox.create(tmp_path / "mb", session, waker_factory=FACTORIES[name])
    got: list[str] = []
    done = threading.Event()
    try:
        box.ensure_inbox("parent")

        def received(env: AnyEnvelope) -> None:
            got.append(env.message_id)
            if len(got) == 50:
                done.set()

        box.subscribe("parent", received)
        sent = []
        for i in range(50):
            env = MessageEnvelope(
                message_id=make_id(IdKind.MESSAGE, f"{i:016x}"),
                session_id=session,
                sender_id="shepherd",
                target_id="shepherd",
                created_at=0.0,
                content=f"m{i}",
            )
            sent.append(env.message_id)
            box.publish("parent", env)
        assert done.wait(10)
        assert got == sent
    finally:
        box.close()
