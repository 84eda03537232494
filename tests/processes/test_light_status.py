"""``shepherd status`` imports only what the call needs: no actor runtime, watchfiles, loguru,
session, MCP or A2A server or rich in the client (checked on the modules a real
call against a real ``shepherd serve`` has loaded when it ends, never on a timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

#: what a `shepherd status` call must never load
HEAVY = (
    "pykka",
    "watchfiles",
    "loguru",
    "rich",
    "mcp",
    "a2a",
    "uvicorn",
    "actors.surfaces.a2a_server",
    "actors.session",
    "actors.child",
)
#: the watchdog modules reading the settings may load
WATCHDOG_SETTINGS = {"protocol.watchdog", "protocol.watchdog.config", "protocol.watchdog.rules"}

RUN_AND_LIST = """
import json, sys
from actors.surfaces.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""


def test_status_loads_no_runtime_no_watchfiles_no_session(serve: Any, tmp_path: Path) -> None:
    session = tmp_path / "session"
    serve(session)
    listing = tmp_path / "modules.json"
    argv = ["status", "--json", "--session", str(session)]
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listing), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["agents"] == []
    modules = json.loads(listing.read_text())
    assert (
        "actors.transports.mailbox.mailbox" in modules
    )  # the call really went through the mailbox
    assert [m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)] == []
    # the settings need the watchdog's settings and rules, never its detector, alerts or replay
    assert {m for m in modules if m.startswith("protocol.watchdog")} <= WATCHDOG_SETTINGS
