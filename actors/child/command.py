"""The ``command`` adapter: any CLI agent, one process per turn.

Options (``SHEPHERD_AGENT_OPTIONS``: ``cmd``, ``resume_cmd``, ``cwd``, ``kill_grace_s``) are
described and checked in :mod:`actors.child.command_options`.

Rules:
- A turn is one run of ``bash -c TEMPLATE`` with ``{message}`` replaced by the shell-quoted
  text of what the agent is told (:func:`~protocol.calls.render.render_task_context` for a task,
  :func:`~protocol.calls.render.render_delivery` for a message, reply or notice). The process gets
  the bridge's ``SHEPHERD_*`` environment, so the agent calls ``shepherd-child message|done``
  from its shell. Its stdout streams out as runtime ``output`` events, batched (by line, at
  most every 50 ms or 8 000 characters); its stderr goes to the bridge's log, and its tail is
  quoted if the turn fails.
- A turn ending (whatever its exit status) is ``turn_end`` and nothing else: a non-zero exit
  is an error ``output`` before it, never a task settlement and never a bridge exit.
- ``follow_up`` deliveries queue while a turn runs. When the agent is idle, ALL queued
  deliveries start one turn together, joined by blank lines, in arrival order (one process
  start instead of N, and the agent sees everything it missed at once), up to a size that
  keeps the command line under Linux's 128 KiB per-argument limit; the rest waits.
- ``steer`` interrupts: the running turn's process group gets SIGTERM (SIGKILL after the
  grace), and the next turn starts with the steer text(s) first, then queued follow-ups.
  The interrupted turn's text is not sent again (a resumable agent has it in its history).
- ``control`` ``abort`` interrupts the running turn the same way; queued deliveries stay
  queued and start the next turn.
- ``control`` ``cancel_task`` (the parent ended the task: cancel, fail, deadline) stops the
  task's work: the deliveries queued for that task (its task envelope, messages and replies
  about it) are dropped, the running turn is interrupted if it works for that task (it was
  started with or after the task's envelope), and the next queued delivery starts the next
  turn. The agent is told that its task ended with its next turn's input, never with a turn
  of its own.
- A provider's refusal (:mod:`actors.child.holding`): ``shepherd-child rate-limited|provider-error``
  from the turn's shell reports it (:mod:`actors.child.turn_reports`); when that turn's process
  has ended, the adapter publishes ``rate_limited`` / ``provider_error`` and then the turn's
  ``turn_end``, and waits: no turn starts until ``control resume``, which runs the refused turn
  again, the same command line (template and message), as a new turn, then what was queued.
  An interrupted turn's report is not acted on (the parent stopped it). ``control hold``
  stops new turns the same way until ``resume``.
- The agent is told the commands it has: ``shepherd-child message|done`` from its shell
  (:data:`~protocol.calls.render.CHILD_SHELL`).
- Every turn runs in its own process group (``process_group=0``) inside the bridge's
  session, so one ``killpg`` stops a turn and everything it started; the bridge kills the
  running turn at exit and then sweeps its whole session (``actors.child.bridge``).

Theory of operation: everything here runs on the bridge's core thread, except one reader
thread per turn (:func:`~actors.runtime.procs.pump_process`) that posts stdout/stderr chunks and,
after the process exited, "finished" back to the core. The core reaps the process only when
it handles "finished", so until then the turn's pid, and so its process group id, cannot be
reused under a ``killpg``.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Mapping
from typing import IO, Any, ClassVar

from actors.child.adapters import AgentContext, control_reason, show_refusal
from actors.child.command_options import CommandOptions, check_command_options
from actors.child.command_turn import Queued, Turn, shorten
from actors.child.holding import Holding
from actors.child.turn_reports import ENV_TURN_REPORT, TurnReports
from actors.runtime.log import logger
from actors.runtime.procs import exit_status, pump_process, signal_group
from actors.tracing.variables import ENV_TASK_ID
from protocol.calls.render import (
    CHILD_SHELL,
    render_delivery,
    render_task_context,
    render_task_ended,
)
from protocol.core.errors import ShepherdError
from protocol.records.refusals import Refusal
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    TaskEnvelope,
)

__all__ = ["CommandAdapter"]

#: Output is published at least this often while a turn prints...
FLUSH_S = 0.05
#: ...or as soon as this many characters are pending (one event never exceeds it).
FLUSH_CHARS = 8000
#: Keep the expanded command under MAX_ARG_STRLEN (128 KiB on Linux), with room to spare.
MAX_COMMAND_BYTES = 120 * 1024


class CommandAdapter:
    name: ClassVar[str] = "command"

    @staticmethod
    def check_options(options: Mapping[str, Any], cwd: str) -> CommandOptions:
        """The options, checked (the parent runs this before starting the bridge)."""
        return check_command_options(options, cwd)

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None:
        opts = self.check_options(options, ctx.cwd)
        self._ctx = ctx
        self._cmd = opts.cmd
        self._resume = opts.resume_cmd
        self._cwd = opts.cwd
        self._grace = opts.kill_grace_s
        self._environ = ctx.child_environ()
        #: queued deliveries: (text, the task it is about, it is that task's envelope)
        self._steers: deque[Queued] = deque()
        self._follow_ups: deque[Queued] = deque()
        #: told with the next turn's input: the tasks the parent ended
        self._ended: list[str] = []
        #: the task whose envelope the agent has been given (until the parent ends it)
        self._task_id: str | None = None
        self._turn: Turn | None = None
        self._turns_run = 0
        #: started again by ``serve --recover``: the agent's conversation goes on, so even the
        #: first turn runs ``resume_cmd``
        self._recovered = bool(options.get("recovered"))
        self._closed = False
        self._log = logger.bind(agent=ctx.env.name or ctx.env.agent_id)
        #: the parent's hold, and the wait after a refused turn (its command line)
        self._holding: Holding[str] = Holding(ctx.runtime)
        self._reports = TurnReports()

    # ------------------------------------------------------------------ adapter

    def start(self) -> None:
        pass  # idle until something is delivered

    def deliver(self, envelope: AnyEnvelope) -> None:
        if self._closed:
            return
        match envelope:
            case TaskEnvelope():
                text = render_task_context(envelope, CHILD_SHELL)
                self._enqueue(Queued(text, envelope.task_id, True), steer=False)
            case MessageEnvelope() | ReplyEnvelope():
                text = render_delivery(envelope, CHILD_SHELL)
                steer = envelope.delivery == "steer"
                self._enqueue(Queued(text, envelope.task_id), steer=steer)
            case NoticeEnvelope():
                self._enqueue(Queued(render_delivery(envelope, CHILD_SHELL)), steer=False)
            case AckEnvelope():
                show_refusal(self._ctx, envelope)
            case ControlEnvelope(action="cancel_task", task_id=task_id) if task_id is not None:
                self._cancel_task(task_id, envelope)
            case ControlEnvelope(action="cancel_task" | "abort"):
                why = control_reason(envelope)
                self._ctx.runtime("output", text=f"[shepherd] {why}")
                self._interrupt(why)
                if self._holding.drop_refused():
                    self._start_next()
            case ControlEnvelope(action="hold"):
                self._holding.hold(envelope)
            case ControlEnvelope(action="resume"):
                task_id = self._holding.refused_task
                command = self._holding.resume()
                if command is not None and self._turn is None:
                    self._run(command, task_id)
                else:
                    self._start_next()
            case _:
                self._log.debug("ignored {}", envelope.__struct_config__.tag)

    def close(self) -> None:
        """Stop the running turn and wait for it (SIGTERM, SIGKILL after the grace)."""
        self._closed = True
        self._reports.close()
        turn = self._turn
        if turn is None or turn.finished:
            return
        for timer in (turn.flush_timer, turn.kill_timer):
            if timer is not None:
                timer.cancel()
        signal_group(turn.pgid, signal.SIGTERM)
        try:
            turn.proc.wait(timeout=self._grace)
        except subprocess.TimeoutExpired:
            signal_group(turn.pgid, signal.SIGKILL)
        signal_group(turn.pgid, signal.SIGKILL)  # stragglers of the group (leader reaped next)
        turn.proc.wait()
        if turn.reader is not None:
            turn.reader.join(timeout=self._grace + 1)
        self._close_pipes(turn)
        turn.finished = True

    # ------------------------------------------------------------------ queue

    def _enqueue(self, item: Queued, *, steer: bool) -> None:
        (self._steers if steer else self._follow_ups).append(item)
        if self._holding.blocked and self._turn is None:
            self._holding.queued("the delivery")
        if self._turn is None:
            self._start_next()
        elif steer:
            self._interrupt("steered")

    def _cancel_task(self, task_id: str, envelope: ControlEnvelope) -> None:
        """The parent ended ``task_id``: stop its work (see the module rules)."""
        why = control_reason(envelope)
        dropped = 0
        for source in (self._steers, self._follow_ups):
            kept = [item for item in source if item.task_id != task_id]
            dropped += len(source) - len(kept)
            source.clear()
            source.extend(kept)
        given = self._task_id == task_id
        if given:
            self._task_id = None
            self._ended.append(render_task_ended(task_id, envelope.reason))
        note = f"; {dropped} queued deliver{'y' if dropped == 1 else 'ies'} for it dropped"
        self._ctx.runtime("output", text=f"[shepherd] {why}" + (note if dropped else ""))
        turn = self._turn
        if turn is not None and turn.task_id == task_id:
            self._interrupt(why)
        if self._holding.drop_refused(task_id):
            self._start_next()

    def _take_message(self) -> str:
        """What the ended tasks' notes say, then steers, then follow-ups, joined by blank
        lines, within the size limit. Taking a task's envelope gives the agent that task."""
        parts: list[str] = []
        size = 0
        for text in self._ended:  # a few short notes: they always fit
            parts.append(text)
            size += len(shlex.quote(text).encode()) + 4
        self._ended.clear()
        taken = 0
        for source in (self._steers, self._follow_ups):
            while source:
                quoted = len(shlex.quote(source[0].text).encode()) + 4
                if taken and size + quoted > MAX_COMMAND_BYTES - 8192:
                    return "\n\n".join(parts)
                taken += 1
                item = source.popleft()
                text = item.text
                if item.is_task:
                    self._task_id = item.task_id
                if quoted > MAX_COMMAND_BYTES - 8192:
                    text = shorten(text, MAX_COMMAND_BYTES // 8)
                parts.append(text)
                size += quoted
        return "\n\n".join(parts)

    # ------------------------------------------------------------------ turns

    def _start_next(self) -> None:
        if self._closed or self._turn is not None or not (self._steers or self._follow_ups):
            return
        if self._holding.blocked:
            return
        message = self._take_message()
        resuming = self._turns_run or self._recovered
        template = self._resume if resuming and self._resume else self._cmd
        self._run(template.replace("{message}", shlex.quote(message)), self._task_id)

    def _run(self, command: str, task_id: str | None) -> None:
        """Start a turn running ``command`` for ``task_id``."""
        number = self._turns_run + 1
        report = self._reports.path_for(number)
        self._ctx.runtime("turn_start")
        env = {
            **self._environ,
            **self._ctx.trace_environ(),
            "SHEPHERD_TURN": str(number),
            ENV_TURN_REPORT: report,
            **({ENV_TASK_ID: task_id} if task_id else {}),
        }
        try:
            argv, env = self._ctx.sandboxed(["bash", "-c", command], env)
            proc = subprocess.Popen(
                argv,
                cwd=self._cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0,
            )
        except (OSError, ShepherdError) as exc:  # a sandbox that cannot be made: not run
            self._log.error("turn {} could not start: {}", number, exc)
            self._ctx.runtime(
                "output", text=f"[shepherd] the agent command could not start: {exc}", is_error=True
            )
            self._ctx.runtime("turn_end", exit_code=127, is_error=True)
            return
        self._turns_run = number
        turn = Turn(number, proc, task_id, command=command, report=report)
        self._turn = turn
        self._log.info("turn {} started (pid {})", number, proc.pid)
        turn.reader = threading.Thread(
            target=self._read, args=(turn,), name=f"shepherd-turn-{number}", daemon=True
        )
        turn.reader.start()

    def _read(self, turn: Turn) -> None:
        """Reader thread: hand chunks and the end over to the core, nothing else."""
        post = self._ctx.post

        def on_data(stream: IO[bytes], data: bytes) -> None:
            if stream is turn.proc.stdout:
                post(lambda: self._stdout(turn, data))
            else:
                post(lambda: self._stderr(turn, data))

        try:
            pump_process(turn.proc, on_data, monotonic=self._ctx.clock.monotonic)
        finally:
            post(lambda: self._finished(turn))

    def _stdout(self, turn: Turn, data: bytes) -> None:
        if turn.finished:
            return
        turn.pending += turn.decoder.decode(data)
        if len(turn.pending) >= FLUSH_CHARS:
            self._flush(turn)
        elif turn.flush_timer is None:
            post = self._ctx.post
            turn.flush_timer = self._ctx.clock.call_later(
                FLUSH_S, lambda: post(lambda: self._flush(turn))
            )

    def _stderr(self, turn: Turn, data: bytes) -> None:
        turn.stderr_tail.write(data)
        for line in data.decode("utf-8", errors="replace").splitlines():
            self._log.info("turn {} stderr: {}", turn.number, line)

    def _flush(self, turn: Turn, *, final: bool = False) -> None:
        """Publish pending stdout: complete lines (everything when ``final``, or when one
        line alone reaches the batch size), in events of at most FLUSH_CHARS characters."""
        if turn.flush_timer is not None:
            turn.flush_timer.cancel()
            turn.flush_timer = None
        if final:
            turn.pending += turn.decoder.decode(b"", final=True)
            cut = len(turn.pending)
        else:
            cut = turn.pending.rfind("\n") + 1
            if cut == 0 and len(turn.pending) >= FLUSH_CHARS:
                cut = len(turn.pending)
        text, turn.pending = turn.pending[:cut], turn.pending[cut:]
        while text:
            piece, text = text[:FLUSH_CHARS], text[FLUSH_CHARS:]
            shown = piece[:-1] if piece.endswith("\n") else piece
            if shown:
                self._ctx.runtime("output", text=shown)

    def _interrupt(self, why: str) -> None:
        turn = self._turn
        if turn is None or turn.finished or turn.interrupted is not None:
            return
        turn.interrupted = why
        self._log.info("turn {} interrupted: {}", turn.number, why)
        signal_group(turn.pgid, signal.SIGTERM)
        post = self._ctx.post
        turn.kill_timer = self._ctx.clock.call_later(
            self._grace, lambda: post(lambda: self._escalate(turn))
        )

    def _escalate(self, turn: Turn) -> None:
        if not turn.finished:
            self._log.warning("turn {} ignored SIGTERM; killing its group", turn.number)
            signal_group(turn.pgid, signal.SIGKILL)

    def _finished(self, turn: Turn) -> None:
        if turn.finished:
            return  # close() already stopped and reaped it
        if turn.interrupted is not None:
            signal_group(turn.pgid, signal.SIGKILL)  # whatever of the group is left; not reaped yet
        code = exit_status(turn.proc.wait())
        turn.finished = True
        if turn.kill_timer is not None:
            turn.kill_timer.cancel()
        if turn.reader is not None:
            turn.reader.join(timeout=1.0)
        self._close_pipes(turn)
        self._flush(turn, final=True)
        if turn.interrupted is not None:
            self._ctx.runtime("output", text=f"[shepherd] turn interrupted ({turn.interrupted})")
        elif code != 0:
            stderr = turn.stderr_tail.text().strip()
            detail = f":\n{stderr}" if stderr else ""
            self._ctx.runtime(
                "output",
                text=f"[shepherd] the agent command exited with status {code}{detail}",
                is_error=True,
            )
        refusal = self._refusal_of(turn)
        if refusal is not None:
            self._holding.refused(refusal, turn.command, turn.task_id)
        self._ctx.runtime("turn_end", exit_code=code, is_error=code != 0)
        self._log.info("turn {} ended with status {}", turn.number, code)
        self._turn = None
        self._start_next()

    def _refusal_of(self, turn: Turn) -> Refusal | None:
        """What the turn reported of its provider's refusal (:mod:`actors.child.turn_reports`),
        unless the parent interrupted it."""
        report = self._reports.take(turn.report)
        if isinstance(report, str):
            self._ctx.runtime("output", text=f"[shepherd] {report}", is_error=True)
            return None
        if report is not None and turn.interrupted is not None:
            self._ctx.runtime(
                "output",
                text=f"[shepherd] the turn reported {report.kind} but was interrupted "
                f"({turn.interrupted}): it is not run again",
            )
            return None
        return report

    @staticmethod
    def _close_pipes(turn: Turn) -> None:
        for stream in (turn.proc.stdout, turn.proc.stderr):
            if stream is not None:
                stream.close()
