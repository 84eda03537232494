"""Delegation and settlement: the broker's task half (seed 002 §4).

Rules:
- An agent has at most one active task. ``delegate`` checks the agent's slot, journals the
  task, starts its TaskActor and hands the task envelope to the agent: the task is running once
  it is handed over, whether the agent is busy or idle (its bridge queues it).
- The TaskActor decides every transition; the broker only asks (``Start``, ``Done``,
  ``Settle``) and mirrors what the task reports (``TaskChanged``). The first terminal event
  wins, whoever sends it: an agent's ``done`` (handed over by the broker), a parent's cancel or
  fail, the agent's exit or close, a failed delivery or the deadline.
- Settlement happens once per task: the result is recorded, the agent's slot freed, the
  requests the task dropped (and any opened while its settlement was on its way) cancelled,
  the task actor stopped, and the result handed to each watcher subscribed to the task
  exactly once (the subscription is removed as it is used).
- Ending a task stops the work done for it. When anything but the agent's own ``done``
  settles it (cancel, fail, the deadline, a failed delivery) and the agent is still running,
  the agent gets a ``control cancel_task`` naming the task: every adapter stops that task's
  work and is ready for the next task (command: the turn's process group is stopped and the
  task's queued deliveries dropped; pi-rpc: the run is aborted; scripted: the script leaves
  the task). The control carries the reason; no separate notice is sent (for a command agent
  a notice would start a whole new turn only to say the task is gone).
- A turn that ends while the agent's task is still open, without ``done`` and without a
  question waiting for a reply, is told to the parent once per turn (a
  ``turn_ended_without_done`` notice with the turn's exit status and the tail of its output),
  and counted in the task's status. Not completing is right; saying nothing is not. A turn
  that began before the task was delegated is not the task's; a turn whose agent sent a
  ``done`` that is still being decided waits for that decision.

Mixed into :class:`BrokerActor`, whose state it uses.
"""

from __future__ import annotations

from typing import Any

import pykka

from actors.broker_rows import AgentEntry
from actors.broker_state import BrokerState
from actors.messages import (
    Deliver,
    DoneOutcome,
    Settle,
    Start,
    TaskChanged,
    TurnEnded,
    WatchDeliver,
    WatchdogInstruction,
    WatchdogTask,
)
from actors.runtime import tell_quietly
from actors.task import TaskActor
from protocol import api
from protocol.envelopes import ControlEnvelope, TaskEnvelope
from protocol.errors import AgentBusy, InvalidArgument, InvalidHandle
from protocol.ids import PARENT_ID, IdKind, kind_of
from protocol.journal import PromptRecord
from protocol.notifications import Notice
from protocol.requests import RequestState
from protocol.tasks import TaskEvent, TaskRecord, TaskResult, TaskState

__all__ = ["TaskMixin"]


