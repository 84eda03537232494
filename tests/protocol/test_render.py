"""protocol.calls.render (and the notification Structs it renders): what people and models read."""

from __future__ import annotations

import msgspec
import pytest

from protocol.calls.render import (
    CHILD_SHELL,
    render_delivery,
    render_notification,
    render_result_line,
    render_task_context,
)
from protocol.records.notifications import AgentMessage, AnyNotification, Notice, TaskCompletion
from protocol.records.tasks import TaskResult
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope, ReplyEnvelope, TaskEnvelope

SESSION = "shepherd-session-5e5510aa"
AGENT = "shepherd-agent-a9e07001"
PEER = "shepherd-agent-a9e07002"
T1 = "shepherd-task-00000001"
T2 = "shepherd-task-00000002"
T3 = "shepherd-task-00000003"
WATCHER = "shepherd-watcher-0000beef"
MSG = "shepherd-message-00000001"
REQ = "shepherd-message-00000002"


def result(
    task_id: str,
    status: str = "completed",
    rc: int = 0,
    *,
    text: str | None = "all good",
    error: str | None = None,
    agent_name: str | None = "scout",
) -> TaskResult:
    return TaskResult(
        task_id=task_id,
        agent_id=AGENT,
        status=status,  # type: ignore[arg-type]
        ok=status == "completed",
        return_code=rc,
        completed_at=5.0,
        text=text,
        error=error,
        agent_name=agent_name,
    )


# ----------------------------------------------------------------------------- task completion


@pytest.mark.parametrize(
    ("status", "rc"),
    [("completed", 0), ("failed", 1), ("blocked", 2), ("timed_out", 124), ("cancelled", 130)],
)
def test_single_completion_has_call_return_and_details_lines(status: str, rc: int) -> None:
    note = TaskCompletion(
        created_at=1.0, watcher_id=WATCHER, ids=(T1,), results=(result(T1, status, rc),)
    )
    lines = render_notification(note).splitlines()
    assert lines[0] == f'call: shepherd_watch(id="{T1}")'
    assert lines[1] == "return:"
    assert lines[2] == f"  {T1} {status} (rc {rc}) by scout: all good"
    assert lines[3].startswith("details: ")
    assert WATCHER in lines[3]
    assert "all watched tasks settled" in lines[3]
    assert len(lines) == 4


def test_several_ids_render_as_a_list_in_the_watchers_order() -> None:
    note = TaskCompletion(
        created_at=1.0,
        watcher_id=WATCHER,
        ids=(T3, T1, T2),
        results=(result(T3), result(T1, "failed", 1, text=None, error="boom")),
        pending=(T2,),
    )
    text = render_notification(note)
    lines = text.splitlines()
    assert lines[0] == f'call: shepherd_watch(id=["{T3}", "{T1}", "{T2}"])'
    assert lines[1] == "return:"
    assert lines[2] == f"  {T3} completed (rc 0) by scout: all good"
    assert lines[3] == f"  {T1} failed (rc 1) by scout: boom"
    assert lines[4].startswith("details: ")
    assert f"still pending: {T2}" in lines[4]
    assert "all watched tasks settled" not in text


def test_results_keep_the_order_they_are_given_in() -> None:
    forward = TaskCompletion(
        created_at=1.0, watcher_id=WATCHER, ids=(T1, T2), results=(result(T1), result(T2))
    )
    backward = msgspec.structs.replace(forward, ids=(T2, T1), results=(result(T2), result(T1)))
    body = render_notification(forward).split("return:")[1]
    assert body.index(T1) < body.index(T2)
    body = render_notification(backward).split("return:")[1]
    assert body.index(T2) < body.index(T1)


def test_error_next_to_text_goes_to_details() -> None:
    note = TaskCompletion(
        created_at=1.0,
        watcher_id=WATCHER,
        ids=(T1,),
        results=(result(T1, "blocked", 2, text="need creds", error="403"),),
    )
    text = render_notification(note)
    assert f"{T1} blocked (rc 2) by scout: need creds" in text
    assert f"{T1} error: 403" in text.splitlines()[-1]


def test_result_line_falls_back_to_agent_id_and_no_body() -> None:
    line = render_result_line(result(T1, "cancelled", 130, text=None, agent_name=None))
    assert line == f"{T1} cancelled (rc 130) by {AGENT}"


def test_result_line_prefers_text_over_error() -> None:
    line = render_result_line(result(T1, "failed", 1, text="summary", error="trace"))
    assert line.endswith(": summary")


# ----------------------------------------------------------------------------- other notifications


def test_agent_message_renders_sender_ids_and_content() -> None:
    note = AgentMessage(
        created_at=1.0,
        message_id=MSG,
        sender_id=AGENT,
        sender_name="scout",
        content="found it in src/app.py",
        task_id=T1,
        reply_to=REQ,
        expects_reply=True,
    )
    text = render_notification(note)
    assert text.splitlines()[0] == "[Shepherd message from scout]"
    assert f"Message ID: {MSG}" in text
    assert f"Task ID: {T1}" in text
    assert f"Reply to: {REQ}" in text
    assert f"reply_to={MSG}" in text
    assert text.endswith("\n\nfound it in src/app.py")


