"""The threaded runtime's two shortcuts, each still one actor's turn at a time:

- an actor whose class ``runs_in_place`` (a task's actor), told by an actor running on a
  worker, is run by that worker at once, one level deep;
- ``retire`` stops an idle actor at once on the caller's thread, and a busy one after the mail
  it has (on every runtime, by a message).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any, cast

import pykka
import pytest

from actors.runtime.runtime import ShepherdActor, ThreadedRuntime, tell_quietly
from actors.testing.simulation import SimRuntime

WAIT_S = 10.0


@pytest.fixture
def threaded() -> Iterator[ThreadedRuntime]:
    runtime = ThreadedRuntime(workers=4)
    yield runtime
    runtime.shutdown()


class Recorder(ShepherdActor):
    """Keeps what it was told, and on which thread."""

    runs_in_place = True

    def __init__(self, then: pykka.ActorRef[Any] | None = None) -> None:
        super().__init__()
        self.seen: list[Any] = []
        self.threads: list[int] = []
        self.then = then
        self.stopped_on: int | None = None

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, threading.Event):  # hold the actor busy until it is set
            message.wait(WAIT_S)
            return None
        self.seen.append(message)
        self.threads.append(threading.get_ident())
        if self.then is not None:
            tell_quietly(self.then, message)
        return None

    def on_stop(self) -> None:
        self.stopped_on = threading.get_ident()


class Plain(Recorder):
    runs_in_place = False


class Sender(ShepherdActor):
    """Tells ``to`` each message it is asked to send; answers what ``to`` had handled by the
    time its ``tell`` returned, and its own thread."""

    def __init__(self, to: pykka.ActorRef[Any], actor: Recorder) -> None:
        super().__init__()
        self.to = to
        self.actor = actor

    def on_receive(self, message: Any) -> Any:
        tell_quietly(self.to, message)
        return list(self.actor.seen), threading.get_ident()


def _spawn(runtime: Any, cls: type[Recorder], *args: Any) -> tuple[pykka.ActorRef[Any], Recorder]:
    ref = runtime.spawn(cls, *args)
    return ref, ref.actor_inbox.actor


def _recorder_and_sender(
    runtime: ThreadedRuntime,
) -> tuple[pykka.ActorRef[Any], Recorder, pykka.ActorRef[Any]]:
    ref, recorder = _spawn(runtime, Recorder)
    return ref, recorder, runtime.spawn(Sender, ref, recorder)


def test_an_actor_that_runs_in_place_is_run_by_the_worker_that_tells_it(
    threaded: ThreadedRuntime,
) -> None:
    _, recorder, sender = _recorder_and_sender(threaded)
    for i in range(50):
        seen_when_told, sender_thread = cast(tuple[list[Any], int], sender.ask(i, timeout=WAIT_S))
        assert seen_when_told[-1] == i  # handled before the sender's tell returned
        assert recorder.threads[-1] == sender_thread  # on the sender's worker
    assert recorder.seen == list(range(50))


def test_a_busy_actor_is_never_run_in_place_its_mail_waits_its_turn(
    threaded: ThreadedRuntime,
) -> None:
    ref, recorder, sender = _recorder_and_sender(threaded)
    gate = threading.Event()
    ref.tell(gate)  # busy on a worker until the gate opens
    seen_when_told, _ = sender.ask("x", timeout=WAIT_S)
    assert seen_when_told == []
    gate.set()
    assert threaded.wait_until(lambda: recorder.seen == ["x"], timeout=WAIT_S)


def test_telling_from_outside_the_pool_queues_even_an_actor_that_runs_in_place(
    threaded: ThreadedRuntime,
) -> None:
    ref, recorder = _spawn(threaded, Recorder)
    ref.tell("x")
    assert threaded.wait_until(lambda: recorder.seen == ["x"], timeout=WAIT_S)
    assert recorder.threads == [t for t in recorder.threads if t != threading.get_ident()]


class Forwarder(Recorder):
    """Runs in place; passes everything on to ``then``, the gate too (it does not wait)."""

    def on_receive(self, message: Any) -> Any:
        self.seen.append(message)
        assert self.then is not None
        tell_quietly(self.then, message)
        return None


def test_running_in_place_is_one_level_deep(threaded: ThreadedRuntime) -> None:
    """A runs in place inside the sender's turn; what A tells B (in place too) is queued:
    were B run inside A's turn, the sender would wait in B's handler until B's gate timed
    out, and the ask would time out first."""
    b_ref, b = _spawn(threaded, Recorder)
    a_ref, a = _spawn(threaded, Forwarder, b_ref)
    gate = threading.Event()
    sender = threaded.spawn(Sender, a_ref, a)
    seen_when_told, _ = sender.ask(gate, timeout=WAIT_S / 2)
    assert seen_when_told == [gate]  # A ran in place; B waits at the gate on another worker
    gate.set()
    b_ref.tell("after")
    assert threaded.wait_until(lambda: b.seen == ["after"], timeout=WAIT_S)


def test_an_actor_run_in_place_keeps_its_order_with_mail_from_outside(
    threaded: ThreadedRuntime,
) -> None:
    ref, recorder, sender = _recorder_and_sender(threaded)
    for i in range(200):
        if i % 3:
            ref.tell(("outside", i))
        else:
            sender.tell(("sender", i))
    assert threaded.wait_until(lambda: len(recorder.seen) == 200, timeout=WAIT_S)
    outside = [i for who, i in recorder.seen if who == "outside"]
    told = [i for who, i in recorder.seen if who == "sender"]
    assert outside == sorted(outside) and told == sorted(told)


def test_retire_stops_an_idle_actor_at_once_on_the_callers_thread(
    threaded: ThreadedRuntime,
) -> None:
    ref, recorder = _spawn(threaded, Plain)
    assert ref.ask("x", timeout=WAIT_S) is None
    threaded.retire(ref)
    assert ref.actor_stopped.is_set()
    assert recorder.stopped_on == threading.get_ident()
    assert threaded.wait_until(lambda: threaded.actor_count == 0, timeout=WAIT_S)
    assert not tell_quietly(ref, "late")


def test_retire_stops_a_busy_actor_after_the_mail_it_has(threaded: ThreadedRuntime) -> None:
    ref, recorder = _spawn(threaded, Plain)
    gate = threading.Event()
    ref.tell(gate)
    ref.tell("before")
    threaded.retire(ref)
    assert not ref.actor_stopped.is_set()  # it is busy: the stop waits behind its mail
    gate.set()
    assert threaded.wait_until(ref.actor_stopped.is_set, timeout=WAIT_S)
    assert recorder.seen == ["before"]
    assert recorder.stopped_on != threading.get_ident()


def test_retire_on_the_simulation_is_a_message_taken_in_turn() -> None:
    runtime = SimRuntime(seed=7)
    ref, recorder = _spawn(runtime, Plain)
    ref.tell("before")
    runtime.retire(ref)
    assert not ref.actor_stopped.is_set()
    runtime.run_until_idle()
    assert ref.actor_stopped.is_set()
    assert recorder.seen == ["before"]


class Holder(ShepherdActor):
    def __init__(self) -> None:
        super().__init__()
        self.value = 1

    def read(self) -> int:
        return self.value


def test_an_actor_without_mail_costs_the_collector_four_objects_and_its_proxy_works(
    threaded: ThreadedRuntime,
) -> None:
    """The actor, its inbox (which is also its stopped flag), the scheduled mark, its ref: no
    weak reference, no separate dict, and no queue of its own until its first mail."""
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    refs = [threaded.spawn(Holder) for _ in range(100)]
    gc.collect()
    added = [o for o in gc.get_objects() if id(o) not in before]
    assert len(added) <= 4 * len(refs) + 10, sorted({type(o).__name__ for o in added})
    assert refs[0].proxy().read().get(timeout=WAIT_S) == 1
    refs[0].stop(timeout=WAIT_S)
    with pytest.raises(pykka.ActorDeadError):
        refs[0].proxy()


def test_an_inbox_has_its_own_queue_from_its_first_mail_and_loses_none_of_a_rush(
    threaded: ThreadedRuntime,
) -> None:
    """Until its first mail an inbox reads a shared queue that stays empty (a task's actor
    waits long for its first message); the first mail, from many senders at once, makes one
    queue and every envelope is handled."""
    refs = [threaded.spawn(Recorder) for _ in range(20)]
    shared = {id(ref.actor_inbox._items) for ref in refs}  # type: ignore[attr-defined]
    assert len(shared) == 1
    start = threading.Barrier(8)

    def rush(k: int) -> None:
        start.wait(WAIT_S)
        for ref in refs:
            ref.tell(k)

    senders = [threading.Thread(target=rush, args=(k,)) for k in range(8)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(WAIT_S)
    actors = [ref.actor_inbox.actor for ref in refs]  # type: ignore[attr-defined]
    assert threaded.wait_until(lambda: all(len(a.seen) == 8 for a in actors), timeout=WAIT_S)
    assert all(sorted(a.seen) == list(range(8)) for a in actors)
    owned = {id(ref.actor_inbox._items) for ref in refs}  # type: ignore[attr-defined]
    assert len(owned) == 20 and not owned & shared
