"""Text rendering: what a person or a model reads.

A task completion is told to the parent as the watch call it answers (``call:``), one line per
result (``return:``) and what is still pending (``details:``): the shape of a tool call and its
result. What a child agent is told (its task context, an incoming message) says in so many
words that a turn ending is not the task ending, so the model does not stop early.

An agent is told the commands it really has (:class:`ChildCommands`): an agent with the child
tools (pi-rpc) is told ``shepherd_message`` / ``shepherd_done``; a command agent, which only
has a shell, is told ``shepherd-child message|done``. Both are told that the parent is
``shepherd``.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from protocol.calls.views import usage_text
from protocol.records.notifications import (
    AgentMessage,
    AnyNotification,
    Notice,
    StaleWait,
    TaskCompletion,
    WaitCycle,
    WatchdogAlert,
)
from protocol.records.tasks import TaskResult
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope, ReplyEnvelope, TaskEnvelope

__all__ = [
    "CHILD_SHELL",
    "CHILD_TOOLS",
    "ChildCommands",
    "render_delivery",
    "render_notification",
    "render_result_line",
    "render_task_context",
    "render_task_ended",
]


class ChildCommands(NamedTuple):
    """How an agent of one kind reaches the parent, in the words it is told."""

    #: the end of a task context: a turn is not the task; how to ask; how to finish
    task_hint: str
    #: under a question: how to answer it (``{id}``: the request, ``{sender}``: the asker)
    reply_hint: str


#: An agent with the child tools (pi-rpc): ``shepherd_message`` / ``shepherd_done``.
CHILD_TOOLS = ChildCommands(
    task_hint=(
        "Do not consider the task complete merely because this turn ends. If you need "
        'information, use shepherd_message (target "shepherd" is the parent that gave you this '
        "task). Call shepherd_done only when the whole delegated task is complete."
    ),
    reply_hint="The sender waits for your answer: reply with shepherd_message reply_to={id}.",
)

#: A command agent: it has only its shell, where ``shepherd-child`` is on the PATH.
CHILD_SHELL = ChildCommands(
    task_hint=(
        "Do not consider the task complete merely because this turn ends. If you need "
        "information, run `shepherd-child message TARGET TEXT` from your shell (TARGET is "
        "another agent's name, or shepherd for the parent that gave you this task). Run "
        "`shepherd-child done --status completed --summary TEXT` only when the whole delegated "
        "task is complete (--status blocked or --status failed if it cannot be)."
    ),
    reply_hint=(
        "The sender waits for your answer: reply with "
        "`shepherd-child message {sender} TEXT --reply-to {id}` from your shell."
    ),
)


def _quoted_ids(ids: tuple[str, ...]) -> str:
    if len(ids) == 1:
        return f'"{ids[0]}"'
    return "[" + ", ".join(f'"{i}"' for i in ids) + "]"


def render_result_line(result: TaskResult) -> str:
    who = result.agent_name or result.agent_id
    head = f"{result.task_id} {result.status} (rc {result.return_code}) by {who}"
    body = result.text if result.text is not None else result.error
    line = f"{head}: {body}" if body else head
    if result.usage is not None:  # budgets: what the task spent
        line += f" [used: {usage_text(msgspec.to_builtins(result.usage)) or 'nothing'}]"
    return line


def render_changes(result: TaskResult) -> list[str]:
    """A worktree agent's task: the files it changed, and where another agent changed them too."""
    c = result.changes
    if c is None:
        return []
    if c.error is not None:
        return [f"{result.task_id} changes on {c.branch}: unknown ({c.error})"]
    since = "since the task started" if c.since == "task" else "since its branch's base"
    more = f" (+{c.count - len(c.files)} more)" if c.count > len(c.files) else ""
    lines = [
        f"{result.task_id} changed {c.count} file(s) on {c.branch} {since}: "
        + ", ".join(c.files)
        + more
    ]
    for o in c.overlaps:
        extra = f" (+{o.count - len(o.files)} more)" if o.count > len(o.files) else ""
        lines.append(f"  overlap with {o.agent} ({o.branch}): {', '.join(o.files)}{extra}")
    if c.overlap_agents:
        lines.append(f"  overlaps with {c.overlap_agents} agents in all")
    return lines


