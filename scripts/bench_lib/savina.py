"""Savina-style actor runtime benchmarks (issue 16): the same four workloads on Shepherd's
``ThreadedRuntime``, on plain pykka ``ThreadingActor`` and on Thespian's single-threaded
``simpleSystemBase``, one (subject, workload) per worker process.

- ``ping_pong``: two actors, ``n`` round trips (2n messages).
- ``thread_ring``: ``ring`` actors in a ring pass a token ``n`` times (n messages).
- ``fork_join``: one actor fans ``n`` messages out to ``workers`` workers, round robin; each
  answers, and the actor joins the answers (2n messages).
- ``counting``: one producer (the benchmark's thread) tells a counter ``n`` times, then asks
  it for the count (n + 1 messages).

Each subject is used as its users would use it: Shepherd and pykka actors ``tell`` refs and
``ask`` for a future; Thespian actors ``send`` to addresses, and the benchmark's thread talks
to them through ``ActorSystem.tell`` / ``ask`` (which, in the single-threaded base, is what runs
them). Only the messaging is timed, not making the actors; every run checks its answer (a count
or sum that is wrong is reported, never a rate).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

WORKLOADS = ("ping_pong", "thread_ring", "fork_join", "counting")
THESPIAN = "thespian_simple"
SUBJECTS = ("shepherd", "pykka_threading_actor", THESPIAN)
TIMEOUT_S = 300.0


def _square_sum(n: int) -> int:
    return sum(i * i for i in range(n))


# ---------------------------------------------------------------------- Shepherd and pykka


def _pykka_style(
    base: type, spawn: Callable[..., Any]
) -> dict[str, Callable[[dict[str, Any]], tuple[int, float, bool]]]:
    """The four workloads for a pykka-shaped actor class ``base`` started by ``spawn``."""

    class Ping(base):  # type: ignore[misc]  # the base is chosen at run time
        def __init__(self, pong: Any, n: int, done: threading.Event) -> None:
            super().__init__()
            self.pong, self.left, self.done = pong, n, done

        def on_receive(self, message: Any) -> None:
            # message: "go" from the benchmark, None from the pong
            if self.left == 0:
                self.done.set()
                return
            self.left -= 1
            self.pong.tell(self.actor_ref)

    class Pong(base):  # type: ignore[misc]  # the base is chosen at run time
        def on_receive(self, message: Any) -> None:
            message.tell(None)

    class RingNode(base):  # type: ignore[misc]  # the base is chosen at run time
        def __init__(self, done: threading.Event) -> None:
            super().__init__()
            self.next: Any = None
            self.done = done

        def on_receive(self, message: Any) -> None:
            if isinstance(message, tuple):  # ("next", ref)
                self.next = message[1]
            elif message == 0:
                self.done.set()
            else:
                self.next.tell(message - 1)

    class Worker(base):  # type: ignore[misc]  # the base is chosen at run time
        def __init__(self, master: Any) -> None:
            super().__init__()
            self.master = master

        def on_receive(self, message: Any) -> None:
            self.master.tell(("answer", message * message))

    class Master(base):  # type: ignore[misc]  # the base is chosen at run time
        def __init__(self, n: int, done: threading.Event, out: list[int]) -> None:
            super().__init__()
            self.n, self.done, self.out = n, done, out
            self.workers: list[Any] = []
            self.got = self.total = 0

        def on_receive(self, message: Any) -> None:
            kind, value = message
            if kind == "workers":
                self.workers = value
            elif kind == "go":
                workers = self.workers
                k = len(workers)
                for i in range(self.n):
                    workers[i % k].tell(i)
            else:
                self.got += 1
                self.total += value
                if self.got == self.n:
                    self.out.append(self.total)
                    self.done.set()

    class Counter(base):  # type: ignore[misc]  # the base is chosen at run time
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def on_receive(self, message: Any) -> int | None:
            if message == "get":
                return self.count
            self.count += 1
            return None

    def ping_pong(p: dict[str, Any]) -> tuple[int, float, bool]:
        done = threading.Event()
        ping = spawn(Ping, spawn(Pong), p["n"], done)
        start = time.perf_counter()
        ping.tell("go")
        ok = done.wait(TIMEOUT_S)
        return 2 * p["n"], time.perf_counter() - start, ok

    def thread_ring(p: dict[str, Any]) -> tuple[int, float, bool]:
        done = threading.Event()
        nodes = [spawn(RingNode, done) for _ in range(p["ring"])]
        for i, node in enumerate(nodes):
            node.tell(("next", nodes[(i + 1) % len(nodes)]))
        start = time.perf_counter()
        nodes[0].tell(p["n"])
        ok = done.wait(TIMEOUT_S)
        return p["n"], time.perf_counter() - start, ok

    def fork_join(p: dict[str, Any]) -> tuple[int, float, bool]:
        done, out = threading.Event(), list[int]()
        master = spawn(Master, p["n"], done, out)
        master.tell(("workers", [spawn(Worker, master) for _ in range(p["workers"])]))
        start = time.perf_counter()
        master.tell(("go", None))
        ok = done.wait(TIMEOUT_S) and out == [_square_sum(p["n"])]
        return 2 * p["n"], time.perf_counter() - start, ok

    def counting(p: dict[str, Any]) -> tuple[int, float, bool]:
        counter = spawn(Counter)
        start = time.perf_counter()
        tell = counter.tell
        for _ in range(p["n"]):
            tell(1)
        ok = counter.ask("get", timeout=TIMEOUT_S) == p["n"]
        return p["n"] + 1, time.perf_counter() - start, ok

    return {
        "ping_pong": ping_pong,
        "thread_ring": thread_ring,
        "fork_join": fork_join,
        "counting": counting,
    }


def _run_shepherd(workload: str, params: dict[str, Any]) -> tuple[int, float, bool]:
    from actors.runtime.runtime import ShepherdActor, ThreadedRuntime

    runtime = ThreadedRuntime()
    try:
        return _pykka_style(ShepherdActor, runtime.spawn)[workload](params)
    finally:
        runtime.shutdown()


def _run_pykka(workload: str, params: dict[str, Any]) -> tuple[int, float, bool]:
    import pykka

    def spawn(cls: type[pykka.ThreadingActor], *args: Any) -> Any:
        return cls.start(*args)

    try:
        return _pykka_style(pykka.ThreadingActor, spawn)[workload](params)
    finally:
        pykka.ActorRegistry.stop_all()


# ---------------------------------------------------------------------- Thespian


def _run_thespian(workload: str, params: dict[str, Any]) -> tuple[int, float, bool]:
    from thespian.actors import Actor, ActorSystem

    class Ping(Actor):  # type: ignore[misc]
        def receiveMessage(self, message: Any, sender: Any) -> None:
            if isinstance(message, tuple):  # ("go", pong, n) from the benchmark
                _, self.pong, self.left = message
                self.asker = sender
            if self.left == 0:
                self.send(self.asker, "done")
                return
            self.left -= 1
            self.send(self.pong, None)

    class Pong(Actor):  # type: ignore[misc]
        def receiveMessage(self, message: Any, sender: Any) -> None:
            self.send(sender, None)

    class RingNode(Actor):  # type: ignore[misc]
        first: Any
        next: Any
        asker: Any

        def receiveMessage(self, message: Any, sender: Any) -> None:
            # the token is an int; ("next", address, first) links the ring, ("go", n) from the
            # benchmark starts the token at the first node, which answers once told "done"
            if isinstance(message, int):
                if message == 0:
                    self.send(self.first, "done")
                else:
                    self.send(self.next, message - 1)
            elif message == "done":
                self.send(self.asker, "done")
            elif message[0] == "next":
                _, self.next, self.first = message
            else:
                self.asker = sender
                self.send(self.next, message[1] - 1)

    class Worker(Actor):  # type: ignore[misc]
        def receiveMessage(self, message: Any, sender: Any) -> None:
            self.send(sender, message * message)

    class Master(Actor):  # type: ignore[misc]
        def receiveMessage(self, message: Any, sender: Any) -> None:
            if isinstance(message, tuple):  # ("go", n, workers)
                _, self.n, workers = message
                self.asker, self.got, self.total = sender, 0, 0
                k = len(workers)
                for i in range(self.n):
                    self.send(workers[i % k], i)
                return
            self.got += 1
            self.total += message
            if self.got == self.n:
                self.send(self.asker, self.total)

    class Counter(Actor):  # type: ignore[misc]
        count = 0

        def receiveMessage(self, message: Any, sender: Any) -> None:
            if message == "get":
                self.send(sender, self.count)
            else:
                self.count += 1

    system = ActorSystem("simpleSystemBase")
    n = params["n"]
    try:
        if workload == "ping_pong":
            ping, pong = system.createActor(Ping), system.createActor(Pong)
            start = time.perf_counter()
            ok = system.ask(ping, ("go", pong, n), TIMEOUT_S) == "done"
            return 2 * n, time.perf_counter() - start, ok
        if workload == "thread_ring":
            nodes = [system.createActor(RingNode) for _ in range(params["ring"])]
            for i, node in enumerate(nodes):
                system.tell(node, ("next", nodes[(i + 1) % len(nodes)], nodes[0]))
            start = time.perf_counter()
            ok = system.ask(nodes[0], ("go", n), TIMEOUT_S) == "done"
            return n, time.perf_counter() - start, ok
        if workload == "fork_join":
            master = system.createActor(Master)
            workers = [system.createActor(Worker) for _ in range(params["workers"])]
            start = time.perf_counter()
            ok = system.ask(master, ("go", n, workers), TIMEOUT_S) == _square_sum(n)
            return 2 * n, time.perf_counter() - start, ok
        counter = system.createActor(Counter)
        start = time.perf_counter()
        for _ in range(n):
            system.tell(counter, 1)
        ok = system.ask(counter, "get", TIMEOUT_S) == n
        return n + 1, time.perf_counter() - start, ok
    finally:
        system.shutdown()


RUNNERS = {
    "shepherd": _run_shepherd,
    "pykka_threading_actor": _run_pykka,
    THESPIAN: _run_thespian,
}


def runtime_job(params: dict[str, Any]) -> dict[str, Any]:
    subject, workload = params["subject"], params["workload"]
    messages, seconds, ok = RUNNERS[subject](workload, params)
    return {
        "subject": subject,
        "workload": workload,
        "params": params,
        "messages": messages,
        "seconds": seconds,
        "msgs_per_s": messages / seconds if seconds > 0 else 0.0,
        "ok": bool(ok),
    }
