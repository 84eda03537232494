"""The actor runtimes: per-actor serialisation, supervision, few threads, one code path."""

from __future__ import annotations

import math
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest

from actors.runtime.clock import Clock, SystemClock, VirtualClock
from actors.runtime.inbox import RuntimeInbox
from actors.runtime.runtime import ShepherdActor, ThreadedRuntime
from actors.runtime.transport import InMemoryTransport
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing.simagent import SimLauncher
from actors.testing.simulation import SimRuntime, Stalled
from protocol.records.notifications import TaskCompletion
from tests.sim.scenarios import PLANNER, SCOUT


class Counter(ShepherdActor):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.concurrent = 0
        self.max_concurrent = 0

    def on_receive(self, message: Any) -> Any:
        if message == "boom":
            raise ValueError("boom")
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        value = self.n  # a racy read-modify-write: only safe if handling is serialised
        self.n = value + 1
        self.concurrent -= 1
        return self.n


@pytest.fixture
def threaded() -> Any:
    runtime = ThreadedRuntime(workers=4)
    yield runtime
    runtime.shutdown()


def test_each_actor_handles_one_message_at_a_time_on_the_pool(threaded: ThreadedRuntime) -> None:
    refs = [threaded.spawn(Counter) for _ in range(8)]

    def flood() -> None:
        for _ in range(2000):
            for ref in refs:
                ref.tell("inc")

    producers = [threading.Thread(target=flood) for _ in range(4)]
    for p in producers:
        p.start()
    for p in producers:
        p.join()
    for ref in refs:
        assert ref.ask("inc", timeout=30) == 8001
        actor = ref._actor_weakref()
        assert actor is not None and actor.max_concurrent == 1


class Bouncer(ShepherdActor):
    """Sends each message back to the actor it names until ``left`` runs out: its inbox
    empties and refills all the time, racing every send with the mark being cleared."""

    def __init__(self) -> None:
        super().__init__()
        self.left = 0
        self.concurrent = 0
        self.max_concurrent = 0

    def on_receive(self, message: Any) -> None:
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        peer, left = message
        if left:
            peer.tell((self.actor_ref, left - 1))
        else:
            self.left += 1  # this pair's game is over
        self.concurrent -= 1


