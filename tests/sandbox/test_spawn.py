"""What ``spawn --sandbox`` accepts and refuses: a scripted agent's ``run`` steps sandboxed too;
fail closed (no bubblewrap: the spawn is refused; a bridge that cannot make the sandbox never
runs its agent); hostile values for every flag refused by name with nothing changed."""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest

from actors.child import sandbox_host
from protocol.core.errors import InvalidArgument, SandboxUnavailable
from tests.processes.conftest import cli, serve
from tests.sandbox.conftest import Team, finish

__all__ = ["serve"]  # a fixture used here

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]


def test_a_scripted_agents_run_steps_run_in_its_sandbox(team: Team, tmp_path: Path) -> None:
    outside = Path("/var/tmp") / f"shepherd-run-probe-{secrets.token_hex(6)}"
    work = tmp_path / "work"
    work.mkdir()
    probe = f"touch {outside}; echo $? > rc.txt; tr '\\0' ' ' < /proc/1/cmdline > pid1.txt"
    steps: list[dict[str, Any]] = [{"await": "task"}, {"run": probe}]
    steps += [{"done": {"status": "completed", "summary": "ran"}}, {"await": "any"}]
    script = tmp_path / "run.json"
    script.write_text(json.dumps({"steps": steps}))
    team[0].call("spawn", {"name": "runner", "script": str(script), "cwd": str(work),
                           "sandbox": True})  # fmt: skip
    assert finish(team, "runner").status == "completed"
    assert (work / "rc.txt").read_text().strip() != "0"
    assert "bwrap --unshare" in (work / "pid1.txt").read_text()
    assert not outside.exists()


