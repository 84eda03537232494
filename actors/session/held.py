"""The broker's held runs: decided, and waiting for their records (or an earlier run's) to be
durable before their effects run (the broker's rules: :mod:`actors.session.broker`).

One queue, in the order the runs were decided. A run with records gets the next ticket and
its records go to the journal's writer (:mod:`actors.session.journal_writer`); a run without
records held behind others has no ticket and runs as soon as every run before it has.
``release(upto)`` runs, in order, every held run up to the writer's last durable ticket and
answers its caller (or, for a call whose answer waits for its tasks, hands its reply on);
``fail`` answers every held caller with the error and runs nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import pykka

from actors.runtime.runtime import tell_quietly
from actors.session.journal_writer import Append
from actors.session.runs import Run

__all__ = ["HeldRuns"]


class _Held:
    """A run decided and not run yet: its ticket (None: no records of its own), what runs it
    and answers, what it gathers for the helper actors, and the reply it owes (None: told)."""

    __slots__ = ("open", "reply", "run", "ticket", "work")

    def __init__(
        self,
        ticket: int | None,
        work: Callable[[], Any],
        run: Run,
        reply: pykka.Future[Any] | None,
    ) -> None:
        self.ticket = ticket
        self.work = work
        self.run = run
        self.reply = reply
        #: still being decided (:meth:`HeldRuns.open`): nothing behind it runs before it
        self.open = False


class HeldRuns:
    def __init__(
        self,
        tell_helpers: Callable[[Run], None],
        log: Any,
        defer: Callable[[int, pykka.Future[Any] | None, Any], bool],
    ) -> None:
        #: the journal's one writer (set when the broker starts)
        self.writer: pykka.ActorRef[Any] | None = None
        self._tell_helpers = tell_helpers
        #: a run whose answer is a task's decision hands its reply on (``Run.later``)
        self._defer = defer
        self._log = log
        self._queue: deque[_Held] = deque()
        self._ticket = 0
        self._upto = 0  # the last ticket written

    def __len__(self) -> int:
        return len(self._queue)

    def hold(
        self,
        records: list[Any],
        work: Callable[[], Any],
        run: Run,
        reply: pykka.Future[Any] | None,
    ) -> None:
        self._queue.append(_Held(self._append(records), work, run, reply))

    def open(self) -> _Held:
        """A place in the queue for a run still being decided (the reports of a call's
        tasks, gathered into one run): every run decided from now on waits behind it."""
        held = _Held(None, lambda: None, Run(), None)
        held.open = True
        self._queue.append(held)
        return held

    def close(
        self,
        held: _Held,
        records: list[Any],
        work: Callable[[], Any],
        run: Run,
        reply: pykka.Future[Any] | None,
    ) -> None:
        """The run ``held`` kept a place for is decided: its records to the writer; it runs
        in its place once they are durable."""
        held.ticket, held.work, held.run, held.reply = self._append(records), work, run, reply
        held.open = False
        self.release(self._upto)

    def _append(self, records: list[Any]) -> int | None:
        """``records`` to the writer: their ticket (None: no records)."""
        if not records:
            return None
        self._ticket += 1
        assert self.writer is not None, "the broker holds a run before it started"
        tell_quietly(self.writer, Append(self._ticket, records))
        return self._ticket

    def release(self, upto: int) -> None:
        """Run, in order, every held run whose records are durable (``upto``: the writer's
        last ticket written), and the runs without records held behind them."""
        self._upto = upto = max(self._upto, upto)
        queue = self._queue
        while queue and not queue[0].open and (queue[0].ticket or 0) <= upto:
            one = queue.popleft()
            try:
                answer = one.work()
            except Exception as exc:
                if one.reply is None:
                    self._log.opt(exception=exc).error("a held run failed")
                else:
                    one.reply.set_exception((type(exc), exc, exc.__traceback__))
            else:
                later = one.run.later
                if later is not None and self._defer(later, one.reply, answer):
                    pass  # answered once the tasks it told have reported
                elif one.reply is not None:
                    one.reply.set(answer)
            finally:
                self._tell_helpers(one.run)

    def fail(self, error: Exception) -> None:
        """The journal failed: no held run is run (none of it was durable); each caller is
        told ``error``."""
        queue, self._queue = self._queue, deque()
        for one in queue:
            if one.reply is not None:
                one.reply.set_exception((type(error), error, None))
