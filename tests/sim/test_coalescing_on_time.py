"""A coalescing window closes on time even when the broker has a backlog.

Each watcher is an actor with its own window timer: the timer's event waits in the watcher's
mailbox, behind nothing but that watcher's own mail, never behind the broker's. (When the
windows were the broker's, thousands of ``done`` arriving at once made every window close only
after the last of them was handled.) Here the clock is the test's: timers never fire by
themselves, the test fires them; and the broker is held in the middle of a run. The window's
notification must reach the caller while the broker is still held.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

from actors.runtime.clock import TimerHandle
from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import PARENT_INBOX, InMemoryTransport
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing.simagent import SimLauncher
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import TaskCompletion
from protocol.scripted.script import parse_script
from protocol.session.effects import Flush
from protocol.wire.envelopes import AnyEnvelope, RuntimeEnvelope, TaskDoneEnvelope

QUIET = {"steps": [{"await": "task"}, {"await": "any"}]}


class ReadyTransport(InMemoryTransport):
    """Tells when both agents said ``ready`` (their capability is admitted by then)."""

    def __init__(self) -> None:
        super().__init__()
        self.ready: set[str] = set()
        self.both_ready = threading.Event()

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        if isinstance(envelope, RuntimeEnvelope) and envelope.event == "ready":
            self.ready.add(envelope.sender_id)
            if len(self.ready) == 2:
                self.both_ready.set()
        super().publish(inbox, envelope)


class _Held:
    def cancel(self) -> None:
        return None


class StoppedClock:
    """Wall time for records; a monotonic time the test moves; timers that never fire by
    themselves (``held``: each one's callback, for the test to fire)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.held: list[Callable[[], object]] = []

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        self.held.append(callback)
        return _Held()

    def windows(self) -> list[Callable[[], object]]:
        """The held timers of watchers' windows (their event is a ``Flush``)."""
        return [
            c
            for c in list(self.held)
            if isinstance(c, functools.partial) and isinstance(c.args[-1], Flush)
        ]

    def close(self) -> None:
        return None


def test_a_window_closes_while_the_broker_is_held_in_the_middle_of_a_run() -> None:
    clock = StoppedClock()
    runtime = ThreadedRuntime(workers=3, clock=clock)
    transport = ReadyTransport()
    launcher = SimLauncher(runtime, transport)
    sink = CollectingSink()
    held, release = threading.Event(), threading.Event()
    second_settles: list[str] = []

    def tap(text: str) -> None:  # the broker tells its story from inside its run
        if second_settles and second_settles[0] in text and "completed" in text:
            held.set()
            release.wait(30)

    session = Session(runtime, transport, launcher, sink=sink, tap=tap)
    try:
        script = parse_script(QUIET)
        agents = [session.spawn(name, script=script) for name in ("first", "second")]
        delegated = [session.delegate(a.agent_id, "work") for a in agents]
        watched = [session.watch(d.task_id) for d in delegated]
        assert transport.both_ready.wait(10)
        session.status()  # the broker handled both readies

        def done(i: int) -> None:
            name, agent_id = ("first", "second")[i], agents[i].agent_id
            transport.publish(
                PARENT_INBOX,
                TaskDoneEnvelope(
                    message_id=runtime.ids.new(IdKind.MESSAGE),
                    session_id=session.session_id,
                    sender_id=agent_id,
                    target_id=PARENT_ID,
                    created_at=time.time(),
                    capability=launcher.driver(name).identity.capability,
                    task_id=delegated[i].task_id,
                    status="completed",
                    summary="done",
                ),
            )

        second_settles.append(delegated[1].task_id)
        done(0)
        assert runtime.wait_until(lambda: len(clock.windows()) == 1, 10)  # its window opened
        assert not [n for n in sink.items if isinstance(n, TaskCompletion)]
        done(1)
        assert held.wait(10)  # the broker is held in the run of the second done
        clock.t += 1.0
        (window,) = clock.windows()
        window()  # the first watcher's window closes: its event goes to its own mailbox
        assert sink.wait_for(
            lambda items: any(
                isinstance(n, TaskCompletion) and n.watcher_id == watched[0].watcher_id
                for n in items
            ),
            10,
        )
        (note,) = [n for n in sink.items if isinstance(n, TaskCompletion)]
        assert [r.task_id for r in note.results] == [delegated[0].task_id]
        assert note.pending == ()
        assert not release.is_set()  # told while the broker was still held
    finally:
        release.set()
        session.shutdown()
