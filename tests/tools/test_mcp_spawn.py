"""Issue 13: ``shepherd_spawn`` over MCP refuses, before anything starts, what the child would
refuse, checks the name first, and never speaks of command-line flags."""

from __future__ import annotations

import anyio
import pytest

from .conftest import Running
from .test_mcp_server import DEADLINE_S, call_error, mcp_session

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
