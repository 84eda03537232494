"""A bridge is one process per agent, so what it imports is paid once per agent (memory and
start-up; a 1,000-agent session pays it 1,000 times). A running scripted bridge writes its log
lines through the plain logger and never imports loguru (asyncio, multiprocessing); the lines
read as loguru's did. Checked on the modules the bridge reports importing, never on a timing."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from actors.runtime.plain_log import PlainLogger

from .conftest import FakeParent

#: what a running bridge must not load: loguru and what it drags in
HEAVY = ("loguru", "asyncio", "multiprocessing", "pykka", "watchfiles", "actors.session")

#: loguru's line with the bridge's format: time, level padded to 7, agent, message
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (\S+) +(\S+) \| (.*)$")


@pytest.mark.processes
def test_a_running_bridge_imports_no_loguru_and_logs_loguru_shaped_lines(
    parent: FakeParent,
) -> None:
    script = parent.write_script([{"await": "task"}, {"done": {"status": "completed"}}])
    # the interpreter lists every import on stderr, which is the bridge's log
    bridge = parent.start_bridge("scripted", {"script": script}, PYTHONPROFILEIMPORTTIME="1")
    parent.wait_event("ready")
    parent.delegate("go")
    parent.wait_event("turn_end")
    log = bridge.log_path.read_text(errors="replace")
    imported = re.findall(r"^import time:.*\| +(\S+)$", log, re.MULTILINE)
    assert "actors.child.bridge" in imported  # the listing is really the bridge's
    heavy = [m for m in imported if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == []
    lines = [LINE.match(line) for line in log.splitlines() if not line.startswith("import ")]
    ready = [m for m in lines if m is not None and m.group(3).startswith("ready: pid")]
    assert ready and ready[0].group(1, 2) == ("INFO", "scout")


def _lines(logger: PlainLogger, out: io.StringIO) -> list[tuple[str, str, str]]:
    found = [LINE.match(line) for line in out.getvalue().splitlines()]
    return [(m[1], m[2], m[3]) for m in found if m is not None]


def test_the_plain_logger_formats_filters_and_binds_like_loguru() -> None:
    out = io.StringIO()
    log = PlainLogger("info", out)
    log.debug("dropped {}", 1)  # noqa: PLE1205 - loguru formats with str.format
    log.info("pid {pid} of {}", "x", pid=7)  # noqa: PLE1205
    log.bind(agent="planner").warning("{not formatted without arguments}")
    log.log("ERROR", "by name")
    log.bind(agent="a").bind(agent="b").success("last bind wins")
    assert _lines(log, out) == [
        ("INFO", "-", "pid 7 of x"),
        ("WARNING", "planner", "{not formatted without arguments}"),
        ("ERROR", "-", "by name"),
        ("SUCCESS", "b", "last bind wins"),
    ]


def test_the_plain_logger_appends_the_traceback_being_handled() -> None:
    out = io.StringIO()
    log = PlainLogger("DEBUG", out)
    try:
        raise KeyError("the cause")
    except KeyError:
        log.opt(exception=True).error("callback failed")
        log.exception("again")
        log.error("no traceback asked")
    text = out.getvalue()
    assert text.count("Traceback (most recent call last)") == 2
    assert text.count("KeyError: 'the cause'") == 2
    assert text.rstrip().endswith("no traceback asked")
    log.opt(exception=True).error("outside a handler")  # nothing being handled: the line only
    assert out.getvalue().endswith("| outside a handler\n")


@pytest.mark.parametrize("level", ["", "LOUD", "nan"])
def test_the_plain_logger_refuses_an_unknown_level(level: str) -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        PlainLogger(level, io.StringIO())
    with pytest.raises(ValueError, match="unknown log level"):
        PlainLogger("INFO", io.StringIO()).log(level, "x")


def test_records_reach_the_plain_logger_through_the_projects_logger() -> None:
    script = (
        "import io, sys\n"
        "from actors.runtime.log import logger, use_plain\n"
        "from actors.runtime.plain_log import PlainLogger\n"
        "kept = logger.bind(agent='early')\n"  # bound before the plain logger exists
        "out = io.StringIO()\n"
        "use_plain(PlainLogger('INFO', out))\n"
        "kept.info('kept {}', 1)\n"
        "logger.opt(exception=True).warning('direct')\n"
        "assert 'loguru' not in sys.modules\n"
        "sys.stdout.write(out.getvalue())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    got = [m.group(1, 2, 3) for m in map(LINE.match, done.stdout.splitlines()) if m]
    assert got == [("INFO", "early", "kept 1"), ("WARNING", "-", "direct")]


@pytest.mark.processes
def test_an_unknown_log_level_is_told_and_the_bridge_runs_at_info(parent: FakeParent) -> None:
    script = parent.write_script([{"await": "task"}, {"done": {"status": "completed"}}])
    bridge = parent.start_bridge("scripted", {"script": script}, SHEPHERD_LOG_LEVEL="LOUD")
    parent.wait_event("ready")
    lines = [m.group(1, 3) for m in map(LINE.match, bridge.log().splitlines()) if m]
    assert lines[0] == (
        "WARNING",
        "unknown log level 'LOUD'; one of TRACE, DEBUG, INFO, "
        "SUCCESS, WARNING, ERROR, CRITICAL; logging at INFO",
    )
    assert any(text.startswith("ready: pid") for _, text in lines)