def test_agent_message_without_extras() -> None:
    note = AgentMessage(created_at=1.0, message_id=MSG, sender_id=AGENT, content="hi")
    text = render_notification(note)
    assert text == f"[Shepherd message from {AGENT}]\nMessage ID: {MSG}\n\nhi"


def test_notice_renders_code_text_and_refs() -> None:
    note = Notice(
        created_at=1.0,
        code="request_cycle",
        text="scout and planner wait on each other",
        refs=(MSG, REQ),
    )
    assert render_notification(note) == (
        f"[Shepherd notice: request_cycle] scout and planner wait on each other ({MSG}, {REQ})"
    )
    plain = Notice(created_at=1.0, code="agent_exited", text="scout exited")
    assert render_notification(plain) == "[Shepherd notice: agent_exited] scout exited"


@pytest.mark.parametrize(
    "note",
    [
        TaskCompletion(created_at=1.0, watcher_id=WATCHER, ids=(T1,), results=(result(T1),)),
        AgentMessage(created_at=1.0, message_id=MSG, sender_id=AGENT, content="x"),
        Notice(created_at=1.0, code="c", text="t", refs=(T1,)),
    ],
)
def test_notifications_round_trip_tagged(note: AnyNotification) -> None:
    data = msgspec.json.encode(note)
    assert msgspec.json.decode(data)["kind"] in {"task_completion", "agent_message", "notice"}
    assert msgspec.json.decode(data, type=AnyNotification) == note


# ----------------------------------------------------------------------------- what a child reads


def _common(sender: str = "shepherd", target: str = AGENT) -> dict[str, object]:
    return {
        "message_id": MSG,
        "session_id": SESSION,
        "sender_id": sender,
        "target_id": target,
        "created_at": 1.0,
    }


def test_task_context() -> None:
    task = TaskEnvelope(**_common(), task_id=T1, content="Fix the flaky test in tests/x.py")  # type: ignore[arg-type]
    text = render_task_context(task)
    assert T1 in text
    assert "Fix the flaky test in tests/x.py" in text
    assert "Do not consider the task complete merely because this turn ends" in text
    assert "Call shepherd_done only when the whole delegated task is complete" in text
    assert "shepherd_message" in text


def test_delivery_of_a_message_expecting_a_reply() -> None:
    env = MessageEnvelope(
        **_common(sender=PEER),  # type: ignore[arg-type]
        content="which file?",
        task_id=T2,
        thread_id="th-1",
        expects_reply=True,
        sender_name="planner",
    )
    text = render_delivery(env)
    lines = text.splitlines()
    assert lines[0] == "[Shepherd message from planner]"
    assert f"Message ID: {MSG}" in lines
    assert f"Task ID: {T2}" in lines
    assert "Thread ID: th-1" in lines
    assert any("reply_to=" + MSG in line and "shepherd_message" in line for line in lines)
    assert text.endswith("\n\nwhich file?")


def test_delivery_of_a_plain_message_has_no_reply_hint() -> None:
    env = MessageEnvelope(**_common(sender=PEER), content="fyi")  # type: ignore[arg-type]
    text = render_delivery(env)
    assert "reply_to" not in text
    assert text == f"[Shepherd message from {PEER}]\nMessage ID: {MSG}\n\nfyi"


@pytest.mark.parametrize("late", [False, True])
def test_delivery_of_a_reply(late: bool) -> None:
    env = ReplyEnvelope(
        **_common(sender=PEER),  # type: ignore[arg-type]
        content="src/app.py",
        reply_to=REQ,
        sender_name="planner",
        late=late,
    )
    text = render_delivery(env)
    assert f"Reply to: {REQ}" in text
    assert ("after the request was closed" in text) is late
    assert "The sender waits" not in text
    assert text.endswith("\n\nsrc/app.py")


def test_delivery_of_a_notice() -> None:
    env = NoticeEnvelope(
        **_common(),  # type: ignore[arg-type]
        code="request_timed_out",
        text="planner did not answer in time",
        ref_id=REQ,
    )
    assert render_delivery(env) == (
        f"[Shepherd notice: request_timed_out] ({REQ})\n\nplanner did not answer in time"
    )
    plain = msgspec.structs.replace(env, ref_id=None)
    assert render_delivery(plain) == (
        "[Shepherd notice: request_timed_out]\n\nplanner did not answer in time"
    )


def test_a_command_agent_is_told_its_shell_commands_and_that_the_parent_is_shepherd() -> None:
    task = TaskEnvelope(**_common(), task_id=T1, content="Fix it")  # type: ignore[arg-type]
    text = render_task_context(task, CHILD_SHELL)
    assert "shepherd-child message TARGET TEXT" in text and "shepherd-child done" in text
    assert "shepherd for the parent" in text
    assert "shepherd_message" not in text and "shepherd_done" not in text
    asked = MessageEnvelope(
        **_common(sender=PEER),  # type: ignore[arg-type]
        content="which file?",
        expects_reply=True,
        sender_name="planner",
    )
    hint = render_delivery(asked, CHILD_SHELL).splitlines()[-3]
    assert hint.endswith(f"`shepherd-child message planner TEXT --reply-to {MSG}` from your shell.")
    # an agent with the child tools is told the tools, and who the parent is
    tools_text = render_task_context(task)
    assert "shepherd_message" in tools_text and '"shepherd" is the parent' in tools_text
