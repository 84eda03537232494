"""Issue 13: ``shepherd_spawn`` over MCP refuses, before anything starts, what the child would
refuse, checks the name first, and never speaks of command-line flags."""

from __future__ import annotations

import subprocess

import anyio
import pytest

from .conftest import Running
from .test_mcp_server import DEADLINE_S, call, call_error, mcp_session

pytestmark = pytest.mark.processes


def test_mcp_spawn_checks_the_name_first_then_the_adapters_options(running: Running) -> None:
    (running.root / "notes.txt").write_text("not a script\n")

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                # a bad name and no script: the name is what is wrong first
                err = await call_error(session, "shepherd_spawn", {"name": "Bad Name"})
                assert err["code"] == "invalid_argument"
                assert "agent name" in err["message"] and "--script" not in err["message"]
                for arguments, words in (
                    ({"name": "lazy"}, '"script"'),
                    ({"name": "lazy", "script": "notes.txt"}, "not valid JSON"),
                    (
                        {"name": "lazy", "adapter": "command", "cmd": "echo no placeholder"},
                        "{message}",
                    ),
                ):
                    err = await call_error(session, "shepherd_spawn", arguments)
                    assert err["code"] == "invalid_argument", arguments
                    assert words in err["message"], (arguments, err)
                    assert "--" not in err["message"], err  # no CLI flags told to MCP callers

    anyio.run(scenario)
    assert running.supervisor.session.status().agents == ()  # nothing was started


def test_mcp_spawn_many_takes_spawns_worktree_options(running: Running) -> None:
    """``shepherd_spawn_many`` takes spawn's options: each agent in a worktree of its own made
    from ``repo`` (relative to the caller); one ``branch`` for two names is refused whole."""
    repo = running.root / "repo"
    repo.mkdir()
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.invalid"]
    for argv in (
        ["init", "-q", "-b", "main"],
        [*identity, "commit", "-q", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(["git", *argv], cwd=repo, check=True, capture_output=True, timeout=60)
    (running.root / "idle.json").write_text('{"steps": [{"await": "any"}]}')
    given = {"names": ["a", "b"], "script": "idle.json", "worktree": True, "repo": "repo"}

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                err = await call_error(session, "shepherd_spawn_many", {**given, "branch": "x"})
                assert err["code"] == "invalid_argument", err
                assert "cannot share the branch 'x'" in err["message"], err
                spawned = await call(session, "shepherd_spawn_many", given)
                assert spawned["errors"] == [] and all(spawned["agent_ids"]), spawned

    anyio.run(scenario)
    sup = running.supervisor
    trees = {w.agent: w.path for w in sup.call("worktrees", {}).worktrees}
    assert trees == {n: str(sup.session_dir / "worktrees" / n) for n in ("a", "b")}
    branches = subprocess.run(
        ["git", "branch", "--list"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"shepherd/{sup.session_id}/a" in branches and "x" not in branches.split()
