"""The acp adapter in a real session (a real supervisor, ``spawn --adapter acp``) with the
scripted ACP agent: a permission request is a Shepherd approval (the task ``waiting`` until the
parent decides), and the usage the agent reports counts against the task's budget."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.records.notifications import Notice
from protocol.records.tasks import TaskState
from tests.pi.test_pi_live import WAIT_S, Team, completions

pytestmark = [pytest.mark.timeout(180)]

AGENT = Path(__file__).with_name("scripted_agent.py")


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    built = Team(tmp_path, Path(sys.executable))  # no Pi: only its supervisor is used
    try:
        yield built
    finally:
        built.close()


def spawn(team: Team, name: str, turns: list[list[dict[str, Any]]]) -> None:
    script = team.tmp_path / f"{name}.json"
    script.write_text(json.dumps(turns))
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))} {shlex.quote(str(script))}"
    team.session.spawn(name, adapter="acp", acp_cmd=cmd, cwd=str(team.workdir))


def settled(team: Team, task_id: str) -> Any:
    assert team.sink.wait_for(
        lambda _: any(r.task_id == task_id for r in completions(team.sink)), 3 * WAIT_S
    ), team.sink.items
    return next(r for r in completions(team.sink) if r.task_id == task_id)


def test_a_permission_request_makes_the_task_wait_for_the_parent(team: Team) -> None:
    done = {"status": "completed", "summary": "deployed"}
    spawn(
        team,
        "deployer",
        [[{"permission": "deploy to prod"}, {"mcp": "shepherd_done", "arguments": done}]],
    )
    s = team.session
    task = s.delegate("deployer", "Deploy.")
    s.watch(task.task_id)

    def requested(items: list[Any]) -> list[Notice]:
        return [n for n in items if isinstance(n, Notice) and n.code == "approval_requested"]

    assert team.sink.wait_for(lambda items: bool(requested(items)), 3 * WAIT_S), team.sink.items
    note = requested(team.sink.items)[0]
    assert note.task_id == task.task_id and "deploy to prod" in note.text
    (row,) = s.status("deployer").agents
    assert row.task is not None and row.task.state is TaskState.WAITING
    s.approve(note.refs[0], note="go")
    result = settled(team, task.task_id)
    assert (result.status, result.text) == ("completed", "deployed")


def test_reported_tokens_count_against_the_task_budget(team: Team) -> None:
    spawn(team, "spender", [[{"say": "spent"}, {"tokens": 5000}]])
    s = team.session
    task = s.delegate("spender", "Spend.", max_tokens=1000)
    s.watch(task.task_id)
    result = settled(team, task.task_id)
    assert result.status == "failed"
    assert "budget" in json.dumps(msgspec_builtins(result))


def msgspec_builtins(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)
