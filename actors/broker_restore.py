"""Rebuilding a session after a parent restart (DESIGN §1.6, seed 002 phase 10).

Runs once, on the broker's thread, before it handles anything: settled results stay settled,
open tasks resume with their deadlines (their agents' bridges are adopted, never started a
second time), pending requests keep their reply deadlines, every watcher delivers only what
it had not delivered before the restart (neither in a notification nor in the ``watch`` answer
itself), and a waiting episode already reported stale is not reported again.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from actors.agent import AgentActor, AgentSpec
from actors.broker_rows import AgentEntry
from actors.messages import Deliver, RequestTimeout, Settle, WatchDeliver, WatchdogAgent
from actors.runtime import tell_quietly
from actors.task import TaskActor
from actors.watcher import WatcherActor
from protocol.journal import Restore
from protocol.tasks import TaskEvent

if TYPE_CHECKING:
    from actors.broker import BrokerActor

__all__ = ["restore_session"]


def restore_session(broker: BrokerActor, restore: Restore) -> None:
    """Rebuild the session after a parent restart: settled results stay settled, open
    tasks resume (their agents' bridges are adopted, not restarted), watchers deliver
    only what they had not delivered."""
    st = restore.state
    broker.journal_problems = restore.problems
    for task_id, record in st.tasks.items():
        broker.tasks[task_id] = record
        if record.terminal and record.result is not None:
            broker.results[task_id] = record.result
    for request in st.requests.values():
        broker.requests.put(request)
    broker.prompts.update(st.prompts)
    now = broker.clock.now()
    for request in broker.requests.pending():
        if request.deadline_at is not None:
            request_id = request.request_id
            broker._request_timers[request_id] = broker.clock.call_later(
                max(0.0, request.deadline_at - now),
                functools.partial(
                    tell_quietly, broker.actor_ref, RequestTimeout(request_id=request_id)
                ),
            )
    for agent_id, rec in st.agents.items():
        exit_record = st.exits.get(agent_id)
        spec = AgentSpec(
            agent_id=agent_id,
            name=rec.name,
            session_id=broker.session_id,
            capability=rec.capability,
            adapter=rec.adapter,
            options=rec.options,
        )
        broker._agent_records[agent_id] = rec
        agent_ref = broker.runtime.spawn(
            AgentActor,
            spec,
            broker._launcher,
            broker._transport,
            broker.actor_ref,
            broker.settings.output_lines,
            exit_record is None,  # adopt the running bridge, never start a second one
            rec.pid,
            exit_record is not None,
        )
        entry = AgentEntry(agent_id, rec.name, rec.adapter, rec.capability, agent_ref)
        if exit_record is not None:
            entry.closed = True
            entry.process_state = "exited"
            entry.exit_code = exit_record.exit_code
        entry.last_active_at = now
        broker.agents[agent_id] = entry
        broker.names[rec.name] = agent_id
        broker._observe(
            WatchdogAgent(agent_id=agent_id, name=rec.name, at=now, adapter=rec.adapter)
        )
    for task_id, record in st.tasks.items():
        if record.terminal:
            continue
        task_ref = broker.runtime.spawn(
            TaskActor, record, broker.actor_ref, broker._journal, broker._notes
        )
        broker._task_refs[task_id] = task_ref
        owner = broker.agents.get(record.agent_id)
        if owner is None or owner.closed:
            tell_quietly(
                task_ref,
                Settle(event=TaskEvent.FAIL, error="the agent was gone when the parent restarted"),
            )
            continue
        owner.active_task = task_id
        if record.waiting_since is not None and restore.stale_notice_given(task_id):
            broker._stale_notified[task_id] = record.waiting_since
        broker._track_waiting(record)
        # same envelope id as before: the agent's inbox drops it if it already had it
        owner.ref.tell(Deliver(envelope=broker._task_envelope(record)))
    for watcher in st.watchers.values():
        delivered = restore.delivered.get(watcher.watcher_id, set()) | set(watcher.inline)
        pending = tuple(t for t in watcher.ids if t not in delivered)
        if not pending:
            continue
        watcher_ref = broker.runtime.spawn(
            WatcherActor,
            watcher.watcher_id,
            watcher.ids,
            pending,
            broker._sink,
            broker.actor_ref,
            broker.settings.coalesce_ms / 1000.0,
        )
        broker._watchers[watcher.watcher_id] = watcher_ref
        for task_id in pending:
            if task_id in broker.results:  # settled, never delivered: deliver it now, once
                tell_quietly(watcher_ref, WatchDeliver(result=broker.results[task_id]))
            else:
                broker._subscriptions.setdefault(task_id, []).append(watcher_ref)
    broker._story(
        f"session restored: {len(broker.agents)} agents, {len(broker.results)} settled, "
        f"{len(broker._task_refs)} open tasks, {len(broker._watchers)} watchers"
    )
