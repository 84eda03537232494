"""``shepherd-child message|done`` import only what one call needs: a command agent pays the
start-up on every call, so the actor runtime (pykka), watchfiles, loguru, the session and the
bridge stay out of it. Checked on the modules a real call has loaded when it ends (never on a
timing). And the logger those modules use (``actors.runtime.log``) keeps loguru's rules:
``actors`` is off until enabled, records name the caller."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.core.ids import IdKind

from .conftest import FakeParent, new_id, task_result

pytestmark = pytest.mark.processes

#: what a child command must never load
HEAVY = (
    "pykka",
    "watchfiles",
    "loguru",
    "actors.session",
    "actors.child.bridge",
    "rich",
    "mcp",
    "opentelemetry",  # tracing is off: nothing of it is imported
)

#: the watchdog modules reading the settings may load
WATCHDOG_SETTINGS = {"protocol.watchdog", "protocol.watchdog.config", "protocol.watchdog.rules"}

#: runs the child CLI's main as `shepherd-child` does, then writes the loaded modules
RUN_AND_LIST = """
import json, sys
from actors.child.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""


def _loaded_by(parent: FakeParent, tmp_path: Path, *args: str) -> list[str]:
    listing = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listing), *args],
        cwd=parent.tmp_path,
        env=parent.environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["accepted"] is True
    modules: list[str] = json.loads(listing.read_text())
    return modules


@pytest.mark.parametrize("command", ["message", "done"])
def test_a_child_command_loads_no_runtime_no_watchfiles_no_session(
    parent: FakeParent, tmp_path: Path, command: str
) -> None:
    if command == "done":
        parent.task_id = new_id(IdKind.TASK)
        parent.answer = lambda env: (True, None, None, task_result(parent))
        args = ["done", "--status", "completed", "--json"]
    else:
        args = ["message", "planner", "hello", "--json"]
    modules = _loaded_by(parent, tmp_path, *args)
    assert (
        "actors.transports.mailbox.mailbox" in modules
    )  # the call really went through the mailbox
    assert [m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)] == []
    # the settings need the watchdog's settings and rules, never its detector, alerts or replay
    assert {m for m in modules if m.startswith("protocol.watchdog")} <= WATCHDOG_SETTINGS


LOGS = """
import sys
import actors
from actors.runtime.log import logger
scope = {"__name__": "actors.fake", "logger": logger}
exec('''
def early():
    logger.debug("dropped"); logger.opt(exception=True).error("dropped")
    return logger.bind(agent="a")
def later(kept):
    logger.info("direct")
    kept.warning("kept")
''', scope)
kept = scope["early"]()
assert "loguru" not in sys.modules, "a log call with logging off imported loguru"
from loguru import logger as real
records = []
real.remove()
real.add(lambda m: records.append(m.record), level="DEBUG")
scope["later"](kept)
assert records == [], "actors logged before it was enabled"
real.enable("actors")
scope["later"](kept)
print([(r["name"], r["function"], r["extra"], r["message"]) for r in records])
"""


def test_actors_logs_nothing_until_enabled_and_records_name_the_caller() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOGS], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(
        [
            ("actors.fake", "later", {}, "direct"),
            ("actors.fake", "later", {"agent": "a"}, "kept"),
        ]
    )


def test_loguru_imported_before_actors_still_leaves_actors_off() -> None:
    script = (
        "from loguru import logger as real\n"
        "records = []\n"
        "real.remove(); real.add(lambda m: records.append(m), level='DEBUG')\n"
        "import actors\n"
        "from actors.runtime.log import logger\n"
        "exec('logger.warning(\"x\")', {'__name__': 'actors.fake', 'logger': logger})\n"
        "assert records == [], records\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