def test_mail_racing_an_emptying_inbox_is_never_stranded(threaded: ThreadedRuntime) -> None:
    # many pairs bouncing one message at a time, with outside threads telling them too: a
    # message put while its actor's worker finds the inbox empty must still be handled
    # message put while its actor's worker finds the inbox empty must still be handled. The
    # threads switch far more often than usual, so the narrow windows do get hit.
    pairs = [(threaded.spawn(Bouncer), threaded.spawn(Bouncer)) for _ in range(16)]
    games_each = 5

    def serve() -> None:
        for _ in range(games_each):
            for a, b in pairs:
                a.tell((b, 301))

    actors = [ref._actor_weakref() for pair in pairs for ref in pair]

    def over() -> bool:
        return sum(a.left for a in actors if a is not None) == len(pairs) * games_each * 2

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        outside = [threading.Thread(target=serve) for _ in range(2)]
        for thread in outside:
            thread.start()
        for thread in outside:
            thread.join()
        assert threaded.wait_until(over, timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert all(a is not None and a.max_concurrent == 1 for a in actors)


class _LateMail(queue.SimpleQueue[Any]):
    """A mailbox that, the first time its owner finds it empty, is overtaken by a ``put``
    before the owner acts on it: the moment a sender sees the actor still scheduled and
    leaves the waking to its worker."""

    def __init__(self, inbox: RuntimeInbox) -> None:
        super().__init__()
        self.inbox: RuntimeInbox | None = inbox

    def _overtaken(self) -> None:
        if self.inbox is not None:
            inbox, self.inbox = self.inbox, None
            inbox.put("late")  # type: ignore[arg-type]  # any object stands for an envelope

    def get_nowait(self) -> Any:
        if super().empty():
            self._overtaken()
            raise queue.Empty
        return super().get_nowait()

    def empty(self) -> bool:
        if super().empty():
            self._overtaken()
            return True
        return False


@pytest.mark.parametrize("step", ["take", "release"])
def test_mail_put_while_the_worker_finds_the_inbox_empty_is_not_stranded(step: str) -> None:
    scheduled: list[Any] = []

    class Scheduler:
        def schedule(self, actor: Any) -> None:
            scheduled.append(actor)

    inbox = RuntimeInbox(Scheduler(), "actor")
    inbox.put("first")  # type: ignore[arg-type]
    assert scheduled == ["actor"]  # the worker given it owns the actor now
    assert inbox.take() == "first"  # type: ignore[comparison-overlap]  # a str stands for mail
    inbox._items = _LateMail(inbox)
    if step == "take":  # the worker looks for more mail
        assert inbox.take() == "late"  # type: ignore[comparison-overlap]
    else:  # the worker ends its batch
        assert inbox.release() is True
        assert inbox.take() == "late"  # type: ignore[comparison-overlap]
    # the worker handles the late mail; nobody else was told to run the actor meanwhile
    assert scheduled == ["actor"]
    assert inbox.take() is None  # and then it lets go: the next put schedules it again
    inbox.put("next")  # type: ignore[arg-type]
    assert scheduled == ["actor", "actor"]


def test_a_failing_tell_handler_does_not_stop_the_actor(threaded: ThreadedRuntime) -> None:
    ref = threaded.spawn(Counter)
    ref.tell("boom")
    assert ref.ask("inc", timeout=10) == 1
    with pytest.raises(ValueError, match="boom"):
        ref.ask("boom", timeout=10)
    assert ref.is_alive()


def test_asking_a_stopped_actor_raises_actor_dead(threaded: ThreadedRuntime) -> None:
    ref = threaded.spawn(Counter)
    ref.stop(timeout=10)
    with pytest.raises(pykka.ActorDeadError):
        ref.ask("inc", timeout=10)


def test_thousands_of_actors_share_a_few_threads(threaded: ThreadedRuntime) -> None:
    before = threading.active_count()
    refs = [threaded.spawn(Counter) for _ in range(3000)]
    for ref in refs:
        ref.tell("inc")
    assert all(ref.ask("inc", timeout=30) == 2 for ref in refs[::100])
    assert threading.active_count() <= before + 1  # at most the timer thread on top
    assert threaded.actor_count == 3000


def test_start_without_a_runtime_is_refused() -> None:
    with pytest.raises(TypeError, match=r"runtime\.spawn"):
        Counter.start()


def test_simulated_ask_runs_the_simulation_and_detects_a_stall() -> None:
    sim = SimRuntime(1)
    ref = sim.spawn(Counter)
    assert ref.ask("inc") == 1

    with pytest.raises(Stalled):
        sim.new_future().get()  # nobody will ever answer: the simulation says so


def test_the_same_class_runs_on_every_runtime_no_class_is_made_per_runtime() -> None:
    threaded = ThreadedRuntime(workers=2)
    try:
        for runtime in (threaded, SimRuntime(1)):
            ref = runtime.spawn(Counter)
            assert ref.actor_class is Counter
            assert type(ref._actor_weakref()) is Counter
            assert ref.ask("inc", timeout=10) == 1
    finally:
        threaded.shutdown()


@pytest.mark.parametrize("kind", ["threaded", "simulated"])
def test_stop_without_blocking_answers_on_every_runtime(kind: str) -> None:
    runtime = ThreadedRuntime(workers=2) if kind == "threaded" else SimRuntime(1)
    try:
        ref = runtime.spawn(Counter)
        stopping = ref.stop(block=False)
        assert stopping.get(timeout=10) is True  # on the simulation: getting it runs it
        assert not ref.is_alive() and runtime.actor_count == 0
        assert ref.stop(block=False).get(timeout=10) is False  # already dead
    finally:
        runtime.shutdown()


def test_wait_until_on_threads_wakes_when_actors_made_it_true(threaded: ThreadedRuntime) -> None:
    ref = threaded.spawn(Counter)
    actor = ref._actor_weakref()
    assert actor is not None

    def flood() -> None:
        for _ in range(5000):
            ref.tell("inc")

    producer = threading.Thread(target=flood)
    producer.start()
    assert threaded.wait_until(lambda: actor.n >= 5000, timeout=30)
    producer.join()
    assert not threaded.wait_until(lambda: actor.n > 5000, timeout=0.05)  # nothing will
    assert threaded.wait_until(lambda: True, timeout=0)


class Alarm(ShepherdActor):
    """Rings after ``delay`` (virtual) seconds: a timer, then a message to itself."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.rung_at: float | None = None
        self._delay = delay

    def on_start(self) -> None:
        self.clock.call_later(self._delay, lambda: self.actor_ref.tell("ring"))

    def on_receive(self, message: Any) -> Any:
        self.rung_at = self.clock.monotonic()


def test_wait_until_on_the_simulation_jumps_from_timer_to_timer() -> None:
    sim = SimRuntime(1)
    start = sim.clock.monotonic()
    alarms = [sim.spawn(Alarm, delay)._actor_weakref() for delay in (100.0, 300.0)]
    first, second = alarms
    assert first is not None and second is not None
    assert sim.wait_until(lambda: first.rung_at is not None, timeout=200)
    assert first.rung_at == start + 100.0 and second.rung_at is None
    assert sim.clock.monotonic() == start + 100.0  # no further than the timer it needed
    assert not sim.wait_until(lambda: second.rung_at is not None, timeout=150)  # due at 300
    assert sim.wait_until(lambda: second.rung_at is not None)  # no timeout: until it holds
    assert second.rung_at == start + 300.0


@pytest.mark.parametrize("make", [SystemClock, VirtualClock])
def test_every_clock_keeps_the_whole_protocol(make: Callable[[], Clock]) -> None:
    clock: Clock = make()
    fired: list[str] = []
    before = clock.monotonic()
    assert clock.monotonic() >= before and clock.now() > 1_600_000_000
    pending = clock.call_later(3600, lambda: fired.append("pending"))
    clock.close()  # cancels what is pending...
    late = clock.call_later(0, lambda: fired.append("late"))  # ...and what comes after
    pending.cancel()
    late.cancel()
    if isinstance(clock, VirtualClock):
        assert not clock.fire_next(clock.now() + 7200)
    assert fired == []


def test_virtual_time_cannot_go_backwards() -> None:
    clock = VirtualClock(start=100.0)
    clock.jump(100.0)  # standing still is fine
    clock.jump(150.0)
    with pytest.raises(ValueError, match="time can't go backwards"):
        clock.jump(149.0)
    with pytest.raises(ValueError, match="NaN"):
        clock.jump(math.nan)
    assert clock.now() == clock.monotonic() == 150.0


def test_system_clock_fires_in_deadline_order_and_cancel_works() -> None:
    clock = SystemClock()
    fired: list[str] = []
    done = threading.Event()
    # the cancelled timer is due half a second after it is set: a busy machine that holds
    # this thread between setting and cancelling it for less than that cannot let it fire
    clock.call_later(0.55, lambda: fired.append("late"))
    cancelled = clock.call_later(0.5, lambda: fired.append("cancelled"))
    clock.call_later(0.0, lambda: fired.append("first"))
    clock.call_later(0.6, done.set)
    cancelled.cancel()
    assert done.wait(5)
    assert fired == ["first", "late"]
    clock.close()


def test_system_clock_drops_cancelled_timers_long_before_their_deadline() -> None:
    clock = SystemClock()
    try:
        done = threading.Event()
        live = [clock.call_later(3600, lambda: None) for _ in range(100)]
        for _ in range(20):  # many more timers set and cancelled than stay live
            for timer in [clock.call_later(3600, lambda: None) for _ in range(100)]:
                timer.cancel()
        assert len(clock._heap) <= 2 * len(live) + 256 + 1  # not the 2,100 ever set
        for timer in live[:50]:
            timer.cancel()
            timer.cancel()  # twice: counted once
        clock.call_later(0.0, done.set)  # the remaining live ones still fire in order
        assert done.wait(5)
        assert sum(1 for t in clock._heap if not t.cancelled) == 50
    finally:
        clock.close()


def test_virtual_clock_moves_only_when_told() -> None:
    clock = VirtualClock(start=100.0)
    fired: list[float] = []
    clock.call_later(5, lambda: fired.append(clock.now()))
    assert clock.now() == 100.0 and not clock.fire_next(104.0)
    assert clock.fire_next(110.0) and fired == [105.0]


def test_the_canonical_scenario_runs_unchanged_on_the_threaded_runtime() -> None:
    runtime = ThreadedRuntime(workers=3)
    transport = InMemoryTransport()
    launcher = SimLauncher(runtime, transport)
    sink = CollectingSink()
    session = Session(runtime, transport, launcher, sink=sink)
    try:
        launcher.scripts["scout"] = _script(SCOUT, sleep=0.05)
        launcher.scripts["planner"] = _script(PLANNER, sleep=0.2)
        session.spawn("scout", adapter="scripted")
        session.spawn("planner", adapter="scripted")
        session.delegate("planner", "plan")
        task = session.delegate("scout", "map")
        session.watch(task.task_id)
        assert sink.wait_for(lambda items: any(isinstance(n, TaskCompletion) for n in items), 20)
        (note,) = [n for n in sink.items if isinstance(n, TaskCompletion)]
        assert [(r.status, r.text) for r in note.results] == [("completed", "explored src/core")]
    finally:
        session.shutdown()


def _script(doc: dict[str, Any], *, sleep: float) -> Any:
    from protocol.scripted.script import parse_script

    steps = [({"sleep": sleep} if "sleep" in step else step) for step in doc["steps"]]
    return parse_script({"steps": steps})


def test_ids_drawn_in_bulk_are_unique_and_a_forked_child_never_reuses_its_parents() -> None:
    import os

    from actors.runtime.ids import IdSource
    from protocol.core.ids import IdKind

    ids = IdSource()
    made = {ids.new(IdKind.MESSAGE) for _ in range(3000)}  # several bulk draws
    assert len(made) == 3000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, ids.new(IdKind.MESSAGE).encode())
        finally:
            os._exit(0)
    os.close(write)
    child_id = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child_id.startswith("shepherd-message-")
    assert child_id != ids.new(IdKind.MESSAGE)  # the parent's next token is not the child's
