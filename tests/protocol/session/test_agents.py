"""protocol.session.agents: names, the process-state table, exits, closes, a turn's tail."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from protocol.calls import api
from protocol.core.errors import AgentBusy, InvalidArgument, InvalidHandle
from protocol.records.journal import AgentExitRecord, AgentRecord
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.tasks import TaskState
from protocol.session import agents
from protocol.session.agents import PROCESS_TRANSITIONS, TURN_TAIL_LINE_CHARS, TURN_TAIL_LINES
from protocol.session.effects import (
    Answer,
    Forward,
    Journal,
    SpawnAgent,
    StopAgent,
    TellTask,
    WatchdogAgent,
)
from protocol.session.status import view as status_view
from protocol.wire.envelopes import ControlEnvelope, NoticeEnvelope

from .harness import T0, Session, answer, delivered, journaled, notes, of

STATES = ("starting", "working", "idle", "exited")
EVENTS = ("ready", "ready_in_turn", "turn_start", "turn_end", "exit")

#: The process machine, written out here independently of the module's table.
EXPECTED = {
    ("starting", "ready"): "idle",
    ("starting", "ready_in_turn"): "working",
    **{(s, "turn_start"): "working" for s in ("starting", "working", "idle")},
    **{(s, "turn_end"): "idle" for s in ("starting", "working", "idle")},
    **{(s, "exit"): "exited" for s in ("starting", "working", "idle")},
}


# ------------------------------------------------------------------ names


def test_a_spawn_journals_the_agent_before_it_is_started_and_answers_starting() -> None:
    s = Session()
    effects = s.call(api.SpawnArgs(name="scout"))
    assert [type(e) for e in effects[:2]] == [Journal, SpawnAgent]
    (record,) = journaled(effects, AgentRecord)
    spawn = effects[1]
    assert isinstance(spawn, SpawnAgent) and not spawn.adopt
    assert spawn.agent_id == record.agent_id and spawn.capability == record.capability
    assert answer(effects) == api.SpawnResult(
        agent_id=record.agent_id, name="scout", adapter="scripted", process_state="starting"
    )
    row = s.state.agents[record.agent_id]
    assert row.process_state == "starting" and row.created_at == T0
    assert s.state.names == {"scout": record.agent_id}


@pytest.mark.parametrize(
    "name", ["", "Scout", "1scout", "shepherd", "shepherd-agent-00000001", "a" * 33, "a b", "../x"]
)
def test_a_name_outside_the_grammar_is_refused_naming_the_rule(name: str) -> None:
    s = Session()
    error = s.call_refused(api.SpawnArgs(name=name), InvalidArgument)
    assert "lowercase letters" in error.message


def test_the_longest_name_and_every_allowed_character_are_accepted() -> None:
    s = Session()
    s.spawn("a" * 32)
    s.spawn("a0-_z")


def test_a_name_is_refused_while_its_agent_is_live() -> None:
    s = Session()
    s.spawn("scout")
    error = s.call_refused(api.SpawnArgs(name="scout"), InvalidArgument)
    assert "already exists" in error.message


def test_a_name_is_busy_while_its_closed_agent_is_still_stopping() -> None:
    s = Session()
    old = s.spawn("scout")
    s.call(api.CloseArgs(agent="scout"))
    error = s.call_refused(api.SpawnArgs(name="scout"), AgentBusy)
    assert old in error.message


def test_a_name_is_free_once_its_agent_is_closed_and_exited_and_then_names_the_new_agent() -> None:
    s = Session()
    old = s.spawn("scout")
    s.call(api.CloseArgs(agent="scout"))
    s.exit(old)
    new = s.spawn("scout")
    assert new != old
    assert s.state.names["scout"] == new
    assert s.state.agent("scout").agent_id == new
    assert s.state.agent(old).closed  # the old one is still known by its id


def test_an_exit_nobody_asked_for_frees_the_name_too() -> None:
    s = Session()
    old = s.spawn("scout")
    s.exit(old, 1)
    assert s.spawn("scout") != old


def test_a_handle_of_another_kind_is_refused_naming_its_kind() -> None:
    s = Session()
    s.spawn("scout")
    task_id = s.delegate("scout")
    error = s.call_refused(api.CloseArgs(agent=task_id), InvalidHandle)
    assert "is a task id, not an agent" in error.message
    s.call_refused(api.CloseArgs(agent="nobody"), InvalidHandle)


# ------------------------------------------------------------------ the process table


def test_the_process_table_is_exactly_the_expected_machine() -> None:
    assert dict(PROCESS_TRANSITIONS) == EXPECTED


@pytest.mark.parametrize(("state", "event"), list(itertools.product(STATES, EVENTS)))
def test_every_move_of_the_process_machine_is_taken_or_changes_nothing(
    state: str, event: str
) -> None:
    s = Session()
    agent_id = s.spawn("scout")
    row = s.state.agents[agent_id]
    s.state.agents[agent_id] = msgspec.structs.replace(row, process_state=state)
    before = s.state.agents[agent_id]
    s.now = T0 + 5
    effects = agents.move(s.state, agent_id, event, s.ctx())  # type: ignore[arg-type]
    target = EXPECTED.get((state, event))
    after = s.state.agents[agent_id]
    if target is None:
        assert effects == []
        assert after == before
        return
    assert after.process_state == target and after.last_active_at == T0 + 5
    (told,) = of(effects, WatchdogAgent)
    assert told.process_state == target


def test_runtime_events_drive_the_process_state() -> None:
    s = Session()
    a = s.spawn("scout")
    s.runtime(a, "ready")
    assert s.state.agents[a].process_state == "idle"
    s.runtime(a, "turn_start")
    assert s.state.agents[a].process_state == "working"
    s.runtime(a, "ready")  # not a move once running: ignored
    assert s.state.agents[a].process_state == "working"
    s.runtime(a, "turn_end")
    assert s.state.agents[a].process_state == "idle"


def test_a_bridge_ready_in_a_turn_after_a_parent_restart_is_working() -> None:
    s = Session()
    a = s.spawn("scout")
    s.runtime(a, "ready", in_turn=True)
    assert s.state.agents[a].process_state == "working"


def test_a_new_pid_is_journaled_before_the_event_is_shown_to_the_agents_actor() -> None:
    s = Session()
    a = s.spawn("scout")
    effects = s.runtime(a, "ready", pid=4242)
    assert isinstance(effects[0], Journal) and isinstance(effects[1], Forward)
    assert effects[0].record == agents.record_of(s.state.agents[a])
    assert s.state.agents[a].pid == 4242
    again = s.runtime(a, "ready", pid=4242)  # the same pid: nothing to journal
    assert journaled(again) == []


def test_status_gives_the_bridge_pid_while_it_runs_and_never_after_its_exit() -> None:
    s = Session()
    a = s.spawn("scout")
    assert _status_row(s).pid is None  # not reported yet
    s.runtime(a, "ready", pid=4242)
    assert _status_row(s).pid == 4242
    s.exit(a)
    # the pid of an exited process may be anyone's by now: never offered to be killed
    assert _status_row(s).pid is None
    assert s.state.agents[a].pid == 4242  # still on record


def _status_row(s: Session) -> api.AgentStatus:
    (row,) = status_view(s.state, None, s.now).agents
    return row


def test_the_agents_actor_is_shown_only_what_it_printed_and_why_it_went() -> None:
    """Rule 6: turns and usage are the session's; a turn costs the agent's actor nothing."""
    s = Session()
    a = s.spawn("scout")
    s.runtime(a, "ready")
    s.delegate(a)
    shown = {
        event: of(s.runtime(a, event, **fields), Forward)
        for event, fields in (
            ("turn_start", {}),
            ("usage", {"tokens": 5}),
            ("condensation", {"text": "summary"}),
            ("output", {"text": "building"}),
            ("tool_call", {"tool": "bash", "command": "make"}),
            ("tool_result", {"tool": "bash", "output": "ok"}),
            ("error", {"text": "oops"}),
            ("turn_end", {}),
            ("exit", {"text": "bye"}),
        )
    }
    assert {event for event, forwarded in shown.items() if forwarded} == {
        "output",
        "tool_call",
        "tool_result",
        "error",
        "exit",
    }
    assert all(len(f) == 1 and f[0].agent_id == a for f in shown.values() if f)


def test_an_exited_process_takes_no_more_moves() -> None:
    s = Session()
    a = s.spawn("scout")
    s.exit(a)
    for event in ("ready", "turn_start", "turn_end"):
        s.runtime(a, event)
        assert s.state.agents[a].process_state == "exited"


# ------------------------------------------------------------------ exit


def test_an_exit_nobody_asked_for_fails_the_task_and_tells_the_parent() -> None:
    s = Session()
    a = s.spawn("scout")
    task_id = s.delegate("scout")
    s.now = T0 + 9
    effects = s.exit(a, 3, reason="killed by signal 9")
    (exit_record,) = journaled(effects, AgentExitRecord)
    assert exit_record == AgentExitRecord(agent_id=a, exit_code=3, at=T0 + 9, closed=False)
    row = s.state.agents[a]
    assert row.closed and row.process_state == "exited" and row.exit_code == 3
    assert row.active_task is None
    result = s.state.results[task_id]
    assert result.status == "failed"
    assert result.error == (
        "agent process exited with status 3 without calling done: killed by signal 9"
    )
    (note,) = notes(effects, Notice)
    assert note.code == "agent_exited" and note.agent_id == a and note.task_id == task_id
    assert f"its task {task_id} failed" in note.text
    assert delivered(effects, ControlEnvelope) == []  # nobody left to stop


def test_an_exit_without_a_task_is_still_told_and_says_before_ready() -> None:
    s = Session()
    a = s.spawn("scout")
    effects = s.exit(a, None, before_ready=True)
    (note,) = notes(effects, Notice)
    assert note.task_id is None
    assert note.text.startswith("agent scout exited before it was ready.")


def test_an_exit_cancels_the_requests_to_and_from_the_agent_and_tells_the_other_side() -> None:
    s = Session()
    a, b, c = s.spawn("a"), s.spawn("b"), s.spawn("c")
    s.delegate("b")
    to_a = s.ask(b, a)  # b waits on a
    from_a = s.ask(a, c)  # a waits on c
    effects = s.exit(a, 1)
    assert s.state.requests[to_a].state is RequestState.CANCELLED
    assert s.state.requests[from_a].state is RequestState.CANCELLED
    (told,) = delivered(effects, NoticeEnvelope)
    assert told.target_id == b and told.code == "request_cancelled" and told.ref_id == to_a
    assert delivered(effects, NoticeEnvelope, c) == []  # c was asked: nothing to tell it
    assert s.state.tasks[s.state.agents[b].active_task or ""].state is TaskState.RUNNING


def test_a_second_exit_changes_nothing() -> None:
    s = Session()
    a = s.spawn("scout")
    s.exit(a, 1)
    before = s.state.agents[a]
    assert s.exit(a, 2) == []
    assert s.state.agents[a] == before


def test_an_exit_of_an_unknown_agent_changes_nothing() -> None:
    s = Session()
    assert s.exit("shepherd-agent-0badc0de") == []


# ------------------------------------------------------------------ close


def test_close_cancels_the_task_and_the_requests_and_stops_the_process() -> None:
    s = Session()
    a, b = s.spawn("a"), s.spawn("b")
    task_id = s.delegate("a")
    request_id = s.ask(a, b)
    effects = s.call(api.CloseArgs(agent="a"))
    assert answer(effects) == api.CloseResult(agent_id=a, closed=True, cancelled_task_id=task_id)
    # the process is stopped after the task's ending is routed to it (the task's actor)
    ending = next(i for i, e in enumerate(effects) if isinstance(e, TellTask))
    assert effects.index(StopAgent(agent_id=a)) > ending
    assert s.state.results[task_id].status == "cancelled"
    assert s.state.results[task_id].error == "agent closed by the parent"
    assert s.state.requests[request_id].state is RequestState.CANCELLED
    assert delivered(effects, ControlEnvelope) == []  # it is closed: it is sent nothing
    assert s.state.agents[a].closed and s.state.agents[a].process_state == "starting"
    assert notes(effects) == []


def test_closing_a_closed_agent_changes_nothing() -> None:
    s = Session()
    a = s.spawn("scout")
    s.call(api.CloseArgs(agent="scout"))
    effects = s.call(api.CloseArgs(agent=a))
    assert effects == [Answer(value=api.CloseResult(agent_id=a, closed=True))]


def test_the_exit_after_a_close_is_journaled_as_closed_and_not_told() -> None:
    s = Session()
    a = s.spawn("scout")
    s.call(api.CloseArgs(agent="scout"))
    effects = s.exit(a, 0)
    (record,) = journaled(effects, AgentExitRecord)
    assert record.closed
    assert notes(effects) == []


# ------------------------------------------------------------------ a turn's tail


def test_a_turn_keeps_the_last_lines_it_printed_each_cut_short() -> None:
    s = Session()
    a = s.spawn("scout")
    s.runtime(a, "turn_start")
    long = "x" * (TURN_TAIL_LINE_CHARS + 50)
    s.runtime(a, "output", text="\n".join(f"line {i}" for i in range(10)))
    s.runtime(a, "output", text=long)
    s.runtime(a, "tool_call", command="ls -la")
    tail = s.state.turns[a].tail
    assert len(tail) == TURN_TAIL_LINES
    assert tail[:3] == ("line 7", "line 8", "line 9")
    assert tail[3] == "x" * (TURN_TAIL_LINE_CHARS - 1) + "…"
    assert tail[4] == "$ ls -la"
    s.runtime(a, "turn_end")
    assert a not in s.state.turns


def test_an_agents_node_is_journaled_handed_to_the_launcher_shown_and_restored() -> None:
    """``spawn --node``: where the agent runs is one of its options (journaled with it, so a
    restarted parent adopts it there) and a column of status."""
    from protocol.session.restore import fold
    from protocol.session.state import SessionState

    from .harness import SESSION

    s = Session()
    effects = s.call(api.SpawnArgs(name="scout", node="host-b"))
    (spawned,) = of(effects, SpawnAgent)
    assert spawned.options["node"] == "host-b"
    assert _status_row(s).node == "host-b"
    s.spawn("planner")  # without a node: the parent's host
    rows = {r.name: r for r in status_view(s.state, None, s.now).agents}
    assert rows["planner"].node is None
    restored = fold(s.journal, SessionState(SESSION, s.state.settings))
    assert {r.name: r.options.get("node") for r in restored.agents.values()} == {
        "scout": "host-b",
        "planner": None,
    }
