"""Where the parent answers the calls of its clients (``shepherd ...``, MCP, a node): each call
envelope is run on a small pool, its answer published to the caller's reply inbox.

Rules:

1. Every call with a reply inbox gets exactly one answer: its data, or the typed error that
   refused it. An answer too big for one envelope is cut to fit or, if it cannot be, is
   ``limit_exceeded``, sent at once: the caller never waits in vain. A bug still answers
   (``internal error``), logged with its traceback.
2. A ``wait`` holds no thread: it is started on the pool (one ask of the broker) and its
   watcher's actor answers it when its tasks have settled or its timeout passed. At most
   :data:`MAX_WAITING_CALLS` wait at once (each holds a watcher and its caller's reply inbox);
   past that a wait is refused at once (``limit_exceeded``, saying to use ``watch``).
3. ``shutdown`` is answered first, then done: the shutdown removes the caller's inbox.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from actors.runtime.clock import Clock
from actors.runtime.ids import IdSource
from actors.runtime.log import logger
from actors.runtime.transport import Transport
from protocol.calls.answers import fit_answer
from protocol.core.errors import LimitExceeded, ShepherdError
from protocol.core.ids import PARENT_ID, IdKind
from protocol.core.limits import answer_budget
from protocol.wire.envelopes import CallEnvelope, ResultEnvelope

__all__ = ["MAX_WAITING_CALLS", "CallDesk"]

#: ``wait`` calls that may wait at once (each a watcher actor, no thread)
MAX_WAITING_CALLS = 64


class CallDesk:
    """Runs calls with ``run(op, args)`` and answers them through ``mailbox`` (module rules)."""

    def __init__(
        self,
        run: Callable[[str, dict[str, Any]], Any],
        wait: Callable[[dict[str, Any], Callable[[Any], object]], None],
        mailbox: Transport,
        *,
        session_id: str,
        ids: IdSource,
        clock: Clock,
        max_envelope_bytes: int,
        shutdown: Callable[[], None],
    ) -> None:
        self._run, self._wait, self._mailbox = run, wait, mailbox
        self._session_id, self._ids, self._clock = session_id, ids, clock
        self._budget = answer_budget(max_envelope_bytes)
        self._shutdown = shutdown
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="shepherd-call")
        self._waiting = threading.BoundedSemaphore(MAX_WAITING_CALLS)

    def on_call(self, env: CallEnvelope) -> None:
        if env.op != "wait":
            self.pool.submit(self._answer, env)
            return
        if not self._waiting.acquire(blocking=False):  # rule 2
            if env.reply_inbox is not None:
                self._answer_error(
                    env,
                    LimitExceeded(
                        f"{MAX_WAITING_CALLS} wait calls are already waiting; use watch (it "
                        "returns at once and notifies), or wait with a timeout"
                    ),
                )
            return
        self.pool.submit(self._start_wait, env)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _start_wait(self, env: CallEnvelope) -> None:
        """Rule 2: the wait's watcher calls ``answer`` (once); a wait refused at its start is
        answered here."""

        def answer(value: Any) -> None:
            try:
                self._send(env, self._outcome(env, lambda: value))
            finally:
                self._waiting.release()

        try:
            self._wait(env.args, answer)
        except Exception as exc:
            self._waiting.release()
            self._send(env, self._outcome(env, functools.partial(_reraise, exc)))

    def _answer(self, env: CallEnvelope) -> None:
        """Rules 1 and 3."""
        if env.op == "shutdown":
            if env.reply_inbox is not None:
                with contextlib.suppress(ShepherdError):
                    self._mailbox.publish(
                        env.reply_inbox, self._result(env, {"shutting_down": True})
                    )
            threading.Thread(target=self._shutdown, name="shepherd-shutdown").start()
            return
        self._send(env, self._outcome(env, lambda: self._run(env.op, env.args)))

    def _outcome(self, env: CallEnvelope, compute: Callable[[], Any]) -> ResultEnvelope:
        """The answer to ``env``: what ``compute`` gives, fitted to an envelope, or the error
        it raised (a bug too: ``internal error``, logged)."""
        try:
            return self._result(env, msgspec.to_builtins(fit_answer(compute(), self._budget)))
        except ShepherdError as exc:
            return self._result(env, error=exc)
        except Exception as exc:  # a bug must still answer the caller
            logger.opt(exception=True).error("call {op} failed", op=env.op)
            return self._result(env, error=ShepherdError(f"internal error: {exc!r}"))

    def _send(self, env: CallEnvelope, result: ResultEnvelope) -> None:
        if env.reply_inbox is None:
            return
        try:
            self._mailbox.publish(env.reply_inbox, result)
        except ShepherdError as exc:
            if not result.ok:
                logger.warning(
                    "could not answer call {id}: {err}", id=env.message_id, err=exc.message
                )
                return
            # the answer itself could not be sent (too big, the inbox gone or full): say why
            self._answer_error(env, exc)

    def _result(
        self, env: CallEnvelope, data: Any = None, error: ShepherdError | None = None
    ) -> ResultEnvelope:
        """The answer to ``env``: its data, or the error that refused it."""
        return ResultEnvelope(
            message_id=self._ids.new(IdKind.MESSAGE),
            session_id=self._session_id,
            sender_id=PARENT_ID,
            target_id=env.sender_id,
            created_at=self._clock.now(),
            call_id=env.message_id,
            ok=error is None,
            data=data,
            error=error.info() if error is not None else None,
        )

    def _answer_error(self, env: CallEnvelope, exc: ShepherdError) -> None:
        assert env.reply_inbox is not None
        try:
            self._mailbox.publish(env.reply_inbox, self._result(env, error=exc))
        except ShepherdError as again:
            logger.warning(
                "could not answer call {id}: {err}", id=env.message_id, err=again.message
            )


def _reraise(exc: Exception) -> Any:
    raise exc
