"""A watchdog agent end to end (``spawn --role watchdog``): a real command agent's shell calls
``shepherd-child watchdog-status|watchdog-events|watchdog-stuck|watchdog-alert`` about a real
scripted agent stuck in a loop; the parent answers it and receives its alert as a
``watchdog_alert`` notification; hostile values are refused with typed errors; a worker agent's
same calls are refused ``forbidden_sender``; a paused watchdog sends no alert."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.core.limits import MAX_WATCHDOG_ALERT_CHARS
from protocol.records.notifications import WatchdogAlert

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

WAIT_S = 60.0
LOOP = "printf 'src/a.py:1: TODO fix\\n'"
ALERT = "looper keeps running the same printf: it looks stuck"

#: the watchdog agent's shell: each call's JSON answer (or error) and exit status into
#: $OUT/NAME.json and $OUT/NAME.rc; a turn whose message says PAUSED-ROUND only alerts
WATCHDOG_SH = """
set -u
call() {
  name=$1; shift
  shepherd-child "$1" --json "${@:2}" > "$OUT/$name.json"; echo $? > "$OUT/$name.rc"
}
case "$1" in
*PAUSED-ROUND*)
  call paused watchdog-alert looper "paused alert"
  ;;
*)
  call status watchdog-status
  call events watchdog-events looper --limit 2
  call stuck watchdog-stuck
  call stuck_one watchdog-stuck looper
  call alert watchdog-alert looper "$ALERT"
  # hostile values
  call limit_zero watchdog-events looper --limit 0
  call limit_negative watchdog-events looper --limit=-1
  call limit_huge watchdog-events looper --limit 1000000000
  call limit_text watchdog-events looper --limit many
  call unknown watchdog-events nobody
  call task_id watchdog-events shepherd-task-0123456789abcdef
  call empty_alert watchdog-alert looper ""
  call blank_alert watchdog-alert looper "   "
  call long_alert watchdog-alert looper "$(head -c $LONG /dev/zero | tr '\\0' x)"
  call no_agent watchdog-events
  ;;
