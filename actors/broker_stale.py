"""The stale-wait monitor (seed 002 phase 8): one notification per waiting episode.

A timer exists only while a task waits (none otherwise: the monitor "runs only while some task
waits"); it fires at ``waiting_since + stale_wait_threshold``. If the task is still in the
same episode, the parent is told once — task, agent, description, age, request, question,
recipient and the recipient's status. A reply (or settlement) ends the episode and forgets it;
task state is never changed. Mixed into :class:`BrokerActor`, whose tables it reads.
"""

from __future__ import annotations

from actors.broker_state import BrokerState
from actors.messages import StaleDue
from actors.runtime import tell_quietly
from protocol.ids import PARENT_ID
from protocol.notifications import StaleWait
from protocol.tasks import TaskRecord, TaskState

__all__ = ["StaleWaitMixin"]


class StaleWaitMixin(BrokerState):
    # ------------------------------------------------------------------ stale waits

    def _track_waiting(self, record: TaskRecord) -> None:
        """Keep one stale-wait timer per *waiting episode*; none while nothing waits."""
        task_id = record.task_id
        since = record.waiting_since
        if record.state is TaskState.WAITING and since is not None:
            if task_id in self._stale_timers and self._stale_timers[task_id][0] == since:
                return
            self._cancel_stale(task_id)
            delay = since + self.settings.stale_wait_threshold_s - self.clock.now()
            handle = self.clock.call_later(
                max(0.0, delay),
                lambda: tell_quietly(
                    self.actor_ref, StaleDue(task_id=task_id, waiting_since=since)
                ),
            )
            self._stale_timers[task_id] = (since, handle)
        else:
            self._cancel_stale(task_id)
            self._stale_notified.pop(task_id, None)  # a reply (or settlement) ends the episode

    def _cancel_stale(self, task_id: str) -> None:
        entry = self._stale_timers.pop(task_id, None)
        if entry is not None:
            entry[1].cancel()

    def _stale_due(self, task_id: str, since: float) -> None:
        entry = self._stale_timers.get(task_id)
        if entry is not None and entry[0] == since:
            del self._stale_timers[task_id]
        record = self.tasks.get(task_id)
        if (
            record is None
            or record.state is not TaskState.WAITING
            or record.waiting_since != since
            or self._stale_notified.get(task_id) == since
            or not record.pending_requests
        ):
            return
        request = self.requests.get(record.pending_requests[0])
        if request is None:
            return
        self._stale_notified[task_id] = since
        recipient = self.agents.get(request.target_id)
        if request.target_id == PARENT_ID:
            recipient_status = "the parent"
        elif recipient is None:
            recipient_status = "unknown"
        else:
            recipient_status = recipient.process_state + (" (closed)" if recipient.closed else "")
        now = self.clock.now()
        self._story(
            f"{self._name(record.agent_id)}: task {task_id} stale (waiting {now - since:.0f}s)"
        )
        self._sink(
            StaleWait(
                created_at=now,
                task_id=task_id,
                agent_id=record.agent_id,
                agent_name=self._name(record.agent_id),
                description=record.description,
                waiting_since=since,
                age_s=now - since,
                request_id=request.request_id,
                question=request.question,
                recipient_id=request.target_id,
                recipient_name=self._name(request.target_id),
                recipient_status=recipient_status,
            )
        )
