"""Approval requests: a child asks the parent for permission; the parent approves or denies.

Rules:

1. **Opening.** A ``message`` envelope with ``approval`` (``shepherd-child approve-request``,
   the Pi tool ``shepherd_request_approval``, a gated Pi tool call) opens a request of kind
   ``approval`` from the sending agent to the parent, through the same rule as a question
   (:func:`protocol.session.requests.open_`): journaled, its deadline armed (its
   ``reply_timeout_s``, else ``default_reply_timeout_s``), its task (the agent's active task)
   ``waiting``, counted in the wait-for graph and the stale-wait monitor. It is addressed to
   the parent only, and its sender must not be closed. The same envelope seen again (a
   redelivery after a parent restart) opens nothing twice.
2. **The parent is told at once**: a notice ``approval_requested`` naming the request, the
   agent, the task and the text, and how to answer.
3. **Answered once.** ``approve REQ [--note]`` / ``deny REQ --reason`` close it ``replied``
   (:mod:`protocol.session.decisions` records the outcome and tells the blocked call). An
   unknown id is ``invalid_handle``; a question is ``invalid_argument`` (it is answered with
   a reply); one already closed is ``invalid_transition`` saying how it ended. A reply
   (``message --reply-to``) never answers an approval. The decision must fit one envelope
   (``limit_exceeded`` before anything changes).
4. **Ending unanswered is a denial**: its deadline (``timeout``), its task settling (cancel,
   fail, time-out, the agent's own ``done`` with ``cancel_requests``), its agent closing or
   exiting. The blocked call returns denied with that reason.
5. **Gated tool calls.** ``spawn --approve TOOL:GLOB`` (repeatable; bounds in
   :mod:`protocol.core.limits`) is kept in the agent's options, which its bridge and the Pi
   extension read: each matching Pi tool call is turned into an approval request (rule 1)
   before it runs, and runs only if approved (else the model gets the denial as the tool's
   result). An ``acp`` agent's permission requests are matched against the rules
   (:mod:`protocol.calls.gates`): one that matches goes to the parent, any other is allowed
   at once. Only these two adapters take rules.
"""

from __future__ import annotations

import msgspec

from protocol.calls import api
from protocol.calls.approvals import ApprovalResult, ApproveArgs, DenyArgs, outcome
from protocol.core.errors import InvalidArgument, InvalidHandle, InvalidTransition
from protocol.core.ids import PARENT_ID
from protocol.records.notifications import Notice
from protocol.records.requests import RequestRecord, RequestState
from protocol.session import decisions, outbox, requests
from protocol.session.effects import Answer, Effect, Notify
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.wire.envelopes import MessageEnvelope

__all__ = ["GATED_ADAPTERS", "answer", "check_answer", "check_spawn", "request"]

#: the adapters that take ``spawn --approve`` rules (rule 5)
GATED_ADAPTERS = ("pi-rpc", "acp")


def check_spawn(args: api.SpawnArgs) -> None:
    """Rule 5: tool gating is for Pi agents (their tool calls) and ACP agents (their
    permission requests)."""
    if args.approve and args.adapter not in GATED_ADAPTERS:
        raise InvalidArgument(
            f"approve: gating tool calls needs the pi-rpc or acp adapter, not {args.adapter!r}; "
            "a command agent asks with shepherd-child approve-request"
        )


def request(
    s: SessionState, row: AgentRow, env: MessageEnvelope, cx: Ctx
) -> tuple[str, list[Effect]]:
    """Rule 1 and 2: open the approval ``env`` asks for; the request id and the effects."""
    if env.target_id != PARENT_ID:
        raise InvalidArgument(f"an approval request goes to the parent ({PARENT_ID!r}) only")
    if not env.content.strip():
        raise InvalidArgument("the approval request's text is empty: say what and why")
    if row.closed:
        raise InvalidHandle(f"agent {row.name} is closed; it can ask for nothing")
    request_id = env.message_id
    if request_id in s.requests:
        return request_id, []  # opened before a parent restart
    task_id = row.active_task
    if env.task_id is not None and env.task_id != task_id:
        raise InvalidArgument(f"an approval request is for the agent's active task ({task_id})")
    timeout = (
        env.reply_timeout_s
        if env.reply_timeout_s is not None
        else s.settings.default_reply_timeout_s
    )
    record = RequestRecord(
        request_id=request_id,
        sender_id=row.agent_id,
        target_id=PARENT_ID,
        created_at=cx.now,
        question=env.content,
        task_id=task_id,
        thread_id=env.thread_id,
        deadline_at=cx.now + timeout if timeout is not None else None,
        kind="approval",
        reply_inbox=env.reply_inbox,
    )
    effects = requests.open_(s, record, cx)
    on_task = f" (task {task_id})" if task_id else " (no task)"
    text = (
        f"{row.name}{on_task} asks for approval, request {request_id}: {env.content}\n"
        f"Answer with: shepherd approve {request_id} [--note TEXT], or "
        f"shepherd deny {request_id} --reason TEXT"
    )
    note = Notice(
        created_at=cx.now,
        code="approval_requested",
        text=text,
        agent_id=row.agent_id,
        task_id=task_id,
        refs=(request_id,),
    )
    return request_id, requests.told_once_waiting(effects, request_id, [Notify(note=note)])


def check_answer(s: SessionState, request_id: str) -> RequestRecord:
    """The approval ``request_id`` names, still pending (rule 3's refusals)."""
    record = s.requests.get(request_id)
    if record is None:
        raise InvalidHandle(
            f"no request {request_id!r:.80} in this session (or it closed long ago: only the "
            f"last {s.settings.closed_requests_kept} closed requests are kept)"
        )
    if record.kind != "approval":
        raise InvalidArgument(
            f"request {request_id} is a question, not an approval request: answer it with "
            "message --reply-to"
        )
    if not record.pending:
        raise InvalidTransition(
            f"approval request {request_id} was already answered: {outcome(record)}"
        )
    return record


def answer(s: SessionState, args: ApproveArgs | DenyArgs, cx: Ctx) -> list[Effect]:
    """Rule 3: the parent's approve or deny."""
    record = check_answer(s, args.request_id)
    approved = isinstance(args, ApproveArgs)
    text = args.note if isinstance(args, ApproveArgs) else args.reason
    if not approved and not (text or "").strip():
        raise InvalidArgument("deny: the reason is empty")
    if text is not None:
        probe = msgspec.structs.replace(decisions.notice_for(s, record, cx), text=text)
        outbox.check_fits(s, probe, "the note" if approved else "the reason")
    effects = requests.close(
        s, record.request_id, RequestState.REPLIED, cx, approved=approved, answer=text
    )
    result = ApprovalResult(
        request_id=record.request_id,
        approved=approved,
        agent_id=record.sender_id,
        agent_name=s.name_of(record.sender_id),
        task_id=record.task_id,
        answer=text,
    )
    return [*effects, Answer(value=result)]
