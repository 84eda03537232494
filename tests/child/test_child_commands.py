"""``shepherd-child message|done`` against the fake parent: receipts, refusals, timeouts,
the environment, and both option spellings."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import msgspec
import pytest

from actors.runtime.transport import PARENT_INBOX
from protocol.core.errors import ErrorInfo
from protocol.core.ids import IdKind
from protocol.records.settings import Settings
from protocol.wire.envelopes import (
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)

from .conftest import FakeParent, new_id, task_result

pytestmark = pytest.mark.processes


def test_message_prints_the_receipt_and_removes_its_inbox(parent: FakeParent) -> None:
    run = parent.run_child("message", "planner", "what next?", "--expects-reply", "--json")
    assert run.returncode == 0, run.stderr
    receipt = json.loads(run.stdout)
    message_id = receipt["message_id"]
    assert receipt == {"message_id": message_id, "accepted": True, "request_id": message_id}
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope))
    assert isinstance(sent, MessageEnvelope)
    assert (sent.message_id, sent.reply_inbox, sent.sender_id) == (
        message_id,
        message_id,
        parent.agent_id,
    )
    assert (sent.target_id, sent.content, sent.expects_reply, sent.delivery) == (
        "planner",
        "what next?",
        True,
        "follow_up",
    )
    assert not parent.mailbox.has_inbox(message_id)


def test_the_pi_extension_form_with_equals_and_double_dash(parent: FakeParent) -> None:
    request = new_id(IdKind.MESSAGE)
    run = parent.run_child(
        "message",
        "--json",
        f"--reply-to={request}",
        "--thread=t-1",
        "--steer",
        "--",
        "shepherd",
        "-starts with a dash",
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["accepted"] is True
    _, sent = parent.wait_for(lambda e: isinstance(e, ReplyEnvelope))
    assert isinstance(sent, ReplyEnvelope)
    assert (sent.reply_to, sent.thread_id, sent.delivery, sent.target_id, sent.content) == (
        request,
        "t-1",
        "steer",
        "shepherd",
        "-starts with a dash",
    )


def test_done_prints_task_and_result(parent: FakeParent) -> None:
    parent.task_id = new_id(IdKind.TASK)
    parent.answer = lambda env: (True, None, None, task_result(parent))
    run = parent.run_child("done", "--json", "--status=completed", "--summary=all good")
    assert run.returncode == 0, run.stderr
    receipt = json.loads(run.stdout)
    assert receipt["accepted"] is True
    assert receipt["task_id"] == parent.task_id
    assert receipt["result"]["status"] == "completed"
    assert receipt["result"]["return_code"] == 0
    _, sent = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(sent, TaskDoneEnvelope)
    assert (sent.task_id, sent.status, sent.summary, sent.cancel_requests) == (
        None,
        "completed",
        "all good",
        False,
    )


def test_done_in_text_mode(parent: FakeParent) -> None:
    parent.task_id = new_id(IdKind.TASK)
    run = parent.run_child(
        "done", "--status", "blocked", "--summary", "need keys", "--cancel-requests"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("accepted done shepherd-message-")
    assert parent.task_id in run.stdout
    _, sent = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(sent, TaskDoneEnvelope)
    assert (sent.status, sent.cancel_requests) == ("blocked", True)


def test_a_refusal_exits_2_with_the_error(parent: FakeParent) -> None:
    parent.answer = lambda env: (
        False,
        ErrorInfo(code="unresolved_requests", message="1 request still open"),
        None,
        None,
    )
    run = parent.run_child("done", "--json", "--status=completed")
    assert run.returncode == 2
    assert json.loads(run.stdout) == {
        "error": {"code": "unresolved_requests", "message": "1 request still open"}
    }
    text = parent.run_child("done", "--status=completed")
    assert text.returncode == 2
    assert text.stdout == ""
    assert "1 request still open (unresolved_requests)" in text.stderr


def test_no_receipt_in_time_is_session_unavailable(parent: FakeParent) -> None:
    parent.answer = lambda env: None
    run = parent.run_child(
        "message",
        "--json",
        "--",
        "planner",
        "hello",
        env=parent.environ(SHEPHERD_CHILD_TIMEOUT_S="0.3"),
    )
    assert run.returncode == 2
    error = json.loads(run.stdout)["error"]
    assert error["code"] == "session_unavailable"
    assert "0.3 s" in error["message"]


@pytest.mark.parametrize(
    "missing", ["SHEPHERD_CAPABILITY", "SHEPHERD_MAILBOX", "SHEPHERD_AGENT_ID"]
)
def test_a_missing_variable_is_named(parent: FakeParent, missing: str) -> None:
    env = parent.environ(**{missing: None})
    run = parent.run_child("message", "--json", "--", "planner", "hi", env=env)
    assert run.returncode == 2
    error = json.loads(run.stdout)["error"]
    assert missing in error["message"]
    assert error["code"] == "session_unavailable"
    text = parent.run_child("done", "--status=failed", env=env)
    assert text.returncode == 2
    assert missing in text.stderr


def test_bad_arguments_and_parent_commands_are_refused(parent: FakeParent) -> None:
    run = parent.run_child("done", "--json", "--status=finished")
    assert run.returncode == 2
    assert json.loads(run.stdout)["error"]["code"] == "invalid_argument"
    spawn = parent.run_child("spawn", "helper")  # a child never gets a parent command
    assert spawn.returncode == 2
    assert "invalid choice" in spawn.stderr
    reply_to_nonsense = parent.run_child(
        "message", "--json", f"--reply-to={new_id(IdKind.MESSAGE)}", "--", "Not A Name!", "x"
    )
    assert reply_to_nonsense.returncode == 2
    assert "TARGET" in json.loads(reply_to_nonsense.stdout)["error"]["message"]
    assert parent.snapshot() == []  # nothing was published for any of them


def test_a_full_parent_inbox_is_waited_out_not_refused(parent: FakeParent) -> None:
    limit = 3
    parent.gate = threading.Event()  # the parent handles nothing until the gate opens
    for _ in range(limit):  # the agent's own earlier events fill the inbox to the limit
        parent.mailbox.publish(
            PARENT_INBOX,
            RuntimeEnvelope(
                **parent.base(sender_id=parent.agent_id, capability=parent.capability),
                event="output",
                text="earlier",
            ),
        )
    settings = msgspec.json.encode(Settings(max_queue_depth=limit)).decode()
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors.child.cli", "message", "shepherd", "after", "--json"],
        cwd=parent.tmp_path,
        env=parent.environ(SHEPHERD_SETTINGS=settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "parent inbox is full; retrying" in proc.stderr.readline()
        parent.gate.set()
        out, _ = proc.communicate(timeout=60)
    finally:
        parent.gate.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert json.loads(out)["accepted"] is True
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope))
    assert isinstance(sent, MessageEnvelope) and sent.content == "after"
