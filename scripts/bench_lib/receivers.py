"""The ways of noticing a new envelope, over the same mailbox layout and file format.

- :class:`ShepherdReceiver`: Shepherd's own path, as the session parent takes it —
  ``Mailbox.subscribe_batch`` (its receiver thread and watcher, strict decode, validation,
  duplicate check, acknowledgement into ``cur/`` once a batch was handled), the handler
  ``ask``-ing a :class:`~actors.runtime.runtime.ShepherdActor` on a ``ThreadedRuntime`` with each
  batch and waiting for it to be handled (as the parent waits for its broker); the actor calls
  ``on_envelope`` for each envelope. Three wakers (:func:`mailbox_options`): ``shepherd`` is the
  parent's default (one inotify instance and the inbox's doorbell), ``shepherd_bell`` the
  doorbell alone (what every bridge and CLI call uses), ``shepherd_inotify`` inotify alone (the
  previous default of every process, one inotify instance each).
- :class:`PollingReceiver`: a loop listing ``new/`` every 500 ms (the simplest watcher).
- :class:`WatchfilesReceiver`: watchfiles with its defaults (debounce 1600 ms, step 50 ms,
  recursive, 5 s timeout) — the very loop ``watchfiles.watch()`` runs, on ``RustNotify`` directly
  so the watch provably exists before the publisher starts; every changed ``new/`` is rescanned.
- :class:`InotifyReceiver`: raw inotify (ctypes, ``IN_MOVED_TO`` on ``new/``), handling exactly
  the file each event names: the physical floor of a file mailbox.

The baselines read, decode (the same strict ``decode_envelope``) and rename into ``cur/``; they
skip what only a real transport needs (validation, duplicate window, retention).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from actors.runtime.runtime import ShepherdActor, ThreadedRuntime
from actors.transports.mailbox.mailbox import Mailbox
from protocol.wire.envelopes import AnyEnvelope, decode_envelope

OnEnvelope = Callable[[AnyEnvelope], None]

VARIANTS = (
    "shepherd",
    "shepherd_bell",
    "shepherd_inotify",
    "poll_500ms",
    "watchfiles_defaults",
    "raw_inotify",
)


def mailbox_options(variant: str) -> dict[str, Any]:
    """``Mailbox.create`` keyword arguments for a Shepherd variant's waker (none: the default,
    which is the session parent's)."""
    if variant == "shepherd_bell":
        from actors.transports.mailbox.bell import bell_waker

        return {"waker_factory": bell_waker(inotify="never")}
    if variant == "shepherd_inotify":
        from actors.transports.mailbox.inotify import inotify_waker

        return {"waker_factory": inotify_waker()}
    return {}


class BenchReceiver(Protocol):
    def start(self) -> None:
        """Return once the receiver is watching (a file published after this is noticed)."""

    def close(self) -> None:
        """Stop and join every thread of the receiver."""


def handle_file(box: Path, name: str, on_envelope: OnEnvelope) -> None:
    path = os.path.join(box, "new", name)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return
    on_envelope(decode_envelope(data))
    os.rename(path, os.path.join(box, "cur", name))


def handle_dir(box: Path, on_envelope: OnEnvelope) -> None:
    for name in sorted(os.listdir(os.path.join(box, "new"))):
        handle_file(box, name, on_envelope)


