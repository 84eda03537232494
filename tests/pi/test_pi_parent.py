"""The Pi parent extension (actors/pi/shepherd_parent.ts): the real Pi in RPC mode is the parent.

A real :class:`Supervisor` runs in this process (state under ``tmp_path``); Pi finds it through
``SHEPHERD_SESSION`` and runs the venv's ``shepherd`` CLI for every tool call and for following
the session's notifications. The scripted model plays the parent model. Nothing sleeps: the
tests wait on model requests, Pi events and process exits, each with a timeout.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.child.scripted_model import Gate, ScriptedModel, Text, ToolCall
from actors.session.supervisor import Supervisor
from protocol.calls.render import render_notification
from protocol.ops.tools import parent_tools, to_json
from protocol.records.notifications import (
    AgentMessage,
    AnyNotification,
    Notice,
    StaleWait,
    TaskCompletion,
    WaitCycle,
    WatchdogAlert,
)
from tests.reliability.live import wait_terminated

from .conftest import REPO, EventLog, StartPi

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]

PARENT_EXTENSION = REPO / "actors" / "pi" / "shepherd_parent.ts"
CUSTOM_TYPE = "shepherd.notification"
PI_BUILTINS = {"read", "bash", "edit", "write"}


def worker_script(go: Path) -> dict[str, Any]:
    """Idle until a task arrives, then wait inside its turn for the test's go-ahead (a line
    written to the FIFO ``go``, so the completion lands only once the parent Pi is idle), then
    the explicit done. The turn stays open while it waits: a turn ending with the task open
    would be told to the parent, and start a parent turn of its own."""
    return {
        "steps": [
            {"await": "task"},
            {"say": "worker: counting"},
            {"run": f"read line < {shlex.quote(str(go))}"},
            {"done": {"status": "completed", "summary": "counted 3 files"}},
            {"await": "any"},
        ]
    }


def shepherd_bin() -> str:
    venv = Path(sys.executable).with_name("shepherd")
    found = str(venv) if venv.exists() else shutil.which("shepherd")
    if found is None:
        pytest.fail("the shepherd command is not installed: run the README's test command")
    return found


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    sup = Supervisor(tmp_path / "session", mailbox_root=tmp_path / "mailbox")
    try:
        yield sup
    finally:
        sup.shutdown()


def parent_env(sup: Supervisor) -> dict[str, str]:
    return {"SHEPHERD_SESSION": str(sup.session_dir), "SHEPHERD_BIN": shepherd_bin()}


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def last_user_text(request: dict[str, Any]) -> str:
    last = request["messages"][-1]
    assert last["role"] == "user", last
    return text_of(last)


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m.get("role") == "tool"]


def notifications(sup: Supervisor) -> list[AnyNotification]:
    decoder = msgspec.json.Decoder(AnyNotification)
    path = sup.session_dir / "notifications.jsonl"
    return [decoder.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def custom_deliveries(log: EventLog) -> list[dict[str, Any]]:
    """The extension's messages as Pi put them into the conversation."""
    return [
        e["message"]
        for e in log.events
        if e.get("type") == "message_start"
        and e["message"].get("role") == "custom"
        and e["message"].get("customType") == CUSTOM_TYPE
    ]


def status_says(text: str) -> Any:
    def match(event: dict[str, Any]) -> bool:
        return (
            event.get("type") == "extension_ui_request"
            and event.get("method") == "setStatus"
            and text in str(event.get("statusText"))
        )

    return match


