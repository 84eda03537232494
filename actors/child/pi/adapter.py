"""The ``pi-rpc`` adapter: the real Pi coding agent as a child, driven over its RPC mode
(behaviour measured on Pi 0.73.1, npm ``@mariozechner/pi-coding-agent``).

Options (``SHEPHERD_AGENT_OPTIONS``: ``pi``, ``models_json``, ``provider``, ``model``, ``cwd``,
``startup_timeout_s``) are described and checked in :mod:`actors.child.pi.options`.

Rules:
- Pi runs as :mod:`actors.child.pi.bridged` says: the child tools extension, the bridge's
  child environment, an agent dir of its own, its own process group inside the bridge's
  session.
- Delivery. A task is told with :func:`~protocol.calls.render.render_task_context`, a message,
  reply or notice with :func:`~protocol.calls.render.render_delivery`. Every delivery is one
  ``prompt`` command carrying ``streamingBehavior`` (``followUp``, or ``steer`` when the
  envelope says ``delivery: "steer"``). Pi applies it atomically: idle, the text starts a
  run (a plain prompt); running, it is queued exactly as the ``follow_up`` / ``steer``
  commands queue it (same queue, same landing: a steer right after the running tool's
  result, a follow-up after the final answer). This is "prompt when idle, follow_up / steer
  while running" without a race: our idle/busy view (from ``agent_start`` / ``agent_end``)
  can lag Pi's by an event, and a ``follow_up``/``steer`` sent to an idle Pi starts nothing
  while a plain ``prompt`` to a busy Pi is refused. Commands go out one at a time from the
  core thread; the next is written only after Pi answered the previous one, when a run that
  prompt started already counts as streaming inside Pi.
- A stranded queue is flushed. Pi reads its queues for the last time just before
  ``agent_end`` (and not at all after an abort or a failed model call), so a message queued
  in that instant would wait for the next prompt. When Pi reports a non-empty queue while no
  run is open, the adapter confirms with ``get_state`` (idle and ``pendingMessageCount`` > 0;
  re-checked every 50 ms while Pi is still finishing its run) and starts a run with a short
  note, which delivers the queued messages.
- Pi's events become runtime events as :mod:`actors.child.pi.turns` says (a turn ending is
  NEVER a task settlement: only ``shepherd_done`` settles a task, through the parent); the
  same module keeps the idle/busy and queue view used here.
- ``control`` ``abort``: ``abort`` the running turn (queued messages stay queued and start
  the next run). ``control`` ``cancel_task`` (the parent ended the task): the deliveries for
  that task still waiting for Pi to start are dropped, and, if Pi was given that task, its
  running turn is aborted and the agent is told, with its next input, that the task ended
  (never with a run of its own). What Pi itself already queued cannot be taken back (its
  RPC has no command for it). Close (the bridge's exit): ``abort``, then
  :meth:`PiProcess.close <actors.child.pi.rpc.PiProcess.close>` (end of input, SIGTERM / SIGKILL of
  Pi's group, then every process carrying Pi's instance tag: its detached bash tools).
- Model providers (:mod:`actors.child.holding`): Shepherd owns the retries (one provider's
  cool-down is shared by every agent), so Pi's are off (:func:`~actors.child.pi.bridged.no_retries`,
  and ``set_auto_retry`` false once Pi answers). An assistant message that ended with an error
  (Pi's ``errorMessage``: ``429 Rate limit reached … Please try again in 2s.``) is the provider
  refusing the turn, reported as ``rate_limited`` / ``provider_error``
  (:func:`~protocol.records.refusals.refusal_of`), not as an ``error``; a context overflow is
  not one (Pi compacts and goes on). Then, and while held, deliveries wait here, not in Pi.
  ``resume`` runs the refused turn again as a prompt asking Pi to continue where it stopped:
  its conversation already holds the turn's input (the errored answer is left out of what Pi
  sends the model), so sending the input again would say it twice, and a turn refused after
  some tool calls would start over.
- Pi exiting on its own (crash, kill, end of its input) is an error output with the tail of
  its stderr, and the bridge exits with Pi's status (1 if Pi said 0): the parent fails the
  task (rc 1) unless ``shepherd_done`` settled it before.

Theory of operation: everything runs on the bridge's core thread (:class:`AgentContext`)
except Pi's reader thread, whose event and exit callbacks only post to the core, and one
short-lived thread that waits for Pi's first answer (``wait_ready``) and posts the result, so
the core stays free while Pi boots; deliveries arriving meanwhile wait in order.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

from actors.child.adapters import AgentContext, control_reason, show_refusal
from actors.child.holding import Holding
from actors.child.pi.bridged import agent_dir_for, start_bridged_pi, stderr_note
from actors.child.pi.errors import PiError, PiExitedError
from actors.child.pi.events import error_of
from actors.child.pi.options import PiOptions
from actors.child.pi.rpc import PiProcess
from actors.child.pi.turns import PiTurns
from actors.runtime.clock import TimerHandle
from actors.runtime.log import logger
from actors.runtime.procs import exit_status
from protocol.calls.render import render_delivery, render_task_context, render_task_ended
from protocol.core.errors import SandboxUnavailable
from protocol.records.refusals import (
    Refusal,
    is_context_overflow,
    provider_or_unknown,
    refusal_of,
    render_resume_note,
)
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    NoticeEnvelope,
    ReplyEnvelope,
    TaskEnvelope,
)

__all__ = ["FLUSH_NOTE", "PiRpcAdapter"]

Behavior = Literal["steer", "followUp"]

#: How long one RPC command (prompt, get_state) may take to be answered.
COMMAND_TIMEOUT_S = 10.0
#: How long an abort may take (Pi answers it after the aborted tool has stopped).
ABORT_TIMEOUT_S = 10.0
#: How long Pi gets to exit after its input is closed, before SIGTERM.
CLOSE_TIMEOUT_S = 3.0
#: Re-checking a queue that looks stranded while Pi is still finishing its run.
STRANDED_RETRY_S = 0.05
STRANDED_MAX_TRIES = 200
#: The text that starts a run to deliver messages Pi queued as a run was ending.
FLUSH_NOTE = "[Shepherd] Messages arrived as your previous turn was ending; they follow."


class _Delivery(NamedTuple):
    text: str
    behavior: Behavior
    what: str
    #: the task it is about (a task envelope, or a message or reply about it)
    task_id: str | None = None
    #: it is that task's envelope: sending it gives Pi the task
    gives_task: bool = False


class PiRpcAdapter:
    name: ClassVar[str] = "pi-rpc"

    @staticmethod
    def check_options(options: Mapping[str, Any], cwd: str) -> PiOptions:
        """The options, checked (the parent runs this before starting the bridge)."""
        return PiOptions(cwd, options)

    @property
    def provider(self) -> str:
        """Its model provider's name as the session knows providers (else ``unknown``): told
        with the bridge's ``ready``, so every agent of a provider shares its cool-downs."""
        return provider_or_unknown(self._opts.provider)

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None:
        self._ctx = ctx
        self._opts = self.check_options(options, ctx.cwd)
        #: started again by ``serve --recover``: Pi continues its saved session
        self._recovered = bool(options.get("recovered"))
        self._log = logger.bind(agent=ctx.env.name or ctx.env.agent_id)
        self._pi: PiProcess | None = None
        self._agent_dir: Path | None = None
        self._own_agent_dir = False
        self._ready = False
        self._closing = False
        self._started_at = 0.0
        self._ready_thread: threading.Thread | None = None
        #: deliveries that arrived while Pi was starting
        self._backlog: list[_Delivery] = []
        #: the task whose envelope Pi was given (until the parent ends it)
        self._task_id: str | None = None
        #: told with the next prompt: the tasks the parent ended
        self._ended: list[str] = []
        #: Pi's runs and queue, as its events say; publishes what they mean
        self._turns = PiTurns(ctx, self._log)
        self._stranded_timer: TimerHandle | None = None
        self._stranded_tries = 0
        #: the parent's hold, and the wait after a refused turn
        self._holding: Holding[Refusal] = Holding(ctx.runtime)

    # ------------------------------------------------------------------ adapter

    def start(self) -> None:
        ctx = self._ctx
        try:
            self._agent_dir, self._own_agent_dir = agent_dir_for(ctx.env)
            self._started_at = ctx.clock.monotonic()
            self._pi = start_bridged_pi(
                self._opts,
                self._agent_dir,
                ctx,
                on_event=self._on_pi_event,
                on_exit=self._on_pi_exit,
                keep_session=not self._own_agent_dir,
                resume=self._recovered,
            )
        except (OSError, PiError, SandboxUnavailable) as exc:
            self._log.error("pi could not start: {}", exc)
            ctx.runtime("error", text=f"the Pi agent could not start: {exc}", is_error=True)
            ctx.finish(127)
            return
        self._log.info(
            "pi started: pid {} ({}/{}) in {}",
            self._pi.pid,
            self._opts.provider,
            self._opts.model,
            self._opts.cwd,
        )
        self._ready_thread = threading.Thread(
            target=self._wait_ready, args=(self._pi,), name="shepherd-pi-ready", daemon=True
        )
        self._ready_thread.start()

    def deliver(self, envelope: AnyEnvelope) -> None:
        if self._closing:
            return
        match envelope:
            case TaskEnvelope():
                self._send(
                    render_task_context(envelope),
                    "followUp",
                    f"task {envelope.task_id}",
                    envelope.task_id,
                    gives_task=True,
                )
            case MessageEnvelope() | ReplyEnvelope():
                kind = "reply" if isinstance(envelope, ReplyEnvelope) else "message"
                behavior: Behavior = "steer" if envelope.delivery == "steer" else "followUp"
                who = envelope.sender_name or envelope.sender_id
                what = f"{kind} {envelope.message_id} from {who}"
                self._send(render_delivery(envelope), behavior, what, envelope.task_id)
            case NoticeEnvelope():
                self._send(render_delivery(envelope), "followUp", f"notice {envelope.code}")
            case AckEnvelope():
                show_refusal(self._ctx, envelope)
            case ControlEnvelope(action="cancel_task", task_id=task_id) if task_id is not None:
                self._cancel_task(task_id, envelope)
            case ControlEnvelope(action="cancel_task" | "abort"):
                self._abort(control_reason(envelope))
                if self._holding.drop_refused():
                    self._release()
            case ControlEnvelope(action="hold"):
                self._holding.hold(envelope)
            case ControlEnvelope(action="resume"):
                refusal = self._holding.resume()
                if refusal is not None:  # first in line: the turn continues before the rest
                    self._backlog.insert(
                        0, _Delivery(render_resume_note(refusal), "followUp", "the refused turn")
                    )
                self._release()
            case _:
                self._log.debug("ignored {}", envelope.__struct_config__.tag)

    def close(self) -> None:
        """Abort the running turn, then stop Pi and everything it started (called once)."""
        self._closing = True
        if self._stranded_timer is not None:
            self._stranded_timer.cancel()
            self._stranded_timer = None
        pi = self._pi
        if pi is not None:
            if self._ready and pi.running:
                try:
                    pi.abort(timeout=ABORT_TIMEOUT_S)
                except PiError as exc:
                    self._log.info("abort at close: {}", exc)
            code = pi.close(timeout=CLOSE_TIMEOUT_S)
            self._log.info("pi stopped (status {})", code)
            if self._ready_thread is not None:
                self._ready_thread.join(timeout=CLOSE_TIMEOUT_S)
        if self._own_agent_dir and self._agent_dir is not None:
            shutil.rmtree(self._agent_dir, ignore_errors=True)

    # ------------------------------------------------------------------ start-up

    def _wait_ready(self, pi: PiProcess) -> None:
        """Ready thread: one get_state round trip, then hand over to the core."""
        try:
            state = pi.wait_ready(timeout=self._opts.startup_timeout_s)
        except PiExitedError:
            return  # the exit callback reports it
        except PiError as exc:
            error = str(exc)
            self._ctx.post(lambda: self._start_failed(error))
            return
        self._ctx.post(lambda: self._on_ready(state))

    def _on_ready(self, state: Mapping[str, Any]) -> None:
        if self._closing or self._pi is None:
            return
        self._ready = True
        took = self._ctx.clock.monotonic() - self._started_at
        model = state.get("model")
        name = model.get("id") if isinstance(model, Mapping) else None
        self._log.info("pi ready: pid {} in {:.3f} s (model {})", self._pi.pid, took, name)
        try:  # Shepherd owns the retries (the module rules)
            self._pi.command({"type": "set_auto_retry", "enabled": False}, COMMAND_TIMEOUT_S)
        except PiError as exc:
            self._log.warning("could not turn Pi's auto-retry off: {}", exc)
        self._ctx.runtime(
            "output",
            text=f"[shepherd] pi ready: pid {self._pi.pid} in {took:.2f} s, model "
            f"{self._opts.provider}/{name or self._opts.model}",
        )
        self._release()

    def _release(self) -> None:
        """Send what waited (Pi starting, a hold, a refused turn), in order, unless it must
        wait on."""
        if self._holding.blocked:
            return
        backlog, self._backlog = self._backlog, []
        for item in backlog:
            self._send(*item)

    def _start_failed(self, error: str) -> None:
        if self._closing:
            return
        self._log.error("pi did not become ready: {}", error)
        text = f"the Pi agent did not start: {error}{stderr_note(self._pi)}"
        self._ctx.runtime("error", text=text, is_error=True)
        self._ctx.finish(1)

    # ------------------------------------------------------------------ delivery

    def _send(
        self,
        text: str,
        behavior: Behavior,
        what: str,
        task_id: str | None = None,
        gives_task: bool = False,
    ) -> None:
        if self._closing:
            return
        pi = self._pi
        if pi is None or not self._ready or self._holding.blocked:
            self._backlog.append(_Delivery(text, behavior, what, task_id, gives_task))
            if self._holding.blocked:
                self._holding.queued(what)
            return
        if gives_task:
            self._task_id = task_id
        if self._ended:
            text = "\n\n".join([*self._ended, text])
            self._ended.clear()
        idle = self._turns.idle
        try:
            pi.prompt(text, streaming_behavior=behavior, timeout=COMMAND_TIMEOUT_S)
        except PiExitedError:
            self._log.warning("pi is gone; {} was not delivered", what)
            return  # the exit callback ends the bridge
        except PiError as exc:
            self._log.error("pi refused {}: {}", what, exc)
            self._ctx.runtime("error", text=f"pi refused {what}: {exc}", is_error=True)
            return
        if idle:  # as far as the events seen so far say: Pi applies behavior if it is not
            self._log.info("delivered {} with prompt (pi looked idle; {} if not)", what, behavior)
            return
        verb = "steer" if behavior == "steer" else "follow-up"
        self._log.info("queued {} as a {} (pi is running)", what, verb)
        lands = (
            "after the running tool's result" if behavior == "steer" else "after its final answer"
        )
        self._ctx.runtime("output", text=f"[shepherd] {what} queued as a {verb}: lands {lands}")

    def _cancel_task(self, task_id: str, envelope: ControlEnvelope) -> None:
        """The parent ended ``task_id``: stop its work (see the module rules)."""
        why = control_reason(envelope)
        before = len(self._backlog)
        self._backlog = [item for item in self._backlog if item.task_id != task_id]
        dropped = before - len(self._backlog)
        if dropped:
            self._ctx.runtime(
                "output", text=f"[shepherd] {why}; {dropped} waiting deliveries for it dropped"
            )
        if self._task_id == task_id:
            self._task_id = None
            self._ended.append(render_task_ended(task_id, envelope.reason))
            self._abort(why)
        if self._holding.drop_refused(task_id):  # after the note: what waited goes with it
            self._release()

    def _abort(self, why: str) -> None:
        pi = self._pi
        if pi is None or not self._ready or not pi.running:
            return
        self._ctx.runtime("output", text=f"[shepherd] {why}: aborting the running turn")
        try:
            pi.abort(timeout=ABORT_TIMEOUT_S)
        except PiExitedError:
            return
        except PiError as exc:
            self._log.error("abort failed: {}", exc)
            self._ctx.runtime("error", text=f"abort failed: {exc}", is_error=True)

    def _check_stranded(self) -> None:
        """Pi holds queued messages but no run is open: confirm, then start a run."""
        self._stranded_timer = None
        pi = self._pi
        stranded = self._turns.stranded and not self._holding.blocked  # resume will flush it
        if self._closing or pi is None or not self._ready or not stranded:
            self._stranded_tries = 0
            return
        try:
            state = pi.get_state(timeout=COMMAND_TIMEOUT_S)
        except PiError as exc:
            self._log.warning("cannot check pi's queue: {}", exc)
            return
        if state.get("isStreaming"):
            self._stranded_tries += 1
            if self._stranded_tries > STRANDED_MAX_TRIES:
                self._log.warning("pi's queue still not delivered; giving up checking it")
                self._stranded_tries = 0
                return
            post = self._ctx.post
            self._stranded_timer = self._ctx.clock.call_later(
                STRANDED_RETRY_S, lambda: post(self._check_stranded)
            )
            return
        self._stranded_tries = 0
        pending = state.get("pendingMessageCount")
        if not isinstance(pending, int) or pending <= 0:
            self._turns.queued = 0
            return
        self._log.warning("{} message(s) stranded in pi's queue; starting a run", pending)
        self._send(FLUSH_NOTE, "followUp", f"{pending} stranded message(s)")

    # ------------------------------------------------------------------ Pi's events

    def _on_pi_event(self, event: dict[str, Any]) -> None:
        """Pi's reader thread: hand over only."""
        self._ctx.post(lambda: self._event(event))

    def _on_pi_exit(self, returncode: int) -> None:
        """Pi's reader thread: hand over only."""
        self._ctx.post(lambda: self._exited(returncode))

    def _event(self, event: Mapping[str, Any]) -> None:
        error = error_of(event)
        if error is not None and not self._closing and not is_context_overflow(error):
            self._turns.observe(event, publish=False)  # reported as the refusal it is
            refusal = refusal_of(error, self._opts.provider)
            self._log.warning("the provider refused the turn: {}: {}", refusal.kind, error)
            self._holding.refused(refusal, refusal, self._task_id)
            return
        self._turns.observe(event, publish=not self._closing)
        if (
            event.get("type") in ("agent_end", "queue_update")
            and self._turns.stranded
            and self._stranded_timer is None
        ):
            self._check_stranded()

    def _exited(self, returncode: int) -> None:
        if self._closing:
            return
        status = exit_status(returncode)
        self._log.error("pi exited on its own with status {}", status)
        self._ctx.runtime(
            "output",
            text=f"[shepherd] the Pi agent exited with status {status}{stderr_note(self._pi)}",
            is_error=True,
        )
        self._ctx.finish(status or 1)
