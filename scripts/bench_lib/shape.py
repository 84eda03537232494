"""The shape's own floor: what settling ``n`` tasks at once costs in the session's actor shape
with none of its rules (the ``settle_shape`` job).

The ``settle`` job measures the session; ``settle_floor`` what any design must do (read,
decode, one write, one fsync, the window). Between the two sits what the user's shape itself
costs: every task and every watcher an actor, on this runtime. Here the same actors exchange
the same messages per settlement as the session's do, and decide nothing:

- the parent's inbox is received as the ``settle`` job receives it (batches of at most 256,
  each handed to the broker in one ask, answered once durable; each envelope through the
  transport's gate);
- the broker routes each ``done`` to its task's actor (run in place, as the session's is),
  which reports back; once a batch's reports are in, its records (the envelopes, one line
  each) go to the journal's writer actor (one write, one fsync), and once durable each
  result goes to its watcher's actor, each receipt to its agent's actor (which hands it to
  the simulated agent's actor), each task's actor is retired, and the batch is answered;
- a watcher opens its window (a timer closing 25 ms after the ``done`` was sent, or at once
  if that has passed), and at its close tells the sink and stops.

So its latency is a floor for this shape on this runtime: whatever the session's rules cost
comes on top of it. It is a measurement, not a design: nothing here is Shepherd's.
"""

from __future__ import annotations

import gc
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from actors.runtime.runtime import ShepherdActor, ThreadedRuntime, tell_quietly
from actors.runtime.transport import PARENT_INBOX
from bench_lib.common import latency_summary, now_ns
from bench_lib.sessions import WAIT_S, BatchReceivingTransport, done_envelope
from protocol.core.ids import IdKind
from protocol.wire.envelopes import AnyEnvelope, TaskDoneEnvelope, encode_envelope

WINDOW_S = 0.025


class _Routed:
    __slots__ = ("env",)

    def __init__(self, env: TaskDoneEnvelope) -> None:
        self.env = env


class _Report:
    __slots__ = ("env",)

    def __init__(self, env: TaskDoneEnvelope) -> None:
        self.env = env


class _Batch:
    __slots__ = ("envs",)

    def __init__(self, envs: list[AnyEnvelope]) -> None:
        self.envs = envs


class _Append:
    __slots__ = ("lines",)

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines


class _Committed:
    pass


class _Result:
    __slots__ = ("opened", "task_id")

    def __init__(self, task_id: str, opened: float) -> None:
        self.task_id, self.opened = task_id, opened


class _Flush:
    pass


class _Receipt:
    __slots__ = ("env",)

    def __init__(self, env: TaskDoneEnvelope) -> None:
        self.env = env


_COMMITTED, _FLUSH = _Committed(), _Flush()


class ShapeTask(ShepherdActor):
    runs_in_place = True

    def __init__(self, broker: Any) -> None:
        super().__init__()
        self._broker = broker

    def on_receive(self, message: Any) -> Any:
        tell_quietly(self._broker, _Report(message.env))
        return None


class ShapeWriter(ShepherdActor):
    def __init__(self, path: Path, broker: Any) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._broker = broker

    def on_receive(self, message: Any) -> Any:
        os.write(self._fd, b"".join(message.lines))
        os.fsync(self._fd)
        tell_quietly(self._broker, _COMMITTED)
        return None

    def on_stop(self) -> None:
        os.close(self._fd)


class _Sink:
    """When each task's result reached the sink; ``all_arrived`` once every one did."""

    def __init__(self, expected: int) -> None:
        self.arrived: dict[str, int] = {}
        self._expected = expected
        self._lock = threading.Lock()
        self.all_arrived = threading.Event()

    def tell(self, task_id: str) -> None:
        at = now_ns()
        with self._lock:
            self.arrived[task_id] = at
            if len(self.arrived) >= self._expected:
                self.all_arrived.set()


class ShapeWatcher(ShepherdActor):
    def __init__(self, sink: _Sink) -> None:
        super().__init__()
        self._sink = sink
        self._task_id = ""

    def on_receive(self, message: Any) -> Any:
        if message is _FLUSH:
            self._sink.tell(self._task_id)
            self._stop()
            return None
        self._task_id = message.task_id
        delay = max(0.0, message.opened + WINDOW_S - time.time())
        self.clock.call_later(delay, lambda: tell_quietly(self.actor_ref, _FLUSH))
        return None


