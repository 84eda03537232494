"""A command agent's model provider refusing its turn, reported from the turn's shell with the
real ``shepherd-child rate-limited|provider-error``, and the parent's ``hold`` / ``resume``:
the bridge tells the parent, starts no turn until ``resume``, then runs the refused turn again
(the same command line) and what was queued meanwhile."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.core.limits import MAX_REFUSAL_TEXT_CHARS
from protocol.wire.envelopes import AnyEnvelope, ControlEnvelope, RuntimeEnvelope, TaskDoneEnvelope

from .conftest import FakeParent

pytestmark = [pytest.mark.processes, pytest.mark.timeout(90)]

#: refuses its first turn with the report the message names (once per flag file), then works
AGENT = textwrap.dedent(
    """
    import os, subprocess, sys
    message = sys.argv[-1]
    print(f"TURN {os.environ['SHEPHERD_TURN']} MSG:" + message.replace(chr(10), " "), flush=True)
    if "REFUSE " in message:
        flag = message.split("REFUSE ", 1)[1].split()[0]
        if not os.path.exists(flag):
            open(flag, "w").close()
            report = message.split("REPORT[", 1)[1].split("]", 1)[0].split("|")
            got = subprocess.run(["shepherd-child", *report], capture_output=True, text=True)
            print("REPORT-RC", got.returncode, got.stdout.strip(), got.stderr.strip(), flush=True)
            sys.exit(1)
    if "FINISH" in message:
        subprocess.run(
            ["shepherd-child", "done", "--status", "completed", "--summary", "ran again"],
            check=True, capture_output=True,
        )
    """
)


def start_agent(parent: FakeParent) -> None:
    path = parent.tmp_path / "agent.py"
    path.write_text(AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(path))} {{message}}"
    parent.start_bridge("command", {"cmd": cmd})
    parent.wait_event("ready")


def outputs(parent: FakeParent, after: int = 0) -> list[str]:
    return [
        e.text or ""
        for e in parent.snapshot()[after:]
        if isinstance(e, RuntimeEnvelope) and e.event == "output"
    ]


def count(parent: FakeParent, event: str) -> int:
    return sum(1 for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.event == event)


def is_output(text: str) -> Callable[[AnyEnvelope], bool]:
    def match(env: AnyEnvelope) -> bool:
        return (
            isinstance(env, RuntimeEnvelope) and env.event == "output" and text in (env.text or "")
        )

    return match


def test_a_rate_limited_turn_is_reported_waits_for_resume_and_runs_again(
    parent: FakeParent, tmp_path: Path
) -> None:
    start_agent(parent)
    flag = tmp_path / "refused-once"
    report = "rate-limited|--provider|openai|--retry-after|2.5|--text|429 Too Many Requests"
    task = parent.delegate(f"REFUSE {flag} REPORT[{report}] FINISH")

    at, limited = parent.wait_event("rate_limited")
    assert (limited.provider, limited.retry_after_s) == ("openai", 2.5)
    assert limited.text == "429 Too Many Requests"
    end_at, ended = parent.wait_event("turn_end", after=at)  # the refused turn's own end
    assert ended.exit_code == 1
    assert any(
        "REPORT-RC 0 reported rate_limited (openai, retry after 2.5 s)" in t
        for t in outputs(parent)
    )

    # waiting: a delivery is queued, no turn starts
    parent.message("and then this", sender_id=parent.peer_id, sender_name="planner")
    queued_at, _ = parent.wait_for(is_output("queued: no new turn until resume"), after=end_at)
    assert count(parent, "turn_start") == 1

    parent.send(ControlEnvelope(**parent.base(), action="resume"))
    start_at, _ = parent.wait_event("turn_start", after=queued_at)
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=start_at)
    assert isinstance(done, TaskDoneEnvelope) and done.summary == "ran again"
    # the refused turn ran again with the same message, then the queued message had its turn
    parent.wait_for(is_output("and then this"), after=start_at)
    runs = [t.split("\n")[0] for t in outputs(parent) if t.startswith("TURN ")]
    assert len(runs) == 3, runs
    first, again, queued = runs
    assert first.startswith("TURN 1 MSG:") and again.startswith("TURN 2 MSG:")
    assert first.split("MSG:", 1)[1] == again.split("MSG:", 1)[1]
    assert task.task_id in again
    assert queued.startswith("TURN 3 MSG:") and "and then this" in queued


def test_a_provider_error_of_a_cancelled_task_is_not_run_again(
    parent: FakeParent, tmp_path: Path
) -> None:
    start_agent(parent)
    report = "provider-error|--provider|fake.local|--text|500 Internal Server Error"
    task = parent.delegate(f"REFUSE {tmp_path / 'flag'} REPORT[{report}]")
    at, failed = parent.wait_event("provider_error")
    assert (failed.provider, failed.text, failed.retry_after_s) == (
        "fake.local",
        "500 Internal Server Error",
        None,
    )
    end_at, _ = parent.wait_event("turn_end", after=at)
    cancel = ControlEnvelope(
        **parent.base(), action="cancel_task", task_id=task.task_id, reason="failed: provider_error"
    )
    parent.send(cancel)
    dropped_at, _ = parent.wait_for(is_output("the refused turn is dropped"), after=end_at)
    # the wait ended with it: the next delivery starts a turn at once, without resume
    parent.message("next thing", sender_id=parent.peer_id, sender_name="planner")
    start_at, _ = parent.wait_event("turn_start", after=dropped_at)
    parent.wait_event("turn_end", after=start_at)
    runs = [t.split("\n")[0] for t in outputs(parent) if t.startswith("TURN ")]
    assert len(runs) == 2 and "next thing" in runs[1] and "REFUSE" not in runs[1]
    assert f"Your task {task.task_id} was ended by the parent" in runs[1]


def test_hold_queues_deliveries_until_resume(parent: FakeParent) -> None:
    start_agent(parent)
    parent.send(
        ControlEnvelope(**parent.base(), action="hold", reason="openai cools down for 30 s")
    )
    held_at, _ = parent.wait_for(is_output("held by the parent: openai cools down"))
    parent.message("one", sender_id=parent.peer_id, sender_name="planner")
    parent.message("two", sender_id=parent.peer_id, sender_name="planner")
    first, _ = parent.wait_for(is_output("queued: no new turn until resume"), after=held_at)
    parent.wait_for(is_output("queued: no new turn until resume"), after=first + 1)
    assert count(parent, "turn_start") == 0
    parent.send(ControlEnvelope(**parent.base(), action="resume"))
    start_at, _ = parent.wait_event("turn_start", after=held_at)
    parent.wait_event("turn_end", after=start_at)
    (run,) = [t for t in outputs(parent) if t.startswith("TURN ")]
    assert "one" in run and "two" in run  # both released, in one turn, in order
    assert run.index("one") < run.index("two")


HOSTILE = [
    (["rate-limited", "--provider", ""], "provider"),
    (["rate-limited", "--provider", "open ai"], "provider"),
    (["rate-limited", "--provider", "x" * 70_000], "provider"),
    (["rate-limited", "--provider", "openai", "--retry-after", "-1"], "retry_after_s"),
    (["rate-limited", "--provider", "openai", "--retry-after", "nan"], "retry_after_s"),
    (["rate-limited", "--provider", "openai", "--retry-after", "1e9"], "retry_after_s"),
    (["rate-limited", "--provider", "openai", "--retry-after", "soon"], "--retry-after"),
    (["rate-limited", "--provider", "openai", "--text", "y" * 70_000], "text"),
    (["provider-error", "--provider", "openai"], "--text"),
    (["provider-error", "--provider", "openai", "--text", "   "], "empty"),
    (
        ["provider-error", "--provider", "openai", "--text", "z" * (MAX_REFUSAL_TEXT_CHARS + 1)],
        "text",
    ),
]


@pytest.mark.parametrize(("argv", "named"), HOSTILE, ids=lambda v: str(v)[:40])
def test_hostile_reports_are_invalid_arguments_and_write_nothing(
    parent: FakeParent, tmp_path: Path, argv: list[str], named: str
) -> None:
    report = tmp_path / "turns" / "turn-1.json"
    report.parent.mkdir()
    env = parent.environ(SHEPHERD_TURN_REPORT=str(report), SHEPHERD_COMMAND_SOCKET=None)
    done = parent.run_child(*argv, "--json", env=env)
    assert done.returncode == 2, done
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_argument" and named in error["message"]
    assert not report.exists() and list(report.parent.iterdir()) == []


def test_a_report_outside_a_command_turn_is_refused(parent: FakeParent) -> None:
    done = parent.run_child("rate-limited", "--provider", "openai", "--json")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_argument" and "SHEPHERD_TURN_REPORT" in error["message"]


def test_a_held_scripted_agent_gets_its_deliveries_on_resume_in_order(parent: FakeParent) -> None:
    script = parent.write_script(
        [{"await": "task"}, {"say": "task: {last}"}, {"await": "message"}, {"say": "then: {last}"}]
    )
    parent.start_bridge("scripted", {"script": script})
    parent.wait_event("ready")
    parent.send(ControlEnvelope(**parent.base(), action="hold", reason="cool-down"))
    held_at, _ = parent.wait_for(is_output("held by the parent: cool-down"))
    parent.delegate("first")
    parent.message("second", sender_id=parent.peer_id, sender_name="planner")
    first, _ = parent.wait_for(is_output("queued: no new turn until resume"), after=held_at)
    parent.wait_for(is_output("queued: no new turn until resume"), after=first + 1)
    assert count(parent, "turn_start") == 0
    parent.send(ControlEnvelope(**parent.base(), action="resume"))
    said_at, _ = parent.wait_for(is_output("task: first"), after=held_at)
    parent.wait_for(is_output("then: second"), after=said_at)
