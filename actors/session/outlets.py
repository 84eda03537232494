"""Where the broker's effects go that are no entity's actor: the parent's sink, a receipt's
one-shot inbox, the task notes' writer, the watchdog, git, the story (:mod:`actors.session.broker`).

- ``Notify`` goes to the parent's sink (guarded: a failing sink is logged, never raised);
  ``Publish`` puts a receipt in the one-shot inbox it names (one that cannot take it is
  logged: its caller has gone).
- Note effects and what the watchdog is told are gathered over a run and sent when it ends
  (:meth:`Outlets.flush`): one message to each per run. A watchdog agent's question
  (``WatchdogQuery``) goes with them, so it is answered after what came before it; a session
  without a watchdog refuses it at once.
- ``ProbeWorktree`` and ``ProbeMerge`` run git on the session's git worker; the answer comes
  back to the broker as an event (a session with no git worker answers at once that it has
  none; a merge it cannot check is told not done).
- ``RunCheck`` / ``StopCheck``: a task's acceptance check, on the session's check runner
  (:mod:`actors.session.checks`); its end comes back to the broker as a ``CheckDone`` (a
  session with no runner answers at once that it runs none: the attempt fails, told).
- ``Story``: one human line per lifecycle change, for ``shepherd demo`` and ``serve
  --verbose`` (a failing tap is logged).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec
import pykka

from actors.runtime.runtime import tell_quietly
from actors.runtime.transport import Transport
from actors.session.checks import CheckRunner
from actors.session.note_writer import NoteWrites
from actors.session.runs import Run
from actors.session.sinks import GuardedSink
from actors.session.worktrees import GitWorker
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.records.checks import CheckDone, Evidence
from protocol.records.worktrees import WorktreeProbed
from protocol.session import effects as fx
from protocol.session import merges

__all__ = ["Outlets"]


class Outlets:
    def __init__(
        self,
        broker: pykka.ActorRef[Any],
        sink: GuardedSink,
        transport: Transport,
        log: Any,
        *,
        tap: Callable[[str], None] | None = None,
        watchdog: pykka.ActorRef[Any] | None = None,
        git: GitWorker | None = None,
        checks: CheckRunner | None = None,
    ) -> None:
        self._broker = broker
        self._sink = sink
        self._transport = transport
        self._log = log
        self._tap = tap
        self.watchdog = watchdog
        self._git = git
        self._checks = checks
        #: every task's note, written by one actor (started with the broker)
        self.note_writer: pykka.ActorRef[Any] | None = None

    def notify(self, effect: fx.Notify, _: Run) -> None:
        self._sink(effect.note)

    def publish(self, effect: fx.Publish, _: Run) -> None:
        try:
            self._transport.publish(effect.inbox, effect.envelope)
        except ShepherdError as exc:
            self._log.warning("receipt to {} undeliverable: {}", effect.inbox, exc.message)

    @staticmethod
    def note(effect: fx.OpenNote | fx.AppendNote | fx.FinaliseNote, run: Run) -> None:
        run.notes.append(effect)

    def watched(self, effect: Any, run: Run) -> None:
        if self.watchdog is not None:
            run.watchdog.append(effect)
        elif isinstance(effect, fx.WatchdogQuery):
            why = InvalidArgument("this session runs without a watchdog")
            refused = msgspec.structs.replace(effect.receipt, accepted=False, error=why.info())
            self.publish(fx.Publish(inbox=effect.inbox, envelope=refused), run)

    def flush(self, run: Run) -> None:
        """What ``run`` gathered for the note writer and the watchdog: one message each."""
        if run.notes and self.note_writer is not None:
            tell_quietly(self.note_writer, NoteWrites(run.notes))
        if run.watchdog and self.watchdog is not None:
            tell_quietly(self.watchdog, run.watchdog)

    def probe(self, effect: fx.ProbeWorktree, _: Run) -> None:
        answer = functools.partial(tell_quietly, self._broker)
        if self._git is not None:
            self._git.probe(effect, answer)
            return
        kind, task_id, agent_id = effect.kind, effect.task_id, effect.worktree.agent_id
        why = "this session runs no git worker"
        answer(WorktreeProbed(kind=kind, task_id=task_id, agent_id=agent_id, error=why))

    def probe_merge(self, effect: fx.ProbeMerge, _: Run) -> None:
        answer = functools.partial(tell_quietly, self._broker)
        if self._git is not None:
            self._git.probe_merge(effect.record, answer)
            return
        answer(merges.settle(effect.record, None, effect.record.at))  # nothing known: not done

    def run_check(self, effect: fx.RunCheck, _: Run) -> None:
        answer = functools.partial(tell_quietly, self._broker)
        if self._checks is not None:
            self._checks.run(effect, answer)
            return
        why = "this session runs no checks"
        evidence = Evidence(
            command=effect.check.command,
            attempt=effect.attempt,
            exit_status=None,
            duration_s=0.0,
            error=why,
        )
        answer(CheckDone(task_id=effect.task_id, evidence=evidence))

    def stop_check(self, effect: fx.StopCheck, _: Run) -> None:
        if self._checks is not None:
            self._checks.stop(effect.task_id)

    def story(self, effect: fx.Story, _: Run) -> None:
        if self._tap is None:
            return
        try:
            self._tap(effect.text)
        except Exception:
            self._log.opt(exception=True).error("story tap failed")
