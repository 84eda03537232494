"""A coalescing window closes on time even when the broker has a backlog.

A timer's event waits in the broker's mailbox behind everything that arrived before it: when
thousands of ``done`` arrive at once, every watcher's window used to close only after the last
of them was handled (each notification paid for the whole burst). Here the clock is the
test's: timers never fire by themselves, time moves only when the test says. A window whose
time has come must be closed before the broker's next message, timer or not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from actors.runtime.clock import TimerHandle
from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import PARENT_INBOX, InMemoryTransport
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing.simagent import SimLauncher
from protocol.envelopes import AnyEnvelope, RuntimeEnvelope, TaskDoneEnvelope
from protocol.ids import PARENT_ID, IdKind
from protocol.notifications import TaskCompletion
from protocol.script import parse_script

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
    """Wall time for records; a monotonic time the test moves; timers that never fire."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        return _Held()

    def close(self) -> None:
        return None


def test_a_due_window_is_flushed_before_the_next_message_without_its_timer() -> None:
    clock = StoppedClock()
    runtime = ThreadedRuntime(workers=2, clock=clock)
    transport = ReadyTransport()
    launcher = SimLauncher(runtime, transport)
    sink = CollectingSink()
    session = Session(runtime, transport, launcher, sink=sink)
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

        done(0)
        session.status()  # the broker handled the first done: its window is open
        assert not [n for n in sink.items if isinstance(n, TaskCompletion)]
        clock.t += 1.0  # the window's time has come; its timer (held here) never fires
        done(1)  # the broker's next message
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
    finally:
        session.shutdown()


def test_open_windows_close_in_time_order_and_a_replaced_or_cancelled_one_never() -> None:
    from actors.session.windows import Windows
    from protocol.session.effects import Flush

    windows = Windows()
    a, b, c = (Flush(watcher_id=w) for w in ("a", "b", "c"))
    windows.open(b, 2.0)
    windows.open(a, 1.0)
    windows.open(c, 3.0)
    windows.cancel("c")
    b_again = Flush(watcher_id="b")
    windows.open(b_again, 2.5)  # replaces b's open window
    assert windows.next_at() == 1.0 and len(windows) == 2
    assert not windows.due(0.5) and windows.pop_due(0.5) == []
    closed = windows.pop_due(10.0)
    assert [id(e) for e in closed] == [id(a), id(b_again)]  # the live events, once each
    assert windows.next_at() is None and len(windows) == 0