class ShapeChild(ShepherdActor):
    def on_receive(self, message: Any) -> Any:
        return None


class ShapeAgent(ShepherdActor):
    def __init__(self, child: Any) -> None:
        super().__init__()
        self._child = child

    def on_receive(self, message: Any) -> Any:
        tell_quietly(self._child, message)
        return None


class ShapeBroker(ShepherdActor):
    def __init__(self, journal: Path) -> None:
        super().__init__()
        self._journal = journal
        self.tasks: dict[str, Any] = {}
        self.watchers: dict[str, Any] = {}
        self.agents: dict[str, Any] = {}
        self._owed = 0
        self._reported: list[TaskDoneEnvelope] = []
        self._answer: Any = None
        self._writer: Any = None

    def on_start(self) -> None:
        self._writer = self.runtime.spawn(ShapeWriter, self._journal, self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        if type(message) is _Report:
            self._reported.append(message.env)
            self._owed -= 1
            if self._owed == 0:
                lines = [encode_envelope(env) + b"\n" for env in self._reported]
                tell_quietly(self._writer, _Append(lines))
            return None
        if message is _COMMITTED:
            for env in self._reported:
                task_id = env.task_id
                assert task_id is not None
                opened = min(env.created_at, time.time())
                tell_quietly(self.watchers.pop(task_id), _Result(task_id, opened))
                tell_quietly(self.agents[env.sender_id], _Receipt(env))
                self.runtime.retire(self.tasks.pop(task_id))
            self._reported = []
            reply, self._answer = self._answer, None
            reply.set(None)
            return None
        if type(message) is _Batch:
            self._answer = self.answer_later()
            self._owed = len(message.envs)
            for done in message.envs:
                assert isinstance(done, TaskDoneEnvelope)
                assert done.task_id is not None
                tell_quietly(self.tasks[done.task_id], _Routed(done))
            return None
        return super().on_receive(message)


def settle_shape_job(params: dict[str, Any]) -> dict[str, Any]:
    """``n`` tasks, each with its actor, its watcher's actor and its agent's two actors, in
    the shape's own floor (the module's docstring); all settle at once, flat out: latency of
    each from its ``done``'s hand-off to its watcher telling the sink."""
    n = params["n"]
    runtime = ThreadedRuntime()
    transport = BatchReceivingTransport(n)
    with tempfile.TemporaryDirectory(prefix="shepherd-shape-") as tmp:
        broker = runtime.spawn(ShapeBroker, Path(tmp) / "journal.jsonl")
        actor: ShapeBroker = broker.actor_inbox.actor  # type: ignore[attr-defined]

        def hand_over(batch: Any) -> None:
            future = broker.ask(_Batch(list(batch)), block=False)
            future.get(timeout=WAIT_S)

        sub = transport.subscribe_batch(PARENT_INBOX, hand_over)
        # the broker's tables are filled from here, before anything is published (the
        # benchmark's set-up, not a pattern: the session's broker is told of each actor)
        session_id = runtime.ids.new(IdKind.SESSION)
        sink = _Sink(n)
        built = []
        for _ in range(n):
            agent_id, task_id = runtime.ids.new(IdKind.AGENT), runtime.ids.new(IdKind.TASK)
            capability = runtime.ids.secret()
            transport.admit(agent_id, session_id, capability)
            actor.tasks[task_id] = runtime.spawn(ShapeTask, broker)
            actor.watchers[task_id] = runtime.spawn(ShapeWatcher, sink)
            actor.agents[agent_id] = runtime.spawn(ShapeAgent, runtime.spawn(ShapeChild))
            message_id = runtime.ids.new(IdKind.MESSAGE)
            built.append(done_envelope(message_id, session_id, agent_id, capability, task_id))
        gc.collect()
        sent: dict[str, int] = {}
        publish = transport.publish
        for envelope in built:
            assert envelope.task_id is not None
            stamped = msgspec.structs.replace(envelope, created_at=time.time())
            sent[envelope.task_id] = now_ns()
            publish(PARENT_INBOX, stamped)
        complete = sink.all_arrived.wait(WAIT_S)
        arrived = sink.arrived
        samples = [arrived[t] - s for t, s in sent.items() if t in arrived]
        sub.cancel()
        runtime.shutdown()
    return {"n": n, "complete": complete, "settled": len(samples), **latency_summary(samples)}