def test_without_bubblewrap_a_sandboxed_spawn_is_refused_and_nothing_starts(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, _ = team
    empty = tmp_path / "no-bwrap"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # bwrap is nowhere to be found
    sandbox_host.probe.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            sup.call("spawn", {"name": "boxed", "adapter": "command", "cmd": "x {message}",
                               "cwd": str(tmp_path), "sandbox": True})  # fmt: skip
    finally:
        monkeypatch.undo()
        sandbox_host.probe.cache_clear()
    assert sup.call("status", {}).agents == ()


def test_a_bridge_that_cannot_make_its_sandbox_never_runs_the_agent(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's check passed (bubblewrap works here), but the bridge finds none: the agent
    exits with the reason and its command never ran unsandboxed."""
    sup, sink = team
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "ran.txt"
    sandbox_host.probe(False)  # the parent's check: cached as working
    empty = tmp_path / "no-bwrap"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # what the bridge starts with
    sup.call("spawn", {"name": "boxed", "adapter": "command", "cwd": str(work),
                       "cmd": f"/bin/sh -c 'echo ran > {marker}' {{message}}",
                       "sandbox": True})  # fmt: skip

    def exited(items: list[Any]) -> bool:
        return any(getattr(n, "code", None) == "agent_exited" for n in items)

    assert sink.wait_for(exited, timeout=60), sink.items
    row = sup.call("status", {}).agents[0]
    assert row.process_state == "exited" and row.exit_code == 2
    assert not marker.exists()
    log = (sup.session_dir / "agents" / row.agent_id / "output.log").read_text()
    assert "sandbox_unavailable" in log and "bubblewrap" in log


HOSTILE: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"sandbox_rw": ["relative/path"]}, InvalidArgument, "absolute"),
    ({"sandbox_rw": ["/"]}, InvalidArgument, "other than /"),
    ({"sandbox_rw": ["/tmp/../etc"]}, InvalidArgument, "normalised"),
    ({"sandbox_rw": ["/tmp//x"]}, InvalidArgument, "normalised"),
    ({"sandbox_rw": ["/a\x00b"]}, InvalidArgument, "normalised"),
    ({"sandbox_rw": ["/" + "x" * 1100]}, InvalidArgument, "sandbox_rw"),
    ({"sandbox_rw": [f"/p{i}" for i in range(17)]}, InvalidArgument, "sandbox_rw"),
    ({"sandbox_rw": ["/nonexistent/shepherd/path"]}, InvalidArgument, "does not exist"),
    ({"sandbox_pids": -1}, InvalidArgument, "sandbox_pids"),
    ({"sandbox_pids": 70000}, InvalidArgument, "sandbox_pids"),
    ({"sandbox_pids": "many"}, InvalidArgument, "sandbox_pids"),
    ({"sandbox_tmp_mb": 0}, InvalidArgument, "sandbox_tmp_mb"),
    ({"sandbox_tmp_mb": 10**9}, InvalidArgument, "sandbox_tmp_mb"),
    ({"env": ["SHEPHERD_CAPABILITY"]}, InvalidArgument, "identity"),
    ({"env": ["A B"]}, InvalidArgument, "env"),
    ({"env": ["1ABC"]}, InvalidArgument, "env"),
    ({"env": [f"V{i}" for i in range(65)]}, InvalidArgument, "env"),
    ({"sandbox_net": "yes"}, InvalidArgument, "sandbox_net"),
]


@pytest.mark.parametrize(("extra", "error", "said"), HOSTILE, ids=[str(h[0])[:40] for h in HOSTILE])
def test_hostile_sandbox_values_are_refused_by_name_and_nothing_changes(
    team: Team, tmp_path: Path, extra: dict[str, Any], error: type[Exception], said: str
) -> None:
    sup, _ = team
    spawn = {"name": "boxed", "adapter": "command", "cmd": "x {message}", "cwd": str(tmp_path)}
    with pytest.raises(error, match=said):
        sup.call("spawn", {**spawn, "sandbox": True, **extra})
    assert sup.call("status", {}).agents == ()


def test_a_sandboxed_agent_cannot_work_in_the_root(team: Team) -> None:
    sup, _ = team
    with pytest.raises(InvalidArgument, match="cannot work in /"):
        sup.call("spawn", {"name": "boxed", "adapter": "command", "cmd": "x {message}",
                           "cwd": "/", "sandbox": True})  # fmt: skip
    assert sup.call("status", {}).agents == ()


@pytest.mark.parametrize(
    "extra",
    [
        {"sandbox_net": True},
        {"sandbox_pids": 4},
        {"sandbox_tmp_mb": 4},
        {"env": ["HOME"]},
        {"sandbox_rw": ["/tmp"]},
    ],
)
def test_a_sandbox_option_without_sandbox_is_refused_naming_its_flag(
    team: Team, tmp_path: Path, extra: dict[str, Any]
) -> None:
    sup, _ = team
    spawn = {"name": "plain", "adapter": "command", "cmd": "x {message}", "cwd": str(tmp_path)}
    flag = "--" + next(iter(extra)).replace("_", "-")
    with pytest.raises(InvalidArgument, match=f"needs sandbox.*|{flag}"):
        sup.call("spawn", {**spawn, **extra})
    assert sup.call("status", {}).agents == ()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--sandbox", "--sandbox-pids", "-1"], "sandbox_pids"),
        (["--sandbox", "--sandbox-tmp-mb", "0"], "sandbox_tmp_mb"),
        (["--sandbox", "--env", "SHEPHERD_SESSION"], "identity"),
        (["--sandbox-net"], "needs sandbox"),
        (["--sandbox", "--sandbox-rw", "relative"], "absolute"),
    ],
)
def test_the_command_line_refuses_hostile_sandbox_flags(
    serve: Any, tmp_path: Path, args: list[str], said: str
) -> None:
    serve()
    session = tmp_path / "session"
    code, data = cli("spawn", "boxed", "--adapter", "command", "--cmd", "x {message}", *args,
                     session=session, check=False)  # fmt: skip
    assert code == 2 and data["error"]["code"] == "invalid_argument", data
    assert said in data["error"]["message"], data
    _, status = cli("status", session=session)
    assert status["agents"] == []


def worked(team: Team, tmp_path: Path) -> Any:
    """A sandboxed command agent ``w`` that has completed a task: its status row."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "w.sh").write_text("shepherd-child done --status completed --summary ok\n")
    team[0].call("spawn", {"name": "w", "adapter": "command", "cwd": str(work),
                           "cmd": "bash w.sh {message}", "sandbox": True})  # fmt: skip
    assert finish(team, "w").status == "completed"
    return team[0].call("status", {}).agents[0]


def test_the_pids_group_is_removed_when_the_agent_exits(team: Team, tmp_path: Path) -> None:
    sup, _ = team
    row = worked(team, tmp_path)
    base = sandbox_host.pids_base()
    assert base is not None
    groups = [p for p in base.iterdir() if p.name.startswith(f"shepherd-{row.agent_id}-")]
    assert len(groups) == 1 and (groups[0] / "pids.max").read_text().strip() == "512"
    assert row.pid is not None
    bridge = os.pidfd_open(row.pid)  # readable once the bridge has exited
    try:
        sup.call("close", {"agent": "w"})
        assert select.select([bridge], [], [], 60)[0], "the bridge did not exit"
    finally:
        os.close(bridge)
    left = [p.name for p in base.iterdir() if p.name.startswith(f"shepherd-{row.agent_id}-")]
    assert left == []  # the bridge removed it before it exited


def test_what_a_killed_bridge_left_outside_is_removed_by_the_parent(
    team: Team, tmp_path: Path
) -> None:
    _, sink = team
    row = worked(team, tmp_path)
    assert row.pid is not None
    name = sandbox_host.leftover_name(row.agent_id, row.pid)
    base = sandbox_host.pids_base()
    assert base is not None and (base / name).is_dir()
    sockets = Path(tempfile.gettempdir()) / name
    assert (sockets / "bridge.sock").exists()
    os.kill(row.pid, signal.SIGKILL)  # no clean-up of its own

    def exited(items: list[Any]) -> bool:
        return any(getattr(n, "code", None) == "agent_exited" for n in items)

    assert sink.wait_for(exited, timeout=60), sink.items
    assert not (base / name).exists() and not sockets.exists()