class TaskMixin(BrokerState):
    # ------------------------------------------------------------------ delegate

    def _delegate(self, args: api.DelegateArgs) -> api.DelegateResult:
        entry = self._agent(args.target, live=True)
        if not args.task.strip():
            raise InvalidArgument("task text is empty")
        if args.timeout_minutes is not None and not args.timeout_minutes > 0:
            raise InvalidArgument(
                f"timeout must be a positive number of minutes, got {args.timeout_minutes}"
            )
        if entry.active_task is not None:
            raise AgentBusy(
                f"agent {entry.name} already has active task {entry.active_task}; "
                "messages are still accepted"
            )
        now = self.clock.now()
        self._check_fits(
            TaskEnvelope(
                message_id=self.runtime.ids.new(IdKind.MESSAGE),
                session_id=self.session_id,
                sender_id=PARENT_ID,
                target_id=entry.agent_id,
                created_at=now,
                task_id=self.runtime.ids.new(IdKind.TASK),
                content=args.task,
                deadline_at=now,
            ),
            "the task text",
        )
        timeout_s = (
            args.timeout_minutes * 60.0
            if args.timeout_minutes is not None
            else self.settings.default_task_timeout_s
        )
        task_id = self.runtime.ids.new(IdKind.TASK)
        record = TaskRecord(
            task_id=task_id,
            agent_id=entry.agent_id,
            agent_name=entry.name,
            description=args.task,
            created_at=now,
            deadline_at=now + timeout_s if timeout_s is not None else None,
            message_id=self.runtime.ids.new(IdKind.MESSAGE),
        )
        self._journal.append(record)
        if self._notes is not None:
            try:
                self._notes.open(record)
            except OSError:
                self._log.opt(exception=True).error("note for {t} not opened", t=task_id)
        ref = self.runtime.spawn(TaskActor, record, self.actor_ref, self._journal, self._notes)
        self.tasks[task_id] = record
        self._task_refs[task_id] = ref
        entry.active_task = task_id
        envelope = self._task_envelope(record)
        # The task is running once the parent has handed it to the agent's inbox; the
        # agent being busy or idle does not matter (its bridge queues the task).
        ref.tell(Start())
        entry.ref.tell(Deliver(envelope=envelope))
        self._observe(WatchdogTask(agent_id=entry.agent_id, task_id=task_id))
        self._observe(
            WatchdogInstruction(
                agent_id=entry.agent_id, kind="task", text=args.task, task_id=task_id, at=now
            )
        )
        return api.DelegateResult(
            task_id=task_id, agent_id=entry.agent_id, accepted=True, agent_name=entry.name
        )

    def _task_envelope(self, record: TaskRecord) -> TaskEnvelope:
        return TaskEnvelope(
            message_id=record.message_id or self.runtime.ids.new(IdKind.MESSAGE),
            session_id=self.session_id,
            sender_id=PARENT_ID,
            target_id=record.agent_id,
            created_at=record.created_at,
            task_id=record.task_id,
            content=record.description,
            deadline_at=record.deadline_at,
        )

    def _prompt(self, args: api.PromptArgs) -> api.PromptResult:
        delegated = self._delegate(
            api.DelegateArgs(
                target=args.target, task=args.prompt, timeout_minutes=args.timeout_minutes
            )
        )
        prompt_id = self.runtime.ids.new(IdKind.PROMPT)
        self.prompts[prompt_id] = delegated.task_id
        self._journal.append(PromptRecord(prompt_id=prompt_id, task_id=delegated.task_id))
        return api.PromptResult(
            prompt_id=prompt_id,
            task_id=delegated.task_id,
            agent_id=delegated.agent_id,
            accepted=delegated.accepted,
        )

    # ------------------------------------------------------------------ settlement

    def _settle_from_parent(
        self, task_id: str, event: TaskEvent, text: str | None
    ) -> TaskResult | pykka.ActorRef[Any]:
        """The stored result if the task is settled, else its actor: the caller (an edge, which
        may block) asks the actor to settle, so the answer is the task's own — first terminal
        event wins, even against a ``done`` already on its way."""
        if kind_of(task_id) is not IdKind.TASK or task_id not in self.tasks:
            raise InvalidHandle(f"no task {task_id!r} in this session")
        if task_id in self.results:
            return self.results[task_id]
        return self._task_refs[task_id]

    def _settle_task_now(self, task_id: str, event: TaskEvent, why: str) -> None:
        """Ask the task to settle (agent exit, close, delivery failure); it decides."""
        if task_id in self.results:
            return
        ref = self._task_refs.get(task_id)
        if ref is not None:
            tell_quietly(ref, Settle(event=event, error=why))

    def _task_changed(self, msg: TaskChanged) -> None:
        record = msg.record
        before = self.tasks.get(record.task_id)
        if before is None or before.state is not record.state:
            who = self._name(record.agent_id)
            extra = ""
            if record.state is TaskState.WAITING and record.pending_requests:
                req = self.requests.get(record.pending_requests[-1])
                if req is not None:
                    extra = f" for {self._name(req.target_id)}: {req.question!r}"
            elif record.result is not None:
                body = record.result.text or record.result.error
                extra = f" (rc {record.result.return_code})" + (f": {body}" if body else "")
            self._story(f"{who}: task {record.task_id} {record.state.value}{extra}")
        self.tasks[record.task_id] = record
        self._track_waiting(record)
        if not record.terminal:
            return
        result = record.result
        assert result is not None
        if record.task_id in self.results:
            return
        self.results[record.task_id] = result
        entry = self.agents.get(record.agent_id)
        if entry is not None and entry.active_task == record.task_id:
            entry.active_task = None
            self._observe(WatchdogTask(agent_id=entry.agent_id, task_id=None))
        # the requests the task dropped, and any opened while its settlement was on its way
        linked = {r.request_id for r in self.requests.pending() if r.task_id == record.task_id}
        for request_id in (*msg.dropped_requests, *sorted(linked - set(msg.dropped_requests))):
            self._close_request(
                request_id,
                RequestState.CANCELLED,
                notify_sender=False,
                why=f"task {record.task_id} {record.state.value}",
            )
        ref = self._task_refs.pop(record.task_id, None)
        if ref is not None:
            ref.stop(block=False)  # a stopped task actor is fine: the future says so, unread
        self._turn_stats.pop(record.task_id, None)
        self._turns_held.pop(record.task_id, None)
        if entry is not None and not entry.closed and not msg.settled_by_agent:
            self._stop_task_work(entry, record, result)
        for watcher in self._subscriptions.pop(record.task_id, []):
            tell_quietly(watcher, WatchDeliver(result=result))
        self._log.info(
            "task {task_id} {state} (rc {rc})",
            task_id=record.task_id,
            state=record.state.value,
            rc=result.return_code,
        )

    # ------------------------------------------------------------------ the agent's side

    def _stop_task_work(self, entry: AgentEntry, record: TaskRecord, result: TaskResult) -> None:
        """The parent ended the task: the agent stops working on it (see the module rules)."""
        what = record.state.value.replace("_", " ")
        control = ControlEnvelope(
            message_id=self.runtime.ids.new(IdKind.MESSAGE),
            session_id=self.session_id,
            sender_id=PARENT_ID,
            target_id=entry.agent_id,
            created_at=self.clock.now(),
            action="cancel_task",
            task_id=record.task_id,
            reason=f"task {record.task_id} {what}" + (f": {result.error}" if result.error else ""),
        )
        tell_quietly(entry.ref, Deliver(envelope=control))

    def _turn_ended(self, msg: TurnEnded) -> None:
        entry = self.agents.get(msg.agent_id)
        if entry is None or entry.closed or entry.active_task is None:
            return
        task_id = entry.active_task
        record = self.tasks.get(task_id)
        if record is None or task_id in self.results:
            return
        if msg.started_at is not None and msg.started_at < record.created_at:
            return  # the turn began before the task existed: it was not the task's turn
        if any(waiter == entry.agent_id for waiter, _ in self.requests.wait_edges()):
            return  # it asked and waits for a reply: ending the turn is what it should do
        if self._dones_in_flight.get(task_id):
            self._turns_held[task_id] = msg  # the done's outcome decides
            return
        self._report_turn(entry, record, msg)

    def _done_decided(self, msg: DoneOutcome) -> None:
        """A ``done`` was decided: a turn held for it is reported only if it was refused."""
        task_id = msg.envelope.task_id
        if task_id is None:
            return
        left = self._dones_in_flight.get(task_id, 0) - 1
        if left > 0:
            self._dones_in_flight[task_id] = left
            return
        self._dones_in_flight.pop(task_id, None)
        held = self._turns_held.pop(task_id, None)
        if held is None or msg.error is None:
            return
        entry = self.agents.get(held.agent_id)
        record = self.tasks.get(task_id)
        if entry is not None and record is not None and task_id not in self.results:
            self._report_turn(entry, record, held)

    def _report_turn(self, entry: AgentEntry, record: TaskRecord, msg: TurnEnded) -> None:
        count, _, _ = self._turn_stats.get(record.task_id, (0, None, None))
        self._turn_stats[record.task_id] = (count + 1, msg.ended_at, msg.exit_code)
        status = ""
        if msg.exit_code is not None:
            status = f" (exit status {msg.exit_code})"
        elif msg.is_error:
            status = " (with an error)"
        tail = "".join(f"\n  {line}" for line in msg.tail)
        text = (
            f"{entry.name}'s turn ended without done{status}; task {record.task_id} is still "
            f"{record.state.value}. A turn ending never ends a task: the agent must call done, "
            "or you can message, cancel or fail the task."
            + (f" Its output ends:{tail}" if tail else " It printed nothing.")
        )
        self._story(f"{entry.name}: turn ended without done{status} ({record.task_id})")
        self._sink(
            Notice(
                created_at=self.clock.now(),
                code="turn_ended_without_done",
                text=text,
                agent_id=entry.agent_id,
                task_id=record.task_id,
            )
        )
