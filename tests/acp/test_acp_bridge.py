"""The child bridge with the ``acp`` adapter, alone against a fake parent: a real
``shepherd-child run`` process driving a scripted ACP agent built with the SDK's agent side."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.child.acp_lines import LINE_LIMIT
from protocol.calls.approvals import APPROVED, DENIED
from protocol.core.ids import IdKind
from protocol.wire.envelopes import (
    ControlEnvelope,
    MessageEnvelope,
    NoticeEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)
from tests.child.conftest import WAIT_S, FakeParent, new_id
from tests.reliability.live import wait_terminated

pytestmark = [pytest.mark.timeout(90)]

AGENT = Path(__file__).with_name("scripted_agent.py")


def start(parent: FakeParent, turns: list[list[dict[str, Any]]], **options: Any) -> Path:
    script = parent.tmp_path / "agent.json"
    script.write_text(json.dumps(turns))
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))} {shlex.quote(str(script))}"
    parent.start_bridge("acp", {"acp_cmd": cmd, **options})
    parent.wait_event("output", text=lambda t: t and "acp agent ready" in t)
    return script


def lines(path: Path) -> list[Any]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_log(parent: FakeParent, script: Path, key: str) -> Any:
    """The first line of the agent's log carrying ``key`` (waits on the parent's condition:
    every logged step is followed by an event the bridge publishes)."""
    found: list[Any] = []

    def check() -> bool:
        found[:] = [line[key] for line in lines(Path(f"{script}.log")) if key in line]
        return bool(found)

    with parent._cond:
        ok = parent._cond.wait_for(check, WAIT_S)
    assert ok, f"agent logged no {key!r}: {lines(Path(f'{script}.log'))}"
    return found[0]


def test_a_task_is_one_prompt_turn_and_its_tool_events_and_usage_reach_the_parent(
    parent: FakeParent,
) -> None:
    done_cmd = [sys.executable, "-m", "actors.child.entry", "done", "--status", "completed"]
    script = start(
        parent,
        [
            [
                {"tool": "ls", "input": {"command": "ls -la"}, "output": "a.txt"},
                {"say": "listed"},
                {"cost": 0.25},
                {"tokens": 1234},
                {"shell": [*done_cmd, "--summary", "listed the files"]},
            ]
        ],
    )
    task = parent.delegate("List the files, then finish.")
    _, call = parent.wait_event("tool_call")
    assert (call.tool, call.command) == ("execute", '{"command":"ls -la"}')
    _, result = parent.wait_event("tool_result")
    assert result.command == '{"command":"ls -la"}' and "a.txt" in (result.output or "")
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope)
    # the done names no task: the parent settles the task it gave (``task``)
    assert (done.status, done.summary) == ("completed", "listed the files")
    assert parent.task_id == task.task_id
    _, end = parent.wait_event("turn_end")
    assert end.text == "end_turn"
    usage = [e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.event == "usage"]
    assert sorted((u.tokens or 0, u.cost or 0.0) for u in usage) == [(0, 0.25), (1234, 0.0)]
    said = [e.text for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert "listed" in said
    prompts = lines(Path(f"{script}.prompts"))
    assert len(prompts) == 1 and "List the files, then finish." in prompts[0]


def test_the_session_gets_the_child_tools_as_an_mcp_server_and_shepherd_done_settles(
    parent: FakeParent,
) -> None:
    script = start(
        parent,
        [
            [
                {"say": "done soon"},
                {
                    "mcp": "shepherd_done",
                    "arguments": {"status": "blocked", "summary": "--needs a key"},
                },
            ]
        ],
    )
    assert wait_log(parent, script, "mcp_servers") == ["shepherd"]
    parent.delegate("Try it.")
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.status, done.summary) == ("blocked", "--needs a key")
    assert '"accepted": true' in wait_log(parent, script, "mcp")


def test_a_turn_ending_without_done_settles_nothing_and_a_follow_up_is_a_new_prompt(
    parent: FakeParent,
) -> None:
    script = start(parent, [[{"say": "first"}], [{"say": "second"}]])
    parent.delegate("Do the first thing.")
    end_at, _ = parent.wait_event("turn_end")
    parent.message("And now the second.", task_id=parent.task_id)
    parent.wait_event("turn_end", after=end_at + 1)
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())
    prompts = lines(Path(f"{script}.prompts"))
    assert len(prompts) == 2 and "And now the second." in prompts[1]


def test_abort_is_session_cancel_and_the_turn_ends_cancelled(parent: FakeParent) -> None:
    script = start(parent, [[{"say": "working"}, {"wait_cancel": True}]])
    parent.delegate("Work until told to stop.")
    parent.wait_event("turn_start")
    parent.send(ControlEnvelope(**parent.base(), action="abort", reason="enough"))
    _, end = parent.wait_event("turn_end")
    assert end.text == "cancelled"
    assert wait_log(parent, script, "cancel")


def test_a_permission_request_is_a_shepherd_approval_and_the_decision_reaches_the_agent(
    parent: FakeParent,
) -> None:
    script = start(
        parent, [[{"permission": "rm -rf build"}, {"say": "asked"}], [{"permission": "push"}]]
    )
    parent.delegate("Clean the build.")
    _, request = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    assert isinstance(request, MessageEnvelope) and "rm -rf build" in request.content
    decide(parent, request, APPROVED)
    assert wait_log(parent, script, "permission") == "yes"
    end_at, _ = parent.wait_event("turn_end")
    parent.message("Push it.", task_id=parent.task_id)
    _, second = parent.wait_for(
        lambda e: isinstance(e, MessageEnvelope) and e.approval, after=end_at
    )
    assert isinstance(second, MessageEnvelope)
    decide(parent, second, DENIED)
    parent.wait_event("turn_end", after=end_at + 1)
    outcomes = [line["permission"] for line in lines(Path(f"{script}.log")) if "permission" in line]
    assert outcomes == ["yes", "no"]


def test_with_approve_rules_only_a_matching_permission_request_goes_to_the_parent(
    parent: FakeParent,
) -> None:
    script = start(
        parent,
        [
            [
                {"permission": "rm -rf build", "kind": "execute"},
                {"permission": "git push origin main", "kind": "execute"},
                {"permission": "git push origin main", "kind": "edit"},
            ]
        ],
        approve=["execute:git push*"],
    )
    parent.delegate("Clean, then push.")
    _, request = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    assert isinstance(request, MessageEnvelope) and "git push origin main" in request.content
    decide(parent, request, DENIED)
    parent.wait_event("turn_end")
    outcomes = [line["permission"] for line in lines(Path(f"{script}.log")) if "permission" in line]
    assert outcomes == ["yes", "no", "yes"]  # allowed at once, denied by the parent, allowed
    asked = [e for e in parent.snapshot() if isinstance(e, MessageEnvelope) and e.approval]
    assert asked == [request]
    parent.wait_event("output", text=lambda t: t and "no --approve rule: execute: rm -rf" in t)


def decide(parent: FakeParent, request: MessageEnvelope, code: str) -> None:
    assert request.reply_inbox is not None
    notice = NoticeEnvelope(
        **parent.base(message_id=new_id(IdKind.MESSAGE)),
        code=code,
        ref_id=request.message_id,
        text="ok" if code == APPROVED else "no",
    )
    parent.mailbox.publish(request.reply_inbox, notice)


def test_a_permission_request_during_a_cancel_is_answered_cancelled(parent: FakeParent) -> None:
    script = start(parent, [[{"permission": "deploy"}, {"wait_cancel": True}]])
    parent.delegate("Deploy.")
    parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    # the parent ends the task while the agent's permission request waits for it
    parent.send(
        ControlEnvelope(
            **parent.base(), action="cancel_task", task_id=parent.task_id, reason="not now"
        )
    )
    assert wait_log(parent, script, "permission") == "cancelled"
    _, end = parent.wait_event("turn_end")
    assert end.text == "cancelled"
    parent.wait_event("output", text=lambda t: t and "approval withdrawn" in t)


def test_an_agent_that_crashes_ends_the_bridge_with_its_status(parent: FakeParent) -> None:
    start(parent, [[{"say": "about to crash"}, {"crash": 3}]])
    parent.delegate("Crash.")
    parent.wait_event("output", text=lambda t: t and "exited with status 3" in t)
    assert parent.bridges[0].wait() == 3


def test_a_malformed_frame_from_the_agent_fails_the_agent_not_the_bridge_silently(
    parent: FakeParent,
) -> None:
    start(parent, [[{"garbage": "{this is not json"}, {"say": "still here"}]])
    parent.delegate("Write garbage.")
    # the SDK drops (and logs) a frame it cannot parse; the session goes on
    _, end = parent.wait_event("turn_end")
    assert end.text == "end_turn"
    said = [e.text for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert "still here" in said
    assert parent.bridges[0].proc.poll() is None


def test_an_agent_command_that_is_not_an_acp_agent_fails_at_start(parent: FakeParent) -> None:
    parent.start_bridge("acp", {"acp_cmd": "true", "startup_timeout_s": 20})
    # ``true`` exits at once: the connection closes before initialize is answered
    parent.wait_event(
        "output",
        text=lambda t: t and ("could not open" in t or "before its session was open" in t),
    )
    assert parent.bridges[0].wait() != 0


def test_recover_loads_the_saved_session_again(parent: FakeParent) -> None:
    script = start(parent, [[{"say": "one"}]])
    first = wait_log(parent, script, "new_session")
    parent.send(ControlEnvelope(**parent.base(), action="close"))
    assert parent.bridges[0].wait() == 0
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))} {shlex.quote(str(script))}"
    parent.start_bridge("acp", {"acp_cmd": cmd, "recovered": True})
    assert wait_log(parent, script, "load_session") == first


def test_a_huge_line_under_the_bound_is_dropped_and_the_session_goes_on(
    parent: FakeParent,
) -> None:
    start(parent, [[{"huge": LINE_LIMIT // 2}, {"say": "still here"}]])
    parent.delegate("Write a huge line.")
    _, end = parent.wait_event("turn_end")
    assert end.text == "end_turn"
    said = [e.text for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert "still here" in said
    assert parent.bridges[0].proc.poll() is None


def test_a_line_over_the_bound_ends_the_agent_and_the_parent_is_told(parent: FakeParent) -> None:
    start(parent, [[{"huge": LINE_LIMIT + 1}, {"say": "never read"}]])
    parent.delegate("Write a line over the bound.")
    parent.wait_event(
        "output", text=lambda t: t and f"it wrote a line over {LINE_LIMIT} bytes" in t
    )
    assert parent.bridges[0].wait() != 0
    said = [e.text for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert "never read" not in said


def test_an_agent_that_closes_its_output_and_lives_on_is_failed_and_ended(
    parent: FakeParent,
) -> None:
    script = start(parent, [[{"say": "closing"}, {"close_output": True}]])
    parent.delegate("Close your output.")
    pid = wait_log(parent, script, "closed_output")
    parent.wait_event("output", text=lambda t: t and "it closed its output" in t)
    assert parent.bridges[0].wait() != 0
    assert wait_terminated(pid, WAIT_S)  # ended with its bridge, not left behind


def test_updates_and_permission_requests_for_another_session_are_refused(
    parent: FakeParent,
) -> None:
    script = start(
        parent,
        [
            [
                {"say": "not ours", "session": "someone-else"},
                {"permission": "rm -rf /", "session": "someone-else"},
                {"say": "ours"},
            ]
        ],
    )
    parent.delegate("Speak for others.")
    _, end = parent.wait_event("turn_end")
    assert end.text == "end_turn"
    assert wait_log(parent, script, "permission_error") == -32602  # invalid params, typed
    said = [e.text or "" for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert "ours" in said and not any("not ours" in text for text in said)
    assert not any(isinstance(e, MessageEnvelope) and e.approval for e in parent.snapshot())
