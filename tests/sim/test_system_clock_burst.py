"""The production clock's timer thread is woken only for a timer due before the one it sleeps
until: a burst of later timers (a thousand watchers opening their windows at once) takes no
lock, and every timer still fires once, whichever thread set it."""

from __future__ import annotations

import threading
from typing import Any

from actors.runtime.clock import SystemClock

WAIT_S = 10.0


class _CountingCondition(threading.Condition):
    """The clock's lock, counting who takes it, and saying when the timer thread sleeps."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = 0
        self.sleeping = threading.Event()

    def __enter__(self) -> bool:
        self.entered += 1
        return super().__enter__()

    def wait(self, timeout: float | None = None) -> bool:
        self.sleeping.set()
        return super().wait(timeout)


def _counted(clock: SystemClock) -> _CountingCondition:
    cond = _CountingCondition()
    clock._cond = cond
    return cond


def test_timers_due_after_the_one_the_thread_sleeps_for_take_no_lock() -> None:
    clock = SystemClock()
    cond = _counted(clock)
    try:
        clock.call_later(3600.0, lambda: None)  # starts the thread, which sleeps until then
        assert cond.sleeping.wait(WAIT_S)
        entered = cond.entered
        for _ in range(1000):
            clock.call_later(3601.0, lambda: None)
        assert cond.entered == entered
    finally:
        clock.close()


def test_a_timer_due_earlier_wakes_the_sleeping_thread() -> None:
    clock = SystemClock()
    cond = _counted(clock)
    fired = threading.Event()
    try:
        clock.call_later(3600.0, lambda: None)
        assert cond.sleeping.wait(WAIT_S)
        clock.call_later(0.0, fired.set)
        assert fired.wait(WAIT_S)
    finally:
        clock.close()


def test_timers_set_and_cancelled_from_many_threads_at_once_fire_once_each() -> None:
    clock = SystemClock()
    fired: list[tuple[int, int]] = []
    lock = threading.Lock()
    last = threading.Event()
    start = threading.Barrier(4)
    per_thread = 300

    def fire(k: int, i: int) -> Any:
        def callback() -> None:
            with lock:
                fired.append((k, i))
                if len(fired) == 4 * per_thread:
                    last.set()

        return callback

    def burst(k: int) -> None:
        start.wait(WAIT_S)
        for i in range(per_thread):
            delay = ((i * 7 + k * 13) % 50) / 1000.0  # 0 to 49 ms, interleaved
            clock.call_later(3600.0 + delay, fire(-1, i)).cancel()  # never fires
            clock.call_later(delay, fire(k, i))

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
        assert last.wait(WAIT_S)
        assert sorted(fired) == [(k, i) for k in range(4) for i in range(per_thread)]
    finally:
        clock.close()