def render_notification(note: AnyNotification) -> str:
    match note:
        case TaskCompletion():
            lines = [f"call: shepherd_watch(id={_quoted_ids(note.ids)})"]
            lines.append("return:")
            lines.extend(f"  {render_result_line(r)}" for r in note.results)
            details = [f"watcher {note.watcher_id}"]
            if note.pending:
                details.append(f"still pending: {', '.join(note.pending)}")
            else:
                details.append("all watched tasks settled")
            for r in note.results:
                if r.error and r.text:
                    details.append(f"{r.task_id} error: {r.error}")
            lines.append("details: " + "; ".join(details))
            lines += [line for r in note.results for line in render_changes(r)]
            return "\n".join(lines)
        case AgentMessage():
            who = note.sender_name or note.sender_id
            lines = [f"[Shepherd message from {who}]", f"Message ID: {note.message_id}"]
            if note.task_id:
                lines.append(f"Task ID: {note.task_id}")
            if note.reply_to:
                lines.append(f"Reply to: {note.reply_to}")
            if note.expects_reply:
                lines.append(f"Expects a reply: answer with reply_to={note.message_id}")
            return "\n".join([*lines, "", note.content])
        case Notice():
            refs = f" ({', '.join(note.refs)})" if note.refs else ""
            return f"[Shepherd notice: {note.code}] {note.text}{refs}"
        case StaleWait():
            minutes, seconds = divmod(int(note.age_s), 60)
            return "\n".join(
                [
                    f"[Shepherd stale wait] {note.agent_name} has waited "
                    f"{minutes:02d}:{seconds:02d} for {note.recipient_name} "
                    f"({note.recipient_status})",
                    f"task: {note.task_id} — {note.description}",
                    f"request: {note.request_id}: {note.question}",
                    "The task is still open; reply, steer the recipient, or cancel the task.",
                ]
            )
        case WatchdogAlert():
            return note.text
        case WaitCycle():
            return (
                f"[Shepherd wait cycle] {' → '.join(note.cycle)}: these agents wait on each "
                f"other's replies (request {note.request_id}); none can go on until one answers."
            )
    raise TypeError(f"unknown notification {note!r}")  # pragma: no cover


def render_task_context(task: TaskEnvelope, commands: ChildCommands = CHILD_TOOLS) -> str:
    return (
        "[Shepherd delegated task, resumed]\n" if task.resumed else "[Shepherd delegated task]\n"
    ) + f"Task ID: {task.task_id}\n\n{task.content}\n\n{commands.task_hint}"


def render_task_ended(task_id: str, reason: str | None) -> str:
    """What an agent is told, with its next input, after the parent ended its task."""
    why = f" ({reason})" if reason else ""
    return (
        f"[Shepherd notice: task ended]\n\nYour task {task_id} was ended by the parent{why}. "
        "Stop working on it; a done for it would be refused."
    )


def render_delivery(
    envelope: MessageEnvelope | ReplyEnvelope | NoticeEnvelope,
    commands: ChildCommands = CHILD_TOOLS,
) -> str:
    """An incoming message as the child agent reads it."""
    if isinstance(envelope, NoticeEnvelope):
        ref = f" ({envelope.ref_id})" if envelope.ref_id else ""
        return f"[Shepherd notice: {envelope.code}]{ref}\n\n{envelope.text}"
    who = envelope.sender_name or envelope.sender_id
    lines = [f"[Shepherd message from {who}]", f"Message ID: {envelope.message_id}"]
    if isinstance(envelope, ReplyEnvelope):
        lines.append(f"Reply to: {envelope.reply_to}")
        if envelope.late:
            lines.append("(This reply arrived after the request was closed.)")
    if envelope.task_id:
        lines.append(f"Task ID: {envelope.task_id}")
    if envelope.thread_id:
        lines.append(f"Thread ID: {envelope.thread_id}")
    if isinstance(envelope, MessageEnvelope) and envelope.expects_reply:
        lines.append(commands.reply_hint.format(id=envelope.message_id, sender=who))
    return "\n".join([*lines, "", envelope.content])
