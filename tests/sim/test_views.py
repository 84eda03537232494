"""Status views: process state and task state side by side, never merged."""

from __future__ import annotations

import io

import msgspec
import pytest
from rich.console import Console

from actors.surfaces.views import status_table
from protocol.calls.views import render_status
from protocol.core.errors import AgentBusy
from tests.sim.puppet import Puppet
from tests.sim.scenarios import IDLE, new_session


def test_an_idle_agent_with_a_waiting_task_reads_as_waiting_never_as_done() -> None:
    s, _ = new_session(1)
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    s.delegate("scout", "map")
    s.sim.run_all()
    Puppet(s, "scout").ask("planner", "which module?")
    s.sim.advance(134)  # 02:14 of waiting
    data = msgspec.to_builtins(s.status())
    text = render_status(data)
    scout_line = next(line for line in text.splitlines() if line.split()[2] == "scout")
    assert scout_line.startswith("○ 02:14 scout")
    assert "idle / waiting for planner" in scout_line and "(stale)" in scout_line
    assert "completed" not in scout_line
    planner_line = next(line for line in text.splitlines() if line.split()[2] == "planner")
    assert "idle / no task" in planner_line
    out = io.StringIO()
    Console(file=out, width=160).print(status_table(data))
    assert "waiting for planner" in out.getvalue() and "scout" in out.getvalue()


def test_a_closed_agents_name_is_free_only_after_its_process_exited() -> None:
    s, _ = new_session(2)
    s.spawn("scout", script=IDLE)
    s.sim.run_all()
    s.close("scout")  # the close is on its way; the process has not exited yet
    with pytest.raises(AgentBusy, match="still stopping"):
        s.spawn("scout", script=IDLE)
    s.sim.run_all()
    assert s.spawn("scout", script=IDLE).name == "scout"


def test_only_a_polled_mailbox_is_shown() -> None:
    """How an inbox is woken shows only when deliveries wait for the fallback rescan."""
    s, _ = new_session(3)
    s.spawn("fine", script=IDLE)
    s.spawn("slow", script=IDLE)
    s.sim.run_all()
    data = msgspec.to_builtins(s.status())
    assert "mailbox" not in render_status(data)  # the simulation has no filesystem mailbox
    for agent in data["agents"]:
        agent["mailbox_wake"] = "polling" if agent["name"] == "slow" else "bell"
    lines = render_status(data).splitlines()
    assert [line.split()[2] for line in lines if line.endswith("(mailbox polling)")] == ["slow"]
    data["mailbox_wake"] = "polling"
    assert render_status(data).splitlines()[0] == "parent (mailbox polling)"
    out = io.StringIO()
    Console(file=out, width=200).print(status_table(data))
    assert out.getvalue().count("(mailbox polling)") == 2  # the title (parent) and slow


def test_the_summary_says_the_queue_the_caps_the_cool_downs_and_the_paces() -> None:
    s, _ = new_session(4)
    s.spawn("scout", script=IDLE)
    s.spawn("planner", script=IDLE)
    s.sim.run_all()
    data = msgspec.to_builtins(s.status())
    assert "queued" not in render_status(data)  # no admission: nothing said
    data["summary"] |= {
        "running": 1,
        "queued": 2,
        "max_running": 1,
        "cooldowns": {"sim": 1e12},
        "paced": {"sim": 4.5},
        "node_caps": {"n1": 2},
    }
    data["agents"][0]["task"] = {
        "task_id": "shepherd-task-0000000000000001",
        "state": "queued",
        "queue_place": 2,
        "created_at": data["now"],
    }
    text = render_status(data)
    assert "queued (place 2)" in text
    assert (
        "; 1 running of at most 1, 2 queued; cooling down: sim; paced: sim 4.5/s; node caps: n1 2"
    ) in text
