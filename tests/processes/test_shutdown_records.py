"""What a shutdown leaves in the journal: every agent it closed, closed and then exited.

An agent's exit travels from the launcher's reaper to the agent's actor, then to the broker,
which journals it. The session's end must not overtake that last hop: the broker's final
drain runs only once every agent's actor has handled what it was told. In-process
supervisor, a real bridge. The interleaving that lost the exit is forced with events, no
time: the agent's actor handles its exit only once the session's end has begun (its agents'
drain, or else the broker's), and the broker decides an exit that reaches it after its own
drain only once the journal's writer has stopped.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from actors.session import agent as agent_module
from actors.session import session as session_module
from actors.session.broker import BrokerActor
from actors.session.journal_writer import JournalWriter
from actors.session.messages import Drain
from actors.session.supervisor import Supervisor
from protocol.session import agents as agents_rules
from tests.reliability.live import write_script

pytestmark = pytest.mark.processes

HOLD = {"steps": [{"await": "task"}, {"await": "any"}]}
#: a ceiling on each wait, never reached when the code is right
WAIT_S = 30.0


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The interleaving forced (module docstring); the agent ids whose exit the broker
    decided."""
    ending, broker_drained, writer_stopped = threading.Event(), threading.Event(), threading.Event()
    decided: list[str] = []
    handled = agent_module.AgentActor._process_exited
    receive = BrokerActor.on_receive
    rule = agents_rules.exited
    stop = JournalWriter.on_stop
    drain = getattr(session_module, "drain_agents", None)

    def agent_exit(self: Any, code: int | None, known: str | None = None) -> None:
        ending.wait(WAIT_S)
        handled(self, code, known)

    def broker_receive(self: Any, message: Any) -> Any:
        if isinstance(message, Drain):
            broker_drained.set()
            ending.set()
        return receive(self, message)

    def exited(s: Any, agent_id: str, *args: Any, **kwargs: Any) -> Any:
        if broker_drained.is_set():  # after the broker's drain: the writer stops first
            writer_stopped.wait(WAIT_S)
        decided.append(agent_id)
        return rule(s, agent_id, *args, **kwargs)

    def writer_stop(self: Any) -> None:
        stop(self)
        writer_stopped.set()

    def drain_agents(*args: Any) -> None:
        ending.set()
        assert drain is not None
        drain(*args)

    monkeypatch.setattr(agent_module.AgentActor, "_process_exited", agent_exit)
    monkeypatch.setattr(BrokerActor, "on_receive", broker_receive)
    monkeypatch.setattr(agents_rules, "exited", exited)
    monkeypatch.setattr(JournalWriter, "on_stop", writer_stop)
    if drain is not None:
        monkeypatch.setattr(session_module, "drain_agents", drain_agents)
    return decided


def test_an_agents_exit_is_journaled_before_the_session_ends(
    tmp_path: Path, forced: list[str]
) -> None:
    sup = Supervisor(tmp_path / "session", mailbox_root=tmp_path / "mailbox")
    try:
        spawned = sup.session.spawn("worker", script=write_script(tmp_path, "hold", HOLD))
        task = sup.session.delegate("worker", "hold on").task_id
        sup.session.cancel(task)
    finally:
        sup.shutdown()
    assert forced == [spawned.agent_id]
    lines = (tmp_path / "session" / "journal.jsonl").read_text().splitlines()
    mine = [
        r["type"] for r in map(json.loads, lines) if r["record"].get("agent_id") == spawned.agent_id
    ]
    assert "agent_close" in mine and mine[-1] == "agent_exit", mine
    assert mine.index("agent_close") < len(mine) - 1
