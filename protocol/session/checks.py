"""Acceptance checks in the session: what happens around a task's ``verifying`` state.

The task decides (:mod:`protocol.session.task`, rule 3); this module runs what the session
does about it. Rules:

1. **A claim being checked is durable and visible.** When a task reports ``Verifying``, its
   record is journaled (a restarted parent runs the check again, once: :func:`restored`), the
   requests it dropped are cancelled, its note says so, and its check is run (``RunCheck``) in
   its agent's directory. The agent's ``done`` is answered at once: accepted, with a note
   saying its claim is being checked.
2. **A check's end is the task's to decide.** ``CheckDone`` is routed to the task's actor as
   ``Checked`` (with the task's usage, for its result); one for an attempt the task no longer
   runs is dropped here already.
3. **A failed attempt is told to both sides.** ``Rejected``: the task's record is journaled
   back to ``running``, the agent gets a ``verification_failed`` notice with the command, its
   outcome and the output's tail (it may fix and say ``done`` again), and the parent a notice
   saying which attempt failed and how many are left.
4. **An ending during a check ends the check** (``StopCheck``, by the settlement).
"""

from __future__ import annotations

from protocol.calls import api
from protocol.core.errors import InvalidArgument
from protocol.records.checks import (
    DEFAULT_VERIFY_ATTEMPTS,
    DEFAULT_VERIFY_TIMEOUT_S,
    Check,
    CheckDone,
    Evidence,
)
from protocol.records.notifications import Notice
from protocol.records.requests import RequestState
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session import outbox, requests
from protocol.session import task as one_task
from protocol.session.effects import (
    AppendNote,
    Effect,
    Journal,
    Notify,
    RunCheck,
    Story,
    TellTask,
)
from protocol.session.state import AgentRow, Ctx, SessionState

__all__ = [
    "check_of",
    "check_options",
    "checked",
    "evidence_text",
    "rejected",
    "restored",
    "run_check",
    "verifying",
]


def run_check(s: SessionState, record: TaskRecord) -> RunCheck:
    """The ``RunCheck`` of the attempt ``record`` is verifying, in its agent's directory."""
    assert record.check is not None, record
    row = s.agents.get(record.agent_id)
    cwd = row.options.get("cwd") if row is not None else None
    return RunCheck(
        task_id=record.task_id,
        agent_id=record.agent_id,
        agent_name=s.name_of(record.agent_id),
        check=record.check,
        attempt=record.attempt,
        cwd=cwd if isinstance(cwd, str) else None,
    )


def _attempts(record: TaskRecord) -> str:
    total = record.check.attempts if record.check is not None else 0
    return f"attempt {record.attempt} of {total}"


def verifying(s: SessionState, report: one_task.Verifying, cx: Ctx) -> list[Effect]:
    """Rule 1 (the agent's answer is its ``then``, run by the caller after these)."""
    before, after = report.before, report.after
    assert after.check is not None, after
    task_id = after.task_id
    effects: list[Effect] = [Journal(record=after)]
    effects += requests.task_moved(s, before, after, cx)
    for request_id in before.pending_requests:
        why = f"task {task_id} verifying"
        effects += requests.close(s, request_id, RequestState.CANCELLED, cx, why=why)
    line = f"done claimed; checking `{after.check.command}` ({_attempts(after)})"
    effects += [AppendNote(task_id=task_id, line=line), run_check(s, after)]
    return effects


def checked(s: SessionState, event: CheckDone, cx: Ctx) -> list[Effect]:
    """Rule 2."""
    record = s.tasks.get(event.task_id)
    evidence = event.evidence
    if (
        record is None
        or record.state is not TaskState.VERIFYING
        or evidence.attempt != record.attempt
    ):
        return []
    usage = s.task_usage.get(record.task_id)
    s.endings[record.task_id] = s.endings.get(record.task_id, 0) + 1  # an ending in flight
    message = one_task.Checked(evidence=evidence, at=cx.now, usage=usage)
    line = f"check {_attempts(record)}: `{evidence.command}` {evidence.outcome()}"
    return [
        AppendNote(task_id=record.task_id, line=line),
        TellTask(task_id=record.task_id, message=message),
    ]


def rejected(s: SessionState, report: one_task.Rejected, cx: Ctx) -> list[Effect]:
    """Rule 3."""
    before, after, evidence = report.before, report.after, report.evidence
    task_id, name = after.task_id, s.name_of(after.agent_id)
    left = (after.check.attempts if after.check is not None else 0) - before.attempt
    said = evidence_text(evidence)
    to_agent = (
        f"Your done for task {task_id} was not accepted: its check `{evidence.command}` "
        f"{evidence.outcome()} ({_attempts(before)}; {left} left). Fix what it shows, then "
        f"call done again.{said}"
    )
    to_parent = (
        f"{name}'s completion of task {task_id} failed its check `{evidence.command}`: "
        f"{evidence.outcome()} ({_attempts(before)}; {left} left); the task runs again and "
        f"{name} was told why.{said}"
    )
    note = Notice(
        created_at=cx.now,
        code="verification_failed",
        text=to_parent,
        agent_id=after.agent_id,
        task_id=task_id,
    )
    effects: list[Effect] = [Journal(record=after)]
    effects += requests.task_moved(s, before, after, cx)
    effects += outbox.notice(s, cx, after.agent_id, "verification_failed", to_agent, task_id)
    effects += [Notify(note=note), Story(text=f"{name}: task {task_id} check failed")]
    return effects


def evidence_text(evidence: Evidence) -> str:
    """The output's tail, indented, for a notice (or what it could not do)."""
    if evidence.output_tail:
        return " Its output ends:" + "".join(f"\n  {line}" for line in evidence.output_tail)
    if evidence.error and evidence.exit_status is None:
        return ""
    return " It printed nothing."


def restored(s: SessionState) -> list[Effect]:
    """After a parent restart: the check of every task left ``verifying`` runs again, once,
    as the same attempt (rule 1)."""
    return [
        run_check(s, record)
        for record in s.tasks.values()
        if record.state is TaskState.VERIFYING and record.check is not None
    ]


def check_options(verify: str | None, node: str | None, who: str) -> None:
    """What refuses a check beyond its bounds (``who``: the operation and field, for the
    error): a command of blanks only, one with a NUL (no shell can take it), and an agent on
    another host (its check runs in its directory, on this host)."""
    if verify is None:
        return
    if not verify.strip():
        raise InvalidArgument(f"{who}: the check command is blank")
    if "\0" in verify:
        raise InvalidArgument(f"{who}: the check command holds a NUL character")
    if node is not None:
        raise InvalidArgument(
            f"{who}: a check runs in the agent's directory on the parent's host; this agent "
            f"runs on node {node!r}"
        )


def check_of(row: AgentRow, args: api.DelegateArgs) -> Check | None:
    """A delegation's check: its own, else its agent's (from ``spawn``), else None."""
    options = row.options
    command = args.verify or options.get("verify")
    if command is None:
        return None
    node = options.get("node")
    check_options(command, node if isinstance(node, str) else None, "delegate: verify")
    attempts = args.verify_attempts or options.get("verify_attempts")
    timeout_s = args.verify_timeout_s or options.get("verify_timeout_s")
    return Check(
        command=command,
        attempts=attempts or DEFAULT_VERIFY_ATTEMPTS,
        timeout_s=timeout_s or DEFAULT_VERIFY_TIMEOUT_S,
    )
