"""The watchdog's operations are entries of the operation table (protocol.ops.watchdog): each
surface (Python API, Supervisor.call, the command line, the tools) takes them from there."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import msgspec
import pytest

from actors.session.sinks import CollectingSink
from actors.session.watchdog import session_call
from actors.surfaces.watchdog_cli import add_watchdog_parser, run_watchdog
from actors.testing import SimSession
from protocol import ops
from protocol.calls import watchdog as w
from protocol.calls.watchdog_views import render_status
from protocol.core.errors import InvalidArgument
from protocol.ops import tools
from protocol.ops import watchdog as wops

LOOPER: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"repeat": {"times": 3, "steps": [{"run": "rg -n TODO src"}, {"sleep": 1}]}},
        {"await": "any"},
    ]
}


@pytest.fixture
def session() -> Any:
    made = SimSession.simulated(11, sink=CollectingSink())
    try:
        yield made
    finally:
        made.shutdown()


def test_every_watchdog_args_struct_has_one_entry_and_every_entry_is_an_operation() -> None:
    structs = {
        v
        for v in vars(w).values()
        if isinstance(v, type) and issubclass(v, w.WatchdogArgs) and v is not w.WatchdogArgs
    }
    assert {op.args for op in ops.WATCHDOG} == structs and len(ops.WATCHDOG) == len(structs) == 11
    for op in ops.WATCHDOG:
        assert ops.parent_op(op.name) is op
        assert ops.OPERATIONS[op.name] is op.args
    # the watchdog's tools are the entries with a tool, and nothing else names them
    watchdog_tools = [s for s in tools.parent_tools() if s.name.startswith("watchdog_")]
    assert [s.op for s in watchdog_tools] == [op.name for op in ops.WATCHDOG if op.tool]


def test_the_python_api_has_a_method_per_entry(session: Any) -> None:
    session.spawn("scout", script=LOOPER)
    session.delegate("scout", "go")
    session.sim.run_all(max_time=30)
    assert session.watchdog_status()["enabled"] is True
    assert session.watchdog_set("cooldown_s", "7")["cooldown_s"] == 7.0
    assert session.watchdog_config()["cooldown_s"] == 7.0
    assert session.watchdog_config(key="cooldown_s", value="8")["cooldown_s"] == 8.0
    assert session.watchdog_pause() == {"paused": True}
    assert session.watchdog_resume() == {"paused": False}
    assert session.watchdog_detect_stuck("scout")["likely_stuck"] is True
    assert len(session.watchdog_inspect("scout", limit=1)["events"]) == 1
    assert len(session.watchdog_read_events("scout", 2)["events"]) == 2
    assert [t["name"] for t in session.watchdog_list_targets()] == ["scout"]
    assert session.watchdog_steer_subagent("scout")["sent"] is False
    with pytest.raises(InvalidArgument, match="limit"):  # checked by the entry, not the actor
        session.watchdog_inspect("scout", limit=0)


def test_supervisor_call_takes_every_entry_by_its_name(session: Any) -> None:
    session.spawn("scout", script=LOOPER)
    assert session_call(session, "watchdog_status", {})["enabled"] is True
    assert session_call(session, "watchdog_set", {"key": "repeat_threshold", "value": "4"}) == (
        session.watchdog_config()
    )
    assert session_call(session, "watchdog_pause", {}) == {"paused": True}
    assert session_call(session, "watchdog", {"op": "resume"}) == {"paused": False}
    with pytest.raises(InvalidArgument, match="key"):
        session_call(session, "watchdog_set", {"value": "4"})


def _run(argv: list[str], call: Any) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="shepherd")
    add_watchdog_parser(parser.add_subparsers(dest="command", required=True))
    out, err = io.StringIO(), io.StringIO()
    code = run_watchdog(parser.parse_args(["watchdog", *argv]), call, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["inspect", "scout", "--limit", "0"], "limit"),
        (["inspect", "scout", "--limit", "1000001"], "limit"),
        (["inspect", ""], "agent"),
        (["set", "", "5"], "key"),
    ],
)
def test_the_command_line_checks_the_entrys_bounds_before_calling(
    argv: list[str], named: str
) -> None:
    called: list[str] = []
    code, out, _ = _run([*argv, "--json"], lambda op, args: called.append(op))
    error = json.loads(out)["error"]
    assert code == 2 and error["code"] == "invalid_argument" and named in error["message"]
    assert called == []  # nothing was sent


def test_the_command_line_calls_the_actors_operation_and_prints_the_entrys_view() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    answer = {"enabled": True, "paused": False, "alert_mode": "main_only", "targets": []}

    def call(op: str, args: dict[str, Any]) -> Any:
        calls.append((op, args))
        return answer if op == "status" else {"cooldown_s": 9.0}

    assert _run(["status"], call) == (0, render_status(answer) + "\n", "")
    code, out, _ = _run(["set", "cooldown_s", "9"], call)
    assert code == 0 and out.startswith("cooldown_s = 9.0 ")
    assert calls == [("status", {}), ("set", {"key": "cooldown_s", "value": "9"})]


@pytest.mark.parametrize(
    ("ts", "shown"),
    [
        (1_700_000_000.0, "22:13:20Z"),
        (12.34, "12.3s"),
        (float("nan"), "-"),
        (float("inf"), "-"),
        (True, "-"),
        ("soon", "-"),
    ],
)
def test_a_targets_last_activity_is_rendered_without_a_clock(ts: Any, shown: str) -> None:
    data = {"enabled": True, "targets": [{"name": "a", "last_active_at": ts}]}
    assert render_status(data).endswith(f"last active {shown}")


def test_the_older_envelope_names_the_actors_operation_and_is_checked_by_the_entry() -> None:
    assert wops.check_call({"op": "config", "args": {"key": "k", "value": "v"}}) == (
        "set",
        {"key": "k", "value": "v"},
    )
    with pytest.raises(InvalidArgument, match="limit"):
        wops.check_call({"op": "read_events", "args": {"agent": "a", "limit": 0}})
    assert msgspec.json.encode(wops.OP_ARGS["status"]()) == b"{}"
