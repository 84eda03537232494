"""Tasks' acceptance checks, run off the broker's thread (the ``RunCheck`` and ``StopCheck``
effects; the rules: :mod:`protocol.session.checks`).

Rules:

1. **A check is a shell command in the agent's directory**, run as ``/bin/sh -c CMD`` in its
   own session and process group, its standard input empty, its output (stdout and stderr
   together) kept as a bounded tail, with ``SHEPHERD_TASK_ID``, ``SHEPHERD_AGENT`` (the
   agent's name), ``SHEPHERD_AGENT_ID`` and ``SHEPHERD_CHECK_ATTEMPT`` in its environment.
2. **It ends within its timeout**: past it, its process group is killed and the run counts
   as failed (``timed_out``). When it exits, whatever it left running in its session is
   stopped too: a check leaves nothing behind.
3. **A task's ending ends its check** (``StopCheck``): its process group is killed and its
   end is not told (the task has settled). A new run of the same task's check ends the one
   still running first.
4. **A check that cannot start is a failed run** (a directory gone, no shell), told like any
   other with the reason; nothing is only logged.
5. **A kill -9 of the parent leaves no second copy**: each run is tagged in its environment
   with the session and the task, and a run of a task's check first kills any process still
   carrying its tag (the run a killed parent left behind), before starting again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable

from actors.runtime.clock import SystemClock
from actors.runtime.log import logger
from actors.runtime.procs import (
    OUTPUT_TAIL_BYTES,
    OutputTail,
    kill_all,
    pump_process,
    signal_group,
    tagged,
    terminate_session,
)
from protocol.records.checks import CheckDone, Evidence, tail_lines
from protocol.session.effects import RunCheck

__all__ = ["CHECK_TAG", "CheckRunner"]

#: the environment variable that tags a check's processes with its session and task (rule 5)
CHECK_TAG = "SHEPHERD_CHECK"
#: how long what a finished check left in its session gets between SIGTERM and SIGKILL
_LEFTOVER_GRACE_S = 0.5


class _Run:
    """One run of a check: its process once started, and why it was ended early (if it was).
    Registered before its process starts, so a stop that comes first is never missed."""

    __slots__ = ("proc", "stopped", "timed_out")

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False
        self.timed_out = False

    def kill(self) -> None:
        if self.proc is not None:
            signal_group(self.proc.pid, signal.SIGKILL)


class CheckRunner:
    """Runs each task's check on a thread of its own (checks run side by side: each is a
    task's, and a slow one must not hold up another task's)."""

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._clock = SystemClock()
        self._lock = threading.Lock()
        self._running: dict[str, _Run] = {}
        self._closed = False

    def run(self, effect: RunCheck, answer: Callable[[CheckDone], object]) -> None:
        self.stop(effect.task_id)  # rule 3: one run per task
        run = _Run()
        with self._lock:
            if self._closed:
                return  # the session is stopping: its restart runs the check again
            self._running[effect.task_id] = run
        thread = threading.Thread(
            target=self._guarded,
            args=(effect, run, answer),
            name=f"shepherd-check-{effect.task_id}",
            daemon=True,
        )
        thread.start()

    def stop(self, task_id: str) -> None:
        """Rule 3: end the task's running check (nothing if none runs)."""
        with self._lock:
            run = self._running.pop(task_id, None)
            if run is not None:
                run.stopped = True
        if run is not None:
            run.kill()

    def close(self) -> None:
        """The session stops: every running check is killed, none is started after."""
        with self._lock:
            self._closed = True
            runs, self._running = list(self._running.values()), {}
            for run in runs:
                run.stopped = True
        for run in runs:
            run.kill()

    # ------------------------------------------------------------------ one run

    def _guarded(self, effect: RunCheck, run: _Run, answer: Callable[[CheckDone], object]) -> None:
        started = self._clock.monotonic()
        try:
            evidence = self._run(effect, run, started)
        except Exception as exc:  # rule 4: told, never only logged
            logger.opt(exception=True).error("check of task {} failed to run", effect.task_id)
            evidence = self._not_run(effect, started, f"the check could not run: {exc!r}")
        with self._lock:
            if self._running.get(effect.task_id) is run:
                del self._running[effect.task_id]
        if evidence is not None and not run.stopped:
            answer(CheckDone(task_id=effect.task_id, evidence=evidence))

    def _run(self, effect: RunCheck, run: _Run, started: float) -> Evidence | None:
        tag = f"{self._session_id}/{effect.task_id}"
        kill_all(tagged(CHECK_TAG, tag))  # rule 5
        env = {
            **os.environ,
            "SHEPHERD_TASK_ID": effect.task_id,
            "SHEPHERD_AGENT": effect.agent_name,
            "SHEPHERD_AGENT_ID": effect.agent_id,
            "SHEPHERD_CHECK_ATTEMPT": str(effect.attempt),
            CHECK_TAG: tag,
        }
        try:
            with self._lock:  # started, or stopped before it started: never both (rule 3)
                if run.stopped:
                    return None
                proc = run.proc = subprocess.Popen(
                    ["/bin/sh", "-c", effect.check.command],
                    cwd=effect.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:  # rule 4
            where = f" in {effect.cwd}" if effect.cwd else ""
            why = f"the check could not start{where}: {exc.strerror or exc}"
            return self._not_run(effect, started, why)
        timer = threading.Timer(effect.check.timeout_s, self._time_out, (run,))
        timer.daemon = True
        timer.start()
        tail = OutputTail(OUTPUT_TAIL_BYTES)
        try:
            pump_process(proc, lambda _stream, data: tail.write(data))
            proc.wait()
        finally:
            timer.cancel()
            with contextlib.suppress(OSError):
                terminate_session(proc.pid, grace_s=_LEFTOVER_GRACE_S)  # rule 2
            if proc.stdout is not None:
                proc.stdout.close()
        if run.stopped:
            return None  # rule 3: the task ended; nobody waits for this run
        status = proc.returncode
        return Evidence(
            command=effect.check.command,
            attempt=effect.attempt,
            exit_status=None if run.timed_out or status < 0 else status,
            duration_s=round(self._clock.monotonic() - started, 3),
            output_tail=tail_lines(tail.text()),
            timed_out=run.timed_out,
            error=(
                f"killed at its timeout of {effect.check.timeout_s:g} s"
                if run.timed_out
                else (f"killed by signal {-status}" if status < 0 else None)
            ),
        )

    @staticmethod
    def _time_out(run: _Run) -> None:
        run.timed_out = True
        run.kill()

    def _not_run(self, effect: RunCheck, started: float, why: str) -> Evidence:
        return Evidence(
            command=effect.check.command,
            attempt=effect.attempt,
            exit_status=None,
            duration_s=round(self._clock.monotonic() - started, 3),
            error=why,
        )
