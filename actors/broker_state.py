"""What the broker's mixins may use: :class:`BrokerActor`'s state and helpers, declared once.

The broker is one actor written in several modules (``broker_routing``, ``broker_stale``,
``broker_tasks``); each mixin inherits :class:`BrokerState` so the type checker knows the
tables and helpers the others define. The declarations exist only for the type checker: at
runtime this class is empty, so it never shadows what the actor (or ``ShepherdActor``) defines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["BrokerState"]

if TYPE_CHECKING:
    from collections import OrderedDict

    import pykka

    from actors.broker_rows import AgentEntry
    from actors.clock import Clock
    from actors.journal import Journal
    from actors.messages import TurnEnded
    from actors.notes import TaskNotes
    from actors.runtime import Runtime
    from actors.sinks import GuardedSink
    from protocol.request_table import RequestTable
    from protocol.requests import RequestState
    from protocol.settings import Settings
    from protocol.tasks import TaskEvent, TaskRecord, TaskResult


class BrokerState:
    if TYPE_CHECKING:
        # --- the broker's tables (set in BrokerActor.__init__)
        session_id: str
        settings: Settings
        agents: dict[str, AgentEntry]
        tasks: dict[str, TaskRecord]
        results: dict[str, TaskResult]
        requests: RequestTable
        prompts: dict[str, str]
        _task_refs: dict[str, pykka.ActorRef[Any]]
        _request_timers: dict[str, Any]
        _stale_timers: dict[str, Any]
        _stale_notified: dict[str, float]
        _subscriptions: dict[str, list[pykka.ActorRef[Any]]]
        _dones_in_flight: dict[str, int]
        _turns_held: dict[str, TurnEnded]
        _turn_stats: dict[str, tuple[int, float | None, int | None]]
        _seen: OrderedDict[str, None]
        _sink: GuardedSink
        _journal: Journal
        _notes: TaskNotes | None
        _log: Any

        # --- from ShepherdActor
        runtime: Runtime

        @property
        def clock(self) -> Clock: ...
        @property
        def actor_ref(self) -> pykka.ActorRef[Any]: ...

        # --- helpers the parts call across modules (each defined once: broker or a mixin)
        def _agent(self, handle: str, *, live: bool = False) -> AgentEntry: ...
        def _name(self, agent_id: str) -> str: ...
        def _story(self, text: str) -> None: ...
        def _observe(self, message: Any) -> None: ...
        def _check_fits(self, env: Any, what: str) -> None: ...
        def _send_notice(self, agent_id: str, code: str, text: str, ref_id: str | None) -> None: ...
        def _close_request(
            self,
            request_id: str,
            state: RequestState,
            *,
            notify_sender: bool = False,
            reply_id: str | None = None,
            why: str | None = None,
        ) -> None: ...
        def _settle_task_now(self, task_id: str, event: TaskEvent, why: str) -> None: ...
        def _track_waiting(self, record: TaskRecord) -> None: ...
