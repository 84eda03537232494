"""The bridge with the scripted adapter, against a fake parent on a real mailbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import msgspec
import pytest

from actors.child.inbox_reports import REFUSALS_REPORTED
from actors.runtime.procs import session_members
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import ErrorInfo
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.settings import Settings
from protocol.wire.envelopes import (
    ControlEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)
from tests.reliability.live import wait_for_files

from .conftest import WAIT_S, FakeParent, new_id

pytestmark = pytest.mark.processes


def close(parent: FakeParent) -> ControlEnvelope:
    return ControlEnvelope(**parent.base(), action="close", reason="test over")


def test_ready_task_tool_call_request_reply_and_done(parent: FakeParent) -> None:
    script = parent.write_script(
        [
            {"await": "task"},
            {"say": "got {last}"},
            {"run": "echo hi"},
            {"message": {"to": "planner", "text": "what next?", "expects_reply": True}},
            {"await": "reply"},
            {"say": "answer: {last}"},
            {"done": {"status": "completed", "summary": "finished with {last}"}},
            {"await": "any"},
        ]
    )
    bridge = parent.start_bridge("scripted", {"script": script})
    _, ready = parent.wait_event("ready")
    assert ready.pid == bridge.pid
    assert parent.snapshot()[0] is ready  # ready is the first thing the bridge says

    task = parent.delegate("build it")
    i, _ = parent.wait_event("turn_start")
    i, out = parent.wait_event("output", after=i)
    assert out.text == "got build it"
    i, call = parent.wait_event("tool_call", after=i)
    assert (call.tool, call.command) == ("bash", "echo hi")
    i, result = parent.wait_event("tool_result", after=i)
    assert (result.command, result.output, result.exit_code, result.is_error) == (
        "echo hi",
        "hi\n",
        0,
        False,
    )
    i, question = parent.wait_for(lambda e: isinstance(e, MessageEnvelope), after=i)
    assert isinstance(question, MessageEnvelope)
    assert (question.target_id, question.content, question.expects_reply) == (
        "planner",
        "what next?",
        True,
    )
    assert question.task_id == task.task_id
    assert question.sender_id == parent.agent_id
    i, _ = parent.wait_event("turn_end", after=i)  # idle while it waits: not done
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())

    # the peer's answer, forwarded by the parent: the peer stays the sender
    parent.send(
        ReplyEnvelope(
            **parent.base(sender_id=parent.peer_id),
            content="ship it",
            reply_to=question.message_id,
            task_id=task.task_id,
            sender_name="planner",
        )
    )
    i, _ = parent.wait_event("turn_start", after=i)
    i, out = parent.wait_event("output", after=i)
    assert out.text == "answer: ship it"
    i, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=i)
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.task_id, done.status, done.summary) == (
        task.task_id,
        "completed",
        "finished with ship it",
    )
    i, _ = parent.wait_event("turn_end", after=i)

    parent.send(close(parent))
    parent.wait_event("exit", after=i, exit_code=0)
    assert bridge.wait() == 0
    dones = [e for e in parent.snapshot() if isinstance(e, TaskDoneEnvelope)]
    assert len(dones) == 1
    readies = [
        e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.event == "ready"
    ]
    assert len(readies) == 1


def test_a_refused_receipt_reaches_the_agent(parent: FakeParent) -> None:
    parent.answer = lambda env: (
        False,
        ErrorInfo(code="invalid_handle", message="no agent"),
        None,
        None,
    )
    script = parent.write_script(
        [{"await": "task"}, {"message": {"to": "nobody", "text": "hello?"}}, {"await": "any"}]
    )
    parent.start_bridge("scripted", {"script": script})
    parent.delegate("say hello")
    i, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope))
    assert sent.reply_inbox is None  # the bridge's own envelopes are acked into its inbox
    _, out = parent.wait_event(
        "output", after=i, text=lambda t: t is not None and t.startswith("[shepherd] refused")
    )
    assert sent.message_id in (out.text or "")
    assert "invalid_handle" in (out.text or "")


def test_a_turn_without_done_ends_the_turn_and_settles_nothing(parent: FakeParent) -> None:
    script = parent.write_script([{"await": "task"}, {"say": "hi"}, {"await": "message"}])
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.wait_event("ready")
    parent.delegate("just look around")
    i, _ = parent.wait_event("turn_start")
    i, _ = parent.wait_event("output", after=i, text="hi")
    i, _ = parent.wait_event("turn_end", after=i)
    parent.send(close(parent))
    parent.wait_event("exit", after=i)
    assert bridge.wait() == 0
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())


def test_an_exit_step_exits_the_bridge_with_its_code(parent: FakeParent) -> None:
    script = parent.write_script([{"await": "task"}, {"say": "bye"}, {"exit": 3}])
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.delegate("crash please")
    assert bridge.wait() == 3
    _, exit_event = parent.wait_event("exit")
    assert exit_event.exit_code == 3
    exits = [e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.event == "exit"]
    assert len(exits) == 1
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())


def test_close_says_exit_and_leaves_no_process_in_its_group(parent: FakeParent) -> None:
    # the command reports in (a real shepherd-child call from the agent's shell), then blocks
    script = parent.write_script(
        [
            {"await": "task"},
            {"run": "shepherd-child message --json -- shepherd started && sleep 30 && echo never"},
            {"await": "any"},
        ]
    )
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.delegate("block")
    i, started = parent.wait_for(
        lambda e: isinstance(e, MessageEnvelope) and e.content == "started"
    )
    assert started.reply_inbox == started.message_id
    parent.send(close(parent))
    _, last = parent.wait_event("exit", after=i)
    assert last.exit_code == 0
    assert bridge.wait() == 0
    assert session_members(bridge.pid) == []  # the sleep, bash and all: gone
    # a command killed by close reports no result afterwards
    assert not any(
        isinstance(e, RuntimeEnvelope) and e.event == "tool_result" for e in parent.snapshot()
    )


def test_the_bridge_exits_when_its_parent_dies(parent: FakeParent) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    ) as helper:
        try:
            script = parent.write_script([{"await": "task"}])
            bridge = parent.start_bridge(
                "scripted",
                {"script": script},
                SHEPHERD_PARENT_PID=str(helper.pid),
                SHEPHERD_RECONNECT_S="0.3",  # no parent comes back within the window
            )
            parent.wait_event("ready")
            helper.kill()
            helper.wait(timeout=WAIT_S)
            assert bridge.wait() == 0
        finally:
            helper.kill()
            assert helper.stdin is not None
            helper.stdin.close()
    _, last = parent.wait_event("exit")
    assert "parent" in (last.text or "")


def test_an_orphaned_bridge_reconnects_to_a_restarted_parent(parent: FakeParent) -> None:
    """The parent dies; a new one rewrites session.json with its pid within the window: the
    bridge says ready again and keeps serving its agent."""
    first = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    second = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        script = parent.write_script([{"await": "task"}, {"say": "on it"}, {"await": "any"}])
        bridge = parent.start_bridge(
            "scripted", {"script": script}, SHEPHERD_PARENT_PID=str(first.pid)
        )
        first_ready, _ = parent.wait_event("ready")
        first.kill()
        first.wait(timeout=WAIT_S)
        (parent.session_dir / "session.json").write_text(json.dumps({"parent_pid": second.pid}))
        again, _ = parent.wait_event("ready", after=first_ready + 1)
        parent.delegate("after the restart")
        parent.wait_event("output", after=again + 1)
        assert bridge.proc.poll() is None  # still serving
        second.kill()
        second.wait(timeout=WAIT_S)
    finally:
        for helper in (first, second):
            helper.kill()
            helper.wait(timeout=WAIT_S)
            assert helper.stdin is not None
            helper.stdin.close()


def test_sigterm_stops_the_bridge_with_128_plus_15(parent: FakeParent) -> None:
    script = parent.write_script([{"await": "task"}])
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.wait_event("ready")
    bridge.proc.terminate()
    assert bridge.wait() == 143
    _, last = parent.wait_event("exit")
    assert last.exit_code == 143


def test_a_bad_script_is_an_error_event_and_exit_2(parent: FakeParent) -> None:
    script = parent.write_script([{"await": "task"}, {"fly": "away"}])
    bridge = parent.start_bridge("scripted", {"script": script})
    assert bridge.wait() == 2
    _, error = parent.wait_event("error")
    assert "unknown step kind 'fly'" in (error.text or "")
    assert not any(isinstance(e, RuntimeEnvelope) and e.event == "ready" for e in parent.snapshot())


def test_a_toml_script(parent: FakeParent) -> None:
    path = parent.tmp_path / "script.toml"
    path.write_text('[[steps]]\nawait = "task"\n\n[[steps]]\nsay = "toml {last}"\n')
    bridge = parent.start_bridge("scripted", {"script": str(path)})
    parent.delegate("works")
    parent.wait_event("output", text="toml works")
    parent.send(close(parent))
    assert bridge.wait() == 0


def test_forged_envelopes_are_quarantined_and_never_reach_the_agent(
    parent: FakeParent,
) -> None:
    script = parent.write_script([{"await": "task"}, {"say": "task: {last}"}, {"await": "any"}])
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.wait_event("ready")
    forged_task_id = new_id(IdKind.TASK)
    # wrong capability
    parent.send(
        TaskEnvelope(**parent.base(capability="00" * 16), task_id=forged_task_id, content="A")
    )
    # wrong sender: a peer may not hand out tasks, even with the right capability
    parent.send(
        TaskEnvelope(**parent.base(sender_id=parent.peer_id), task_id=forged_task_id, content="B")
    )
    # wrong target
    parent.send(
        TaskEnvelope(**parent.base(target_id=parent.peer_id), task_id=forged_task_id, content="C")
    )
    # wrong kind: a child never receives runtime events
    parent.send(RuntimeEnvelope(**parent.base(), event="output", text="D"))
    # wrong session, written into the same directory by another session's mailbox
    foreign_session = new_id(IdKind.SESSION)
    with Mailbox.create(parent.root, foreign_session, Settings()) as foreign:
        foreign.publish(
            parent.agent_id,
            TaskEnvelope(
                **parent.base(session_id=foreign_session), task_id=forged_task_id, content="E"
            ),
        )
    parent.delegate("the real one")
    _, out = parent.wait_event("output")
    assert out.text == "task: the real one"
    quarantine = parent.root / "quarantine"
    reasons = [
        json.loads((quarantine / name).read_text())
        for name in sorted(os.listdir(quarantine))
        if name.endswith(".reason")
    ]
    assert len(reasons) == 5, reasons
    assert {r["code"] for r in reasons} <= {"forbidden_sender", "invalid_envelope"}
    joined = " ".join(r["message"] for r in reasons)
    assert "capability" in joined
    assert PARENT_ID in joined
    assert "addressed to" in joined
    assert "session" in joined
    # each refusal is reported to the parent, never silent
    texts: list[str] = []
    index = -1
    for _ in range(5):
        index, event = parent.wait_for(
            lambda e: isinstance(e, RuntimeEnvelope) and e.event == "error", after=index + 1
        )
        assert isinstance(event, RuntimeEnvelope) and event.text
        texts.append(event.text)
    assert all("(quarantined): " in t for t in texts), texts
    assert all(("forbidden_sender" in t) != ("invalid_envelope" in t) for t in texts), texts
    parent.send(close(parent))
    assert bridge.wait() == 0
    outputs = [e.text for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.text]
    assert not any(t in ("task: A", "task: B", "task: C", "task: E", "D") for t in outputs)


def test_a_group_sigterm_never_lets_the_script_reach_done(parent: FakeParent) -> None:
    # the parent's stop() signals the whole group: the running command dies too, and its
    # completion must not advance the script to its done step
    script = parent.write_script(
        [
            {"await": "task"},
            {"run": "shepherd-child message -- shepherd started && sleep 30"},
            {"done": {"status": "completed", "summary": "should never be sent"}},
        ]
    )
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.delegate("work")
    parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.content == "started")
    os.killpg(bridge.pid, signal.SIGTERM)
    assert bridge.wait() == 143
    parent.wait_event("exit", exit_code=143)
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())
    assert session_members(bridge.pid) == []


def test_a_full_parent_inbox_delays_what_the_bridge_publishes_but_loses_nothing(
    parent: FakeParent,
) -> None:
    limit = 3
    marker = parent.tmp_path / "all-steps-ran"
    steps: list[dict[str, object]] = [{"await": "task"}]
    steps += [{"say": f"line {i}"} for i in range(10)]
    steps += [
        {"done": {"status": "completed", "summary": "all said"}},
        {"run": f"touch {marker}"},
        {"await": "any"},
    ]
    script = parent.write_script(steps)
    parent.gate = threading.Event()  # the parent reads nothing until the gate opens
    settings = msgspec.json.encode(Settings(max_queue_depth=limit)).decode()
    bridge = parent.start_bridge("scripted", {"script": script}, SHEPHERD_SETTINGS=settings)
    parent.delegate("talk")
    # every step ran (the marker comes after the done) while the parent inbox stayed full
    assert wait_for_files(parent.tmp_path, marker.exists, WAIT_S), bridge.log()
    waiting = len(os.listdir(parent.mailbox.inbox_path("parent") / "new"))
    assert waiting <= limit + 1, waiting  # the limit held (+1: the one being handled)
    parent.gate.set()
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope) and done.summary == "all said"
    said = [
        e.text
        for e in parent.snapshot()
        if isinstance(e, RuntimeEnvelope) and e.event == "output" and e.text
    ]
    assert said[:10] == [f"line {i}" for i in range(10)], said  # all of it, in order
    parent.send(close(parent))
    assert bridge.wait() == 0


def test_refusals_reported_to_the_parent_are_capped(parent: FakeParent) -> None:
    script = parent.write_script([{"await": "task"}, {"say": "task: {last}"}, {"await": "any"}])
    box = parent.mailbox.inbox_path(parent.agent_id)
    for i in range(REFUSALS_REPORTED + 5):  # garbage planted before the bridge reads its inbox
        staging = box / "tmp" / f"plant-{i}"
        staging.write_bytes(b"not an envelope")
        os.rename(staging, box / "new" / f"{i + 1:020d}.1.1.{new_id(IdKind.MESSAGE)}.json")
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.delegate("after the garbage")  # named after every planted file: read after them
    _, out = parent.wait_event("output")
    assert out.text == "task: after the garbage"
    errors = [
        e.text or ""
        for e in parent.snapshot()
        if isinstance(e, RuntimeEnvelope) and e.event == "error"
    ]
    assert len(errors) == REFUSALS_REPORTED
    assert "further refusals are only in the bridge's log" in errors[-1]
    assert len(os.listdir(parent.root / "quarantine")) == 2 * (REFUSALS_REPORTED + 5)
    parent.send(close(parent))
    assert bridge.wait() == 0


def test_cancel_task_stops_the_running_command_and_the_script_takes_the_next_task(
    parent: FakeParent,
) -> None:
    from tests.reliability.live import wait_gone

    release = parent.tmp_path / "release"
    script = parent.write_script(
        [
            {"await": "task"},
            {"say": "took {last}"},
            # blocks until the test creates `release` (then it returns at once)
            {"run": "test -e release || (shepherd-child message -- shepherd started; sleep 30)"},
            {"done": {"status": "completed", "summary": "finished {last}"}},
            {"await": "any"},
        ]
    )
    bridge = parent.start_bridge("scripted", {"script": script})
    parent.wait_event("ready")
    first = parent.delegate("first")
    i, _ = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.content == "started")
    command = [p for p in session_members(bridge.pid) if p != bridge.pid]
    assert command, "the run step's processes are not in the bridge's session"
    parent.send(
        ControlEnvelope(
            **parent.base(), action="cancel_task", task_id=first.task_id, reason="not needed"
        )
    )
    i, note = parent.wait_event("output", after=i, text=lambda t: t and "cancel_task" in t)
    assert "not needed" in (note.text or "")
    i, _ = parent.wait_event("turn_end", after=i)
    # the command and everything it started are stopped, without waiting for their 30 s
    assert wait_gone(lambda: [p for p in command if p in session_members(bridge.pid)], 10.0)
    release.touch()
    second = parent.delegate("second")
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope), after=i)
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.task_id, done.summary) == (second.task_id, "finished second")
    results = [e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    # the stopped command's result never reached the script (it would have advanced it)
    assert [e.command for e in results if e.event == "tool_result"] == [
        "test -e release || (shepherd-child message -- shepherd started; sleep 30)"
    ]
    dones = [e for e in parent.snapshot() if isinstance(e, TaskDoneEnvelope)]
    assert [d.task_id for d in dones] == [second.task_id]
    parent.send(close(parent))
    assert bridge.wait() == 0