def follower_pids(session_dir: Path) -> list[int]:
    """Live `shepherd notifications --follow` processes following this session."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if (
            b"notifications" in argv
            and b"--follow" in argv
            and f"--session={session_dir}".encode() in argv
            and ") Z " not in stat
        ):
            found.append(int(entry))
    return found


def test_a_completion_starts_exactly_one_parent_turn_and_delivery_ends_with_the_session(
    start_pi: StartPi, model: ScriptedModel, supervisor: Supervisor, tmp_path: Path
) -> None:
    go = tmp_path / "go.fifo"
    os.mkfifo(go)
    script = tmp_path / "worker.json"
    script.write_text(json.dumps(worker_script(go)))
    # The watch call names the task id that the delegate call returned: the gate holds the
    # model's third answer until the test has read that id from the request, as a model would.
    watch_args: dict[str, Any] = {}
    delegated = threading.Event()
    model.add_steps(
        ToolCall("shepherd_spawn", {"name": "worker", "script": str(script)}),
        ToolCall("shepherd_delegate", {"target": "worker", "task": "-count the files"}),
        Gate(delegated, then=ToolCall("shepherd_watch", watch_args), timeout=30),
        Text("Delegated; I will hear when the worker is done."),
        Text("The worker counted 3 files."),
    )
    pi, log = start_pi(extensions=[PARENT_EXTENSION], env=parent_env(supervisor))
    pi.prompt("Have a worker count the files.")

    third = model.wait_for_requests(3, timeout=30)[2]
    receipt = json.loads(tool_messages(third)[-1]["content"])
    watch_args["ids"] = [receipt["task_id"]]
    delegated.set()
    first_end = log.wait_type("agent_end", timeout=30)

    # The parent is idle; its tool calls reached the session and the task is still running.
    assert pi.get_state()["isStreaming"] is False
    requests = model.requests
    assert len(requests) == 4
    results = [json.loads(m["content"]) for m in tool_messages(requests[3])]
    spawned, delegated_result, watched = results
    assert spawned["name"] == "worker"
    assert delegated_result["task_id"] == receipt["task_id"]
    assert watched["pending"] == [receipt["task_id"]] and watched["completed"] == []
    (row,) = msgspec.to_builtins(supervisor.call("status", {}))["agents"]
    assert row["task"]["description"] == "-count the files"  # a leading "-" stays text
    assert row["task"]["state"] == "running"
    assert custom_deliveries(log) == []

    # Exactly the parent tools, with the schemas protocol/ops/tools.py defines, and no child tool.
    tools = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    specs = {spec.name: to_json(spec) for spec in parent_tools()}
    assert set(tools) == PI_BUILTINS | set(specs)
    for name, spec in specs.items():
        assert tools[name]["description"] == spec["description"]
        assert tools[name]["parameters"] == spec["parameters"], name
    assert "shepherd_done" not in tools

    # The worker finishes while the parent is idle: the completion starts its next turn.
    with open(go, "w") as fifo:  # the worker's command reads it: its turn goes on to done
        fifo.write("go\n")
    fifth = model.wait_for_requests(5, timeout=30)[4]
    arrived = time.time()
    second_end = log.wait_for(lambda e: e.get("type") == "agent_end" and e is not first_end, 30)

    (completion,) = [n for n in notifications(supervisor) if isinstance(n, TaskCompletion)]
    assert [r.task_id for r in completion.results] == [receipt["task_id"]]
    expected = render_notification(completion)
    assert expected.startswith("call: shepherd_watch(id=")
    assert "\nreturn:\n" in expected and "\ndetails: " in expected
    assert "counted 3 files" in expected
    assert last_user_text(fifth) == expected
    print(f"completion -> parent turn: {(arrived - completion.created_at) * 1000:.0f} ms")

    (delivery,) = custom_deliveries(log)
    assert delivery["content"] == expected
    assert delivery["details"]["kind"] == "task_completion"
    assert delivery["details"]["notification"]["watcher_id"] == completion.watcher_id
    assert second_end["messages"][-1]["content"][0]["text"] == "The worker counted 3 files."

    # The session ends: the extension stops following (its follower process exits) ...
    (follower,) = follower_pids(supervisor.session_dir)
    supervisor.shutdown()
    assert wait_terminated(follower, 10), "the notifications follower outlived the session"
    log.wait_for(status_says("stopped: the Shepherd session ended"), 10)
    # ... and exactly one turn ever carried the completion.
    assert pi.get_state()["isStreaming"] is False
    requests = model.requests
    assert len(requests) == 5
    turns = [i for i, r in enumerate(requests) if text_of(r["messages"][-1]) == expected]
    assert turns == [4]
    in_history = [m for m in requests[4]["messages"] if text_of(m) == expected]
    assert len(in_history) == 1, "the completion entered the conversation twice"
    assert log.types().count("agent_end") == 2


def test_every_kind_is_one_follow_up_queued_while_busy_and_old_ones_are_not_replayed(
    start_pi: StartPi, model: ScriptedModel, supervisor: Supervisor
) -> None:
    now = time.time()
    supervisor.notifications(Notice(created_at=now, code="old", text="written before Pi started"))
    busy = threading.Event()
    model.add_steps(
        ToolCall("shepherd_close", {"agent": "nobody"}),
        ToolCall("watchdog_list_targets", {}),
        Gate(busy, then=Text("First answer."), timeout=30),
        *(Text(f"Handled notification {i}.") for i in range(1, 6)),
    )
    pi, log = start_pi(extensions=[PARENT_EXTENSION], env=parent_env(supervisor))
    pi.prompt("Close nobody, then list the watchdog targets.")
    third = model.wait_for_requests(3, timeout=30)[2]  # held open: the parent is busy

    # A refusal comes back as the CLI's JSON error (isError); a watchdog tool runs like any other.
    closed, targets = (json.loads(m["content"]) for m in tool_messages(third))
    assert closed["error"]["code"] == "invalid_handle"
    assert "error" not in targets
    # Pi may post its tool_execution_end event after it already sent the model the result
    log.wait_for(
        lambda e: (
            e.get("type") == "tool_execution_end" and e.get("toolName") == "watchdog_list_targets"
        ),
        30,
    )
    results = [e for e in log.runtime() if e.kind == "tool_result"]
    assert [(e.tool, e.is_error) for e in results] == [
        ("shepherd_close", True),
        ("watchdog_list_targets", False),
    ]

    notes: list[AnyNotification] = [
        AgentMessage(
            created_at=now,
            message_id="shepherd-message-1",
            sender_id="shepherd-agent-1",
            sender_name="planner",
            content="Which module first?",
            task_id="shepherd-task-1",
            expects_reply=True,
        ),
        Notice(created_at=now, code="agent_exited", text="scout exited (1)", refs=("scout",)),
        StaleWait(
            created_at=now,
            task_id="shepherd-task-1",
            agent_id="shepherd-agent-2",
            agent_name="scout",
            description="map the code",
            waiting_since=now - 125,
            age_s=125,
            request_id="shepherd-message-2",
            question="which module first?",
            recipient_id="shepherd-agent-1",
            recipient_name="planner",
            recipient_status="busy",
        ),
        WaitCycle(
            created_at=now,
            request_id="shepherd-message-3",
            cycle=("scout", "planner", "scout"),
            agent_ids=("shepherd-agent-2", "shepherd-agent-1"),
        ),
        WatchdogAlert(
            created_at=now,
            agent_id="shepherd-agent-2",
            agent_name="scout",
            task_id="shepherd-task-1",
            confidence="high",
            reasons=("same command 5 times",),
            evidence=({"command": "rg foo"},),
            rescue_message="Stop repeating rg foo.",
            text="[Watchdog Alert] scout repeats `rg foo`",
        ),
    ]
    for note in notes:
        supervisor.notifications(note)
    log.wait_for(status_says("5 queued"), 30)  # all five handed to Pi while it is busy
    assert custom_deliveries(log) == []
    busy.set()
    log.wait_type("agent_end", timeout=30)

    # One run: the answer, then each notification as its own follow-up turn, in order.
    requests = model.requests
    assert len(requests) == 8
    assert log.types().count("agent_end") == 1
    expected = [render_notification(n) for n in notes]
    assert [last_user_text(r) for r in requests[3:]] == expected
    assert [d["content"] for d in custom_deliveries(log)] == expected
    assert [d["details"]["kind"] for d in custom_deliveries(log)] == [
        "agent_message",
        "notice",
        "stale_wait",
        "wait_cycle",
        "watchdog_alert",
    ]
    assert "written before Pi started" not in json.dumps(requests)
    log.wait_for(status_says("shepherd: 5 delivered"), 10)

    # Pi's session shuts down: the extension stops delivering and its follower goes with it.
    (follower,) = follower_pids(supervisor.session_dir)
    pi.close()
    log.wait_for(status_says("stopped: Pi session shut down"), 10)
    assert wait_terminated(follower, 10)