esac
shepherd-child done --status completed --summary asked
"""


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[Supervisor, CollectingSink, Path]]:
    sink = CollectingSink()
    sup = Supervisor(tmp_path / "session", sinks=[sink], mailbox_root=tmp_path / "mailbox")
    out = tmp_path / "out"
    out.mkdir()
    try:
        yield sup, sink, out
    finally:
        sup.shutdown()


def _answers(out: Path) -> dict[str, tuple[int, Any]]:
    return {
        path.stem: (int(path.with_suffix(".rc").read_text()), json.loads(path.read_text()))
        for path in out.glob("*.json")
    }


def _loop(sup: Supervisor, sink: CollectingSink, tmp_path: Path) -> str:
    """A scripted agent that ran one command three times; its task id once the watchdog's
    own rule alerted about it."""
    script = tmp_path / "loop.json"
    steps = [{"await": "task"}, {"repeat": {"times": 3, "steps": [{"run": LOOP}]}}]
    script.write_text(json.dumps({"steps": [*steps, {"await": "any"}]}))
    sup.session.spawn("looper", script=str(script), cwd=str(tmp_path))
    task = sup.session.delegate("looper", "find the TODOs")

    def alerted(items: list[Any]) -> bool:
        return any(isinstance(n, WatchdogAlert) and n.reported_by is None for n in items)

    assert sink.wait_for(alerted, WAIT_S), sink.items
    return task.task_id


def _run(sup: Supervisor, name: str, text: str) -> None:
    task = sup.session.delegate(name, text)
    result = sup.session.wait(task.task_id, timeout_s=WAIT_S)
    assert [r.status for r in result.completed] == ["completed"], result


def _watchdog_agent(
    sup: Supervisor, tmp_path: Path, out: Path, role: str = "watchdog", name: str = "wd"
) -> None:
    script = tmp_path / "watchdog.sh"
    script.write_text(WATCHDOG_SH)
    env = f"OUT={shlex.quote(str(out))} ALERT={shlex.quote(ALERT)} "
    env += f"LONG={MAX_WATCHDOG_ALERT_CHARS + 1}"
    cmd = f"{env} bash {shlex.quote(str(script))} {{message}}"
    sup.session.spawn(name, adapter="command", cmd=cmd, cwd=str(tmp_path), role=role)


def test_a_watchdog_agent_reads_the_session_and_alerts_the_parent(
    team: tuple[Supervisor, CollectingSink, Path], tmp_path: Path
) -> None:
    sup, sink, out = team
    looper_task = _loop(sup, sink, tmp_path)
    _watchdog_agent(sup, tmp_path, out)
    _run(sup, "wd", "Watch the others.")
    answers = _answers(out)
    wd_id = sup.session.status("wd").agents[0].agent_id

    rc, status = answers["status"]
    assert rc == 0 and status["enabled"] is True and status["targets_total"] == 2
    kinds = {t["name"]: t["kind"] for t in status["targets"]}
    assert kinds == {"looper": "task", "wd": "watchdog"}

    rc, events = answers["events"]
    assert rc == 0 and events["name"] == "looper" and events["task_id"] == looper_task
    assert len(events["events"]) == 2  # the newest two: a call and a result
    assert all(e["command"] == LOOP and "output" not in e for e in events["events"])

    rc, stuck = answers["stuck"]
    assert rc == 0 and stuck["checked"] == 2
    assert [(a["name"], a["likely_stuck"]) for a in stuck["stuck"]] == [("looper", True)]
    rc, one = answers["stuck_one"]
    assert rc == 0 and "repeated_command" in one["reasons"]

    rc, alerted = answers["alert"]
    assert rc == 0 and alerted == {
        "alerted": True,
        "agent_id": one["agent_id"],
        "confidence": one["confidence"],
    }
    (alert,) = [n for n in sink.items if isinstance(n, WatchdogAlert) and n.reported_by]
    assert alert.reported_by == wd_id and alert.agent_name == "looper"
    assert alert.task_id == looper_task and ALERT in alert.text
    # read-only: the looper's task and process are as they were
    looper = sup.session.status("looper").agents[0]
    assert looper.task is not None and looper.task.state.value == "running"
    assert looper.process_state != "exited"
    assert sup.session.status("wd").agents[0].role == "watchdog"

    # hostile values: typed errors, exit 2, nothing sent to the parent's sink
    codes = {name: (rc, body.get("error", {}).get("code")) for name, (rc, body) in answers.items()}
    for name in ("limit_zero", "limit_negative", "limit_huge", "limit_text", "empty_alert"):
        assert codes[name] == (2, "invalid_argument"), (name, answers[name])
    assert codes["long_alert"] == (2, "invalid_argument")
    assert codes["blank_alert"] == (2, "invalid_argument")
    assert codes["no_agent"] == (2, "invalid_argument")
    assert codes["unknown"] == (2, "invalid_handle")
    assert codes["task_id"] == (2, "invalid_handle")
    assert "not an agent" in answers["task_id"][1]["error"]["message"]
    assert len([n for n in sink.items if isinstance(n, WatchdogAlert) and n.reported_by]) == 1


def test_a_worker_is_refused_and_a_paused_watchdog_sends_no_alert(
    team: tuple[Supervisor, CollectingSink, Path], tmp_path: Path
) -> None:
    sup, sink, out = team
    _loop(sup, sink, tmp_path)
    _watchdog_agent(sup, tmp_path, out, role="worker")
    _run(sup, "wd", "Watch the others.")
    answers = _answers(out)
    for name in ("status", "events", "stuck", "alert"):
        rc, body = answers[name]
        assert rc == 2 and body["error"]["code"] == "forbidden_sender", (name, body)
        assert "worker agent" in body["error"]["message"]
    assert not [n for n in sink.items if isinstance(n, WatchdogAlert) and n.reported_by]

    sup.session.watchdog_pause()
    for path in out.iterdir():
        path.unlink()
    _watchdog_agent(sup, tmp_path, out, name="wd2")
    _run(sup, "wd2", "PAUSED-ROUND")
    rc, paused = _answers(out)["paused"]
    assert rc == 0 and paused["alerted"] is False and "paused" in paused["reason"]
    assert not [n for n in sink.items if isinstance(n, WatchdogAlert) and n.reported_by]
