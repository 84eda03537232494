"""Agents in the session: spawn, process states, turns, close, exit.

Rules:

1. **Names.** An agent's name is 1-32 lowercase letters, digits, ``-`` or ``_``, starting
   with a letter (and not ``shepherd``). A name is free once its agent is closed *and* its
   process has exited (``agent_busy`` while it is still stopping).
2. **Process state** is separate from the task's state and never feeds into it (idle is not
   done). It follows :data:`PROCESS_TRANSITIONS`, driven by the agent's runtime events:
   ``ready`` ends ``starting`` (``working`` if a turn is still running after a parent restart),
   a turn's start and end move it between ``working`` and ``idle``, and an exit is final.
3. **Exit.** An exit nobody asked for (no ``close`` first) closes the agent, fails its task
   (``agent process exited ... without calling done``, with the reason when one is known),
   cancels the requests to and from it (their other side is told) and is always told to the
   parent, task or not. Every exit is journaled.
4. **Close.** ``close`` cancels the agent's task and its requests, and stops its process.
   Closing a closed agent changes nothing.
5. **Turns.** Per turn, the tail of what it printed is kept (its last lines, each cut short),
   so that a turn that ends without ``done`` can be told with it
   (:func:`protocol.session.tasks.turn_ended`).
6. **Output.** The agent's actor is shown (``Forward``) only the runtime events that say what
   it printed or why its process went: :data:`FORWARDED`. Turns and usage are the session's
   alone, so a task's turn costs its agent's actor no message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal

import msgspec

from protocol.calls import api
from protocol.calls.api import ProcessState
from protocol.core.errors import AgentBusy, InvalidArgument
from protocol.core.ids import IdKind, is_valid_name
from protocol.records.journal import AgentCloseRecord, AgentExitRecord, AgentRecord
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.tasks import TaskEvent
from protocol.session import (
    budgets,
    claims,
    collisions,
    providers,
    requests,
    settlement,
    tasks,
    worktrees,
)
from protocol.session.effects import (
    Answer,
    Effect,
    Forward,
    Journal,
    Log,
    Notify,
    SpawnAgent,
    StopAgent,
    Story,
    WatchdogAgent,
    WatchdogRuntime,
)
from protocol.session.state import AgentRow, Ctx, SessionState, Turn
from protocol.wire.envelopes import RuntimeEnvelope

__all__ = [
    "FORWARDED",
    "PROCESS_TRANSITIONS",
    "ProcessEvent",
    "check_spawn",
    "close",
    "exited",
    "join",
    "move",
    "options_of",
    "record_of",
    "replay_exit",
    "respawn",
    "runtime_event",
    "spawn",
]

ProcessEvent = Literal["ready", "ready_in_turn", "turn_start", "turn_end", "exit"]

_EVENTS: Final[tuple[ProcessEvent, ...]] = (
    "ready",
    "ready_in_turn",
    "turn_start",
    "turn_end",
    "exit",
)


def _table() -> dict[tuple[ProcessState, ProcessEvent], ProcessState]:
    table: dict[tuple[ProcessState, ProcessEvent], ProcessState] = {
        ("starting", "ready"): "idle",
        ("starting", "ready_in_turn"): "working",
    }
    running: tuple[ProcessState, ...] = ("starting", "working", "idle")
    for state in running:
        table[(state, "turn_start")] = "working"
        table[(state, "turn_end")] = "idle"
        table[(state, "exit")] = "exited"
    return table


#: The process machine. A move that is not in the table changes nothing (a ``ready`` once
#: running, anything once exited).
PROCESS_TRANSITIONS: Final = _table()

#: Lines, and characters per line, of a turn's output kept for a turn that ends without done.
TURN_TAIL_LINES = 5
TURN_TAIL_LINE_CHARS = 200


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ spawn


def check_spawn(s: SessionState, args: api.SpawnArgs) -> None:
    """Rule 1 (the options are the caller's to check: they name files and programs)."""
    if not is_valid_name(args.name):
        raise InvalidArgument(
            f"agent name {args.name!r} must be 1-32 lowercase letters, digits, '-' or '_', "
            "starting with a letter (and not 'shepherd')"
        )
    previous = s.agents.get(s.names.get(args.name, ""))
    if previous is not None and not previous.closed:
        raise InvalidArgument(f"an agent named {args.name!r} already exists")
    if previous is not None and previous.process_state != "exited":
        raise AgentBusy(
            f"agent {args.name!r} ({previous.agent_id}) is still stopping; "
            "its name is free once its process has exited"
        )


def options_of(args: api.SpawnArgs) -> dict[str, Any]:
    """What a spawn asks for, as the agent's options (what its launcher and child read)."""
    return {k: v for k, v in msgspec.structs.asdict(args).items() if v is not None}


def spawn(s: SessionState, args: api.SpawnArgs, cx: Ctx) -> list[Effect]:
    check_spawn(s, args)
    options = options_of(args)
    record = AgentRecord(
        agent_id=cx.ids.new(IdKind.AGENT),
        name=args.name,
        adapter=args.adapter,
        capability=cx.ids.secret(),
        created_at=cx.now,
        options=options,
    )
    join(s, record, cx)
    agent_id = record.agent_id
    return [
        Journal(record=record),
        _spawn_effect(record),
        Log(text=f"spawned {args.name} ({agent_id})"),
        WatchdogAgent(
            agent_id=agent_id,
            name=args.name,
            description=args.description,
            at=cx.now,
            adapter=args.adapter,
            role=args.role,
        ),
        Answer(
            value=api.SpawnResult(
                agent_id=agent_id, name=args.name, adapter=args.adapter, process_state="starting"
            )
        ),
    ]


def join(s: SessionState, record: AgentRecord, cx: Ctx) -> None:
    """The agent's row, from its record (a spawn, or a restart reading the journal)."""
    row = s.agents.get(record.agent_id)
    if row is not None:  # a later record of the same agent: its bridge's pid
        s.agents[record.agent_id] = msgspec.structs.replace(row, pid=record.pid)
        return
    s.agents[record.agent_id] = AgentRow(
        agent_id=record.agent_id,
        name=record.name,
        adapter=record.adapter,
        capability=record.capability,
        created_at=record.created_at,
        options=record.options,
        pid=record.pid,
        last_active_at=cx.now,
    )
    s.names[record.name] = record.agent_id


def record_of(row: AgentRow) -> AgentRecord:
    return AgentRecord(
        agent_id=row.agent_id,
        name=row.name,
        adapter=row.adapter,
        capability=row.capability,
        created_at=row.created_at,
        options=row.options,
        pid=row.pid,
    )


def _spawn_effect(record: AgentRecord, *, adopt: bool = False, gone: bool = False) -> SpawnAgent:
    return SpawnAgent(
        agent_id=record.agent_id,
        name=record.name,
        adapter=record.adapter,
        capability=record.capability,
        options=record.options,
        adopt=adopt,
        pid=record.pid,
        exited=gone,
    )


def respawn(row: AgentRow) -> SpawnAgent:
    """After a restart: adopt the agent's running bridge, or keep only the output of one
    known to be gone (never a second process)."""
    gone = row.process_state == "exited"
    return _spawn_effect(record_of(row), adopt=not gone, gone=gone)


# ------------------------------------------------------------------ process states


def move(s: SessionState, agent_id: str, event: ProcessEvent, cx: Ctx) -> list[Effect]:
    """One event of the process machine (rule 2); the watchdog hears of every one it takes."""
    row = s.agents[agent_id]
    state = PROCESS_TRANSITIONS.get((row.process_state, event))
    if state is None:
        return []
    s.agents[agent_id] = msgspec.structs.replace(row, process_state=state, last_active_at=cx.now)
    effects: list[Effect] = []
    if state != row.process_state:
        effects.append(Story(text=f"{row.name}: process {state}"))
    effects.append(WatchdogAgent(agent_id=agent_id, name=row.name, process_state=state, at=cx.now))
    return effects


#: runtime events the agent's actor is shown (rule 6): its output for ``read``, its readiness,
#: its last error and its last words
FORWARDED: Final = frozenset({"ready", "output", "error", "tool_call", "tool_result", "exit"})


def runtime_event(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """A runtime event from the agent's bridge: its pid, its wake-up mode, its process state,
    its turn; its actor keeps the output, the watchdog watches the tools."""
    agent_id = row.agent_id
    effects: list[Effect] = []
    if env.event == "ready" and env.pid is not None and row.pid != env.pid:
        row = msgspec.structs.replace(row, pid=env.pid)
        effects.append(Journal(record=record_of(row)))
    if env.mailbox_wake is not None:
        row = msgspec.structs.replace(row, mailbox_wake=env.mailbox_wake)
    s.agents[agent_id] = row
    if env.event in FORWARDED:
        effects.append(Forward(agent_id=agent_id, envelope=env))
    effects.append(WatchdogRuntime(agent_id=agent_id, envelope=env, at=cx.now))
    effects += providers.seen(s, row, env, cx)
    turn = s.turns.get(agent_id, Turn())
    match env.event:
        case "ready":
            effects += move(s, agent_id, "ready_in_turn" if env.in_turn else "ready", cx)
        case "turn_start":
            # when the agent's side started it (not when the event got here): a task
            # delegated meanwhile was not this turn's
            s.turns[agent_id] = Turn(started_at=env.created_at)
            effects += move(s, agent_id, "turn_start", cx)
            effects += budgets.reported(s, row, env, cx)
        case "usage":
            effects += budgets.reported(s, row, env, cx)
        case "turn_end":
            exited = row.process_state == "exited"
            effects += collisions.turn_ended(s, row)  # before its task may end with the turn
            effects += move(s, agent_id, "turn_end", cx)
            s.turns.pop(agent_id, None)
            if not exited:
                effects += tasks.turn_end(
                    s, agent_id, turn, cx, exit_code=env.exit_code, is_error=env.is_error
                )
        case "not_sent":
            effects += _not_sent(s, row, env, cx)
        case "output" | "error" if env.text:
            lines = env.text.splitlines() or [""]
            s.turns[agent_id] = _tail(turn, lines[-TURN_TAIL_LINES:])
        case "tool_call" | "tool_result":
            if env.event == "tool_call":
                claims.counted(s, row)
                effects += collisions.edited(s, row, env, cx)
            line = env.command if env.event == "tool_call" else env.output
            prefix = "$ " if env.event == "tool_call" else ""
            if line:
                shown = [f"{prefix}{x}" for x in line.splitlines()[-20:]]
                s.turns[agent_id] = _tail(turn, shown[-TURN_TAIL_LINES:])
    return effects


def _not_sent(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """The agent's bridge gave up sending something while the session was unreachable: the
    parent is told (a done among it leaves its task open: the parent decides)."""
    text = (
        f"{row.name}'s bridge could not send to the session for too long and gave up: "
        f"{env.text or 'something'}"
    )
    note = Notice(
        created_at=cx.now,
        code="not_sent",
        text=text,
        agent_id=row.agent_id,
        task_id=row.active_task,
    )
    return [Story(text=f"{row.name}: {text}"), Notify(note=note)]


def _tail(turn: Turn, lines: Iterable[str]) -> Turn:
    cut = tuple(_cut(line, TURN_TAIL_LINE_CHARS) for line in lines)
    return msgspec.structs.replace(turn, tail=(*turn.tail, *cut)[-TURN_TAIL_LINES:])


# ------------------------------------------------------------------ exit and close


def exited(
    s: SessionState,
    agent_id: str,
    exit_code: int | None,
    cx: Ctx,
    *,
    reason: str | None = None,
    before_ready: bool = False,
) -> list[Effect]:
    """The agent's process is gone (rule 3)."""
    row = s.agents.get(agent_id)
    if row is None or row.process_state == "exited":
        return []
    effects = move(s, agent_id, "exit", cx)
    row = s.agents[agent_id] = msgspec.structs.replace(
        s.agents[agent_id], process_state="exited", exit_code=exit_code
    )
    s.turns.pop(agent_id, None)
    record = AgentExitRecord(agent_id=agent_id, exit_code=exit_code, at=cx.now, closed=row.closed)
    effects.append(Journal(record=record))
    if not row.closed:
        task_id = row.active_task
        because = f": {reason}" if reason else ""
        status = "" if exit_code is None else f" with status {exit_code}"
        why = f"agent process exited{status} without calling done" + because
        effects += _release(s, agent_id, TaskEvent.FAIL, why, cx)
        when = "before it was ready" if before_ready else "without being closed"
        text = (
            f"agent {row.name} exited{status} {when}"
            + because
            + (f"; its task {task_id} failed" if task_id else "")
            + f". Read {row.name}'s output for its last words."
        )
        note = Notice(
            created_at=cx.now, code="agent_exited", text=text, agent_id=agent_id, task_id=task_id
        )
        effects.append(Notify(note=note))
    effects.append(Log(text=f"agent {row.name} exited ({exit_code})"))
    return effects


def close(s: SessionState, handle: str, cx: Ctx) -> list[Effect]:
    row = s.agent(handle)
    worktree = worktrees.close_fields(s, row)  # the edge removes it if it is clean
    if row.closed:
        return [Answer(value=api.CloseResult(agent_id=row.agent_id, closed=True, **worktree))]
    task_id = row.active_task
    # journaled first: a parent restarting before the process exits keeps it closed
    effects: list[Effect] = [Journal(record=AgentCloseRecord(agent_id=row.agent_id, at=cx.now))]
    effects += _release(s, row.agent_id, TaskEvent.CANCEL, "agent closed by the parent", cx)
    result = api.CloseResult(
        agent_id=row.agent_id, closed=True, cancelled_task_id=task_id, **worktree
    )
    return [*effects, StopAgent(agent_id=row.agent_id), Answer(value=result)]


def _release(s: SessionState, agent_id: str, event: TaskEvent, why: str, cx: Ctx) -> list[Effect]:
    """The agent is gone or going: it is closed, its task settled, its requests cancelled."""
    row = s.agents[agent_id] = msgspec.structs.replace(s.agents[agent_id], closed=True)
    effects: list[Effect] = []
    if row.active_task is not None:
        effects += settlement.settle(s, row.active_task, event, cx, error=why)
    for request in s.requests.pending():
        if agent_id in (request.sender_id, request.target_id):
            effects += requests.close(
                s,
                request.request_id,
                RequestState.CANCELLED,
                cx,
                notify_sender=request.sender_id != agent_id,
                why=f"{row.name} is no longer running ({why})",
            )
    return effects


def replay_close(s: SessionState, record: AgentCloseRecord) -> None:
    """A close read back from the journal: the agent stays closed (its process may still be
    running: the restarted parent adopts it and closes it again)."""
    if record.agent_id in s.agents:
        s.agents[record.agent_id] = msgspec.structs.replace(s.agents[record.agent_id], closed=True)


def replay_exit(s: SessionState, record: AgentExitRecord, cx: Ctx) -> None:
    """An exit read back from the journal: the agent is closed and its process gone (what
    became of its task and its requests, the journal says in their own records)."""
    if record.agent_id not in s.agents:
        return
    move(s, record.agent_id, "exit", cx)
    s.agents[record.agent_id] = msgspec.structs.replace(
        s.agents[record.agent_id], closed=True, exit_code=record.exit_code
    )