class _Thread:
    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=target, name=name, daemon=True)

    def join(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(10)


class PollingReceiver:
    def __init__(self, boxes: Sequence[Path], on_envelope: OnEnvelope, interval_s: float) -> None:
        self._boxes = list(boxes)
        self._on_envelope = on_envelope
        self._interval_s = interval_s
        self._loop = _Thread("bench-poll", self._run)

    def start(self) -> None:
        self._loop.thread.start()

    def _run(self) -> None:
        while True:
            for box in self._boxes:
                handle_dir(box, self._on_envelope)
            if self._loop.stop.wait(self._interval_s):
                return

    def close(self) -> None:
        self._loop.join()


class WatchfilesReceiver:
    def __init__(
        self,
        boxes: Sequence[Path],
        on_envelope: OnEnvelope,
        *,
        debounce_ms: int = 1600,
        step_ms: int = 50,
        timeout_ms: int = 5000,
    ) -> None:
        from watchfiles._rust_notify import RustNotify

        self._boxes = {os.path.join(box, "new"): box for box in boxes}
        self._on_envelope = on_envelope
        self._args = (debounce_ms, step_ms, timeout_ms)
        # watchfiles.watch() defaults: debug False, force_polling False, poll_delay_ms 300,
        # recursive True, ignore_permission_denied False. Registered here, synchronously.
        self._notify = RustNotify(list(self._boxes), False, False, 300, True, False)
        self._loop = _Thread("bench-watchfiles", self._run)

    def start(self) -> None:
        self._loop.thread.start()

    def _run(self) -> None:
        debounce, step, timeout = self._args
        while True:
            raw = self._notify.watch(debounce, step, timeout, self._loop.stop)
            if raw == "stop":
                return
            if isinstance(raw, str):  # timeout (or a signal): nothing changed
                continue
            for new_dir in {os.path.dirname(path) for _, path in raw}:
                box = self._boxes.get(new_dir)
                if box is not None:
                    handle_dir(box, self._on_envelope)

    def close(self) -> None:
        self._loop.join()
        self._notify.close()


_IN_MOVED_TO = 0x00000080
_IN_Q_OVERFLOW = 0x00004000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name


class InotifyReceiver:
    def __init__(self, boxes: Sequence[Path], on_envelope: OnEnvelope) -> None:
        self._on_envelope = on_envelope
        self._boxes = list(boxes)
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._by_wd: dict[int, Path] = {}
        for box in self._boxes:
            wd = libc.inotify_add_watch(
                self._fd, os.fsencode(os.path.join(box, "new")), _IN_MOVED_TO
            )
            if wd < 0:
                os.close(self._fd)
                raise OSError(ctypes.get_errno(), f"inotify_add_watch failed on {box}")
            self._by_wd[wd] = box
        self._wake_r, self._wake_w = os.pipe()
        self._loop = _Thread("bench-inotify", self._run)

    def start(self) -> None:
        for box in self._boxes:  # anything that arrived before the watch
            handle_dir(box, self._on_envelope)
        self._loop.thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._loop.stop.is_set():
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    return
                self._read_events()

    def _read_events(self) -> None:
        try:
            data = os.read(self._fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError as exc:  # pragma: no cover - a closed descriptor at shutdown
            if exc.errno == errno.EBADF:
                return
            raise
        offset = 0
        while offset < len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            name = data[offset : offset + length].rstrip(b"\0").decode()
            offset += length
            if mask & _IN_Q_OVERFLOW:
                for box in self._boxes:
                    handle_dir(box, self._on_envelope)
            elif wd in self._by_wd and name:
                handle_file(self._by_wd[wd], name, self._on_envelope)

    def close(self) -> None:
        self._loop.stop.set()
        os.write(self._wake_w, b"x")
        self._loop.join()
        for fd in (self._fd, self._wake_r, self._wake_w):
            os.close(fd)


class _Forward(ShepherdActor):
    """The parent-side actor the mailbox handler asks; it hands each envelope of a batch on."""

    def __init__(self, on_envelope: OnEnvelope) -> None:
        super().__init__()
        self._on_envelope = on_envelope

    def on_receive(self, message: Any) -> Any:
        for envelope in message:
            self._on_envelope(envelope)
        return None


class ShepherdReceiver:
    def __init__(self, mailbox: Mailbox, inboxes: Sequence[str], on_envelope: OnEnvelope) -> None:
        self._mailbox = mailbox
        self._inboxes = list(inboxes)
        self.runtime = ThreadedRuntime()
        self._actor = self.runtime.spawn(_Forward, on_envelope)
        self._subscriptions: list[Any] = []

    def start(self) -> None:
        ask = self._actor.ask

        def hand_over(envelopes: Sequence[AnyEnvelope]) -> None:
            ask(tuple(envelopes), timeout=30)  # acknowledged once handled, as in the parent

        for inbox in self._inboxes:
            self._subscriptions.append(self._mailbox.subscribe_batch(inbox, hand_over))
        # Answered by a full pass made after the watch exists (actors/transports/mailbox/watch.py);
        # a second request covers a rebuild caused by the last subscriptions.
        for _ in range(2):
            if not self._mailbox.wait_drained(30):
                raise RuntimeError("the mailbox receiver did not start")

    def close(self) -> None:
        for subscription in self._subscriptions:
            subscription.cancel()
        self._mailbox.close()
        self.runtime.shutdown()


def make_receiver(
    variant: str, mailbox: Mailbox, inboxes: Sequence[str], on_envelope: OnEnvelope
) -> BenchReceiver:
    boxes = [mailbox.inbox_path(inbox) for inbox in inboxes]
    match variant:
        case "shepherd" | "shepherd_bell" | "shepherd_inotify":  # the waker is the mailbox's
            return ShepherdReceiver(mailbox, inboxes, on_envelope)
        case "poll_500ms":
            return PollingReceiver(boxes, on_envelope, 0.5)
        case "watchfiles_defaults":
            return WatchfilesReceiver(boxes, on_envelope)
        case "raw_inotify":
            return InotifyReceiver(boxes, on_envelope)
    raise ValueError(f"unknown receiver {variant!r}")
