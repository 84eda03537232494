"""What a shutdown leaves in the journal: every agent it closed, closed and then exited.

An agent's exit travels from the launcher's reaper to the agent's actor, then to the broker,
which journals it. The session's end must not overtake that last hop: the broker's final
drain runs only once every agent's actor has handled what it was told. In-process
supervisor, a real bridge; the agent's actor and the broker are made slow to handle its exit
(the fault under test: busy workers), never waited for by a sleep of the test's own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from actors.session import agent as agent_module
from actors.session.supervisor import Supervisor
from protocol.session import agents as agents_rules
from tests.reliability.live import write_script

pytestmark = pytest.mark.processes

HOLD = {"steps": [{"await": "task"}, {"await": "any"}]}

#: how long the agent's actor takes over its exit: far longer than the rest of a shutdown
SLOW_EXIT_S = 0.5


@pytest.fixture
def slow_exits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every agent's actor handles its process's exit ``SLOW_EXIT_S`` late, and so does the
    broker (both workers busy elsewhere); the agent ids whose exit the broker decided."""
    decided: list[str] = []
    handled = agent_module.AgentActor._process_exited
    rule = agents_rules.exited

    def slow_actor(self: Any, code: int | None, known: str | None = None) -> None:
        time.sleep(SLOW_EXIT_S)  # the injected fault
        handled(self, code, known)

    def slow_rule(s: Any, agent_id: str, *args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_EXIT_S)  # the injected fault
        decided.append(agent_id)
        return rule(s, agent_id, *args, **kwargs)

    monkeypatch.setattr(agent_module.AgentActor, "_process_exited", slow_actor)
    monkeypatch.setattr(agents_rules, "exited", slow_rule)
    return decided


def test_an_agents_exit_is_journaled_before_the_session_ends(
    tmp_path: Path, slow_exits: list[str]
) -> None:
    sup = Supervisor(tmp_path / "session", mailbox_root=tmp_path / "mailbox")
    try:
        spawned = sup.session.spawn("worker", script=write_script(tmp_path, "hold", HOLD))
        task = sup.session.delegate("worker", "hold on").task_id
        sup.session.cancel(task)
    finally:
        sup.shutdown()
    assert slow_exits == [spawned.agent_id]
    lines = (tmp_path / "session" / "journal.jsonl").read_text().splitlines()
    mine = [
        r["type"] for r in map(json.loads, lines) if r["record"].get("agent_id") == spawned.agent_id
    ]
    assert "agent_close" in mine and mine[-1] == "agent_exit", mine
    assert mine.index("agent_close") < len(mine) - 1
