"""Scripts and helpers shared by the simulation tests."""

from __future__ import annotations

import secrets
from typing import Any

from actors.runtime.runtime import Runtime
from actors.runtime.transport import PARENT_INBOX
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.session.watcher import WatcherActor
from actors.testing import SimSession
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.notifications import TaskCompletion
from protocol.records.settings import Settings
from protocol.records.tasks import TaskResult
from protocol.session.state import SessionState
from protocol.wire.envelopes import TaskDoneEnvelope

#: scout: takes its task, asks the planner, ends its turn, resumes on the reply, rests, done.
SCOUT = {
    "steps": [
        {"await": "task"},
        {"say": "looking around"},
        {"message": {"to": "planner", "text": "which module first?", "expects_reply": True}},
        {"await": "reply"},
        {"say": "planner says {last}"},
        {"sleep": 5},
        {"done": {"status": "completed", "summary": "explored {last}"}},
        {"await": "any"},
    ]
}

#: planner: busy with its own task (a long sleep) when the question comes, then answers.
PLANNER = {
    "steps": [
        {"await": "task"},
        {"say": "planning"},
        {"sleep": 60},
        {"await": "message"},
        {"reply": {"text": "src/core"}},
        {"await": "any"},
    ]
}

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}


def done_script(
    status: str = "completed", summary: str = "finished", *, sleep: float = 1.0
) -> dict[str, Any]:
    return {
        "steps": [
            {"await": "task"},
            {"sleep": sleep},
            {"done": {"status": status, "summary": summary}},
            {"await": "any"},
        ]
    }


def broker(session: Session) -> SessionState:
    """The broker's state, the one owner of the session's facts (simulation only: one thread,
    so reading it is safe)."""
    actor = session.broker._actor_weakref()
    assert actor is not None
    state: SessionState = actor.state
    return state


def live_watchers(runtime: Runtime) -> list[str]:
    """The ids of the watchers whose actor is live (one per watcher still owing results)."""
    return sorted(
        a.state.watcher_id
        for a in runtime.actors()
        if isinstance(a, WatcherActor) and not a.actor_stopped.is_set()
    )


def completions(sink: CollectingSink) -> list[TaskCompletion]:
    return [n for n in sink.items if isinstance(n, TaskCompletion)]


def delivered_results(sink: CollectingSink) -> list[TaskResult]:
    return [r for n in completions(sink) for r in n.results]


def new_session(seed: int, **kwargs: Any) -> tuple[SimSession, CollectingSink]:
    sink = CollectingSink()
    kwargs.setdefault("settings", Settings())
    return SimSession.simulated(seed, sink=sink, **kwargs), sink


def publish_done(session: SimSession, agent_id: str, task_id: str, created_at: float = 0.0) -> None:
    """``agent_id``'s ``done`` of ``task_id`` (completed), sent at ``created_at``, published
    to the parent as its simulated agent would."""
    (agent,) = session.status(agent_id).agents
    session.transport.publish(
        PARENT_INBOX,
        TaskDoneEnvelope(
            message_id=make_id(IdKind.MESSAGE, secrets.token_hex(8)),
            session_id=session.session_id,
            sender_id=agent_id,
            target_id=PARENT_ID,
            created_at=created_at,
            capability=session.sim_launcher.driver(agent.name).identity.capability,
            task_id=task_id,
            status="completed",
            summary="done",
        ),
    )
