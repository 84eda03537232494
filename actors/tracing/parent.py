"""The parent's spans, opened and ended from the effects the broker runs.

The session's rules stay pure: they never call OpenTelemetry. The broker shows each effect
to :meth:`ParentSpans.seen` before running it, and gets the effect back, with the trace
context stamped on what it delivers.

Spans (names and attributes: :mod:`actors.tracing.names`):

- the session: ``invoke_workflow shepherd`` (``gen_ai.conversation.id`` = the session id),
  from the parent's start to its shutdown, in a trace of its own;
- each task: ``invoke_agent {agent}``, the root of the task's own trace (one trace per task,
  linked to the session's span), from the delegate (its first journal record) to its
  settlement (its terminal record), with the status and return code, and an event per
  question it asked (``request pending``: it waits) and per question closed (``request
  replied``, ``request timed_out``, ...); a task that did not
  complete (failed, blocked, cancelled, timed out) ends in error status, its reason the
  description. Its traceparent goes with the task's envelope, and the child's spans join it;
- each message or reply the parent routes: ``send {destination}`` (a messaging producer span),
  a child of the span the sender's envelope named (the child's tool call), else of the
  sender's task; it is stamped on the envelope delivered, and linked to the recipient's task.

Bounds: one open span per open task (the session's rules bound those); a task the parent
restored after a restart gets a new span (``shepherd.task.restored``) in a new trace: the old
parent's open span was never exported. Everything here runs on the broker's thread.
"""

from __future__ import annotations

import threading
from typing import Any, TypeVar

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from actors.runtime.log import logger
from actors.tracing import names as n
from actors.tracing.sdk import Tracing, context_of, nanos, traceparent_of
from protocol.core.ids import PARENT_ID
from protocol.core.tracecontext import ENV_TRACEPARENT, task_trace_id
from protocol.records.notifications import AgentMessage
from protocol.records.requests import RequestRecord
from protocol.records.tasks import TaskRecord
from protocol.session import effects as fx
from protocol.wire.envelopes import MessageEnvelope, ReplyEnvelope, TaskEnvelope

__all__ = ["ParentSpans"]

E = TypeVar("E", bound=fx.Effect)


class ParentSpans:
    """The spans of one session (see the module docstring). Never raises into the broker."""

    def __init__(self, tracing: Tracing, session_id: str) -> None:
        self._tracing = tracing
        self._tracer = tracing.tracer
        self._ids = tracing.ids
        self._session_id = session_id
        self._lock = threading.Lock()
        self._log = logger.bind(session=session_id)
        self._session = self._tracer.start_span(
            n.WORKFLOW_SPAN,
            context=otel_context.Context(),
            kind=SpanKind.INTERNAL,
            attributes={
                n.GEN_AI_OPERATION_NAME: n.OP_INVOKE_WORKFLOW,
                n.GEN_AI_CONVERSATION_ID: session_id,
                n.GEN_AI_PROVIDER_NAME: n.PROVIDER,
            },
        )
        self._tasks: dict[str, trace.Span] = {}  # open task id -> its span
        self._names: dict[str, str] = {}  # agent id -> name
        self._active: dict[str, str] = {}  # agent id -> its open task
        self._closed = False

    def child_environ(self) -> dict[str, str]:
        """For an agent's bridge: the session's trace context (a task's comes with it)."""
        tp = traceparent_of(self._session)
        return {ENV_TRACEPARENT: tp} if tp else {}

    def task_traceparent(self, task_id: str) -> str | None:
        span = self._tasks.get(task_id)
        return traceparent_of(span) if span is not None else None

    # ------------------------------------------------------------------ effects

    def seen(self, effect: fx.Effect) -> fx.Effect:
        """Open or end the spans ``effect`` is about; the effect to run (with the trace
        context on the envelope it delivers)."""
        try:
            with self._lock:
                if self._closed:
                    return effect
                return self._seen(effect)
        except Exception:
            self._log.opt(exception=True).warning("tracing failed on {}", type(effect).__name__)
            return effect

    def _seen(self, effect: fx.Effect) -> fx.Effect:
        match effect:
            case fx.Journal(record=TaskRecord() as record):
                self._task(record, restored=False)
            case fx.Journal(record=RequestRecord(task_id=str(task_id)) as request):
                self._question(task_id, request)
            case fx.OpenNote(record=record, restored=restored):
                self._task(record, restored=restored)
            case fx.SpawnAgent(agent_id=agent_id, name=name):
                self._names[agent_id] = name
            case fx.Deliver(envelope=TaskEnvelope(task_id=task_id) as env):
                return _stamped(effect, env, self.task_traceparent(task_id))
            case fx.Deliver(agent_id=agent_id, envelope=MessageEnvelope() | ReplyEnvelope() as env):
                return _stamped(effect, env, self._send(env, agent_id))
            case fx.Notify(note=AgentMessage() as note):
                self._send_to_parent(note)
        return effect

    def _task(self, record: TaskRecord, *, restored: bool) -> None:
        task_id = record.task_id
        span = self._tasks.get(task_id)
        if span is None and not record.terminal:
            name = record.agent_name or self._names.get(record.agent_id) or record.agent_id
            with self._ids.chosen(task_trace_id(self._session_id, task_id)):
                span = self._tracer.start_span(
                    n.agent_span(name),
                    context=otel_context.Context(),  # the root of the task's own trace
                    kind=SpanKind.CLIENT,
                    links=[Link(self._session.get_span_context())],
                    start_time=None if restored else nanos(record.created_at),
                    attributes={
                        n.GEN_AI_OPERATION_NAME: n.OP_INVOKE_AGENT,
                        n.GEN_AI_PROVIDER_NAME: n.PROVIDER,
                        n.GEN_AI_CONVERSATION_ID: self._session_id,
                        n.GEN_AI_AGENT_NAME: name,
                        n.GEN_AI_AGENT_ID: record.agent_id,
                        n.SHEPHERD_TASK_ID: task_id,
                        **({n.SHEPHERD_TASK_RESTORED: True} if restored else {}),
                    },
                )
            self._tasks[task_id] = span
            self._active[record.agent_id] = task_id
        if span is None or not record.terminal or record.result is None:
            return
        result = record.result
        span.set_attribute(n.SHEPHERD_TASK_STATUS, result.status)
        span.set_attribute(n.SHEPHERD_TASK_RETURN_CODE, result.return_code)
        if result.ok:
            span.set_status(Status(StatusCode.OK))
        else:
            span.set_attribute(n.ERROR_TYPE, result.status)
            span.set_status(Status(StatusCode.ERROR, result.error or result.status))
        span.end(end_time=nanos(result.completed_at))
        del self._tasks[task_id]
        if self._active.get(record.agent_id) == task_id:
            del self._active[record.agent_id]

    def _question(self, task_id: str, request: RequestRecord) -> None:
        """The task asked a question (it waits), or one of its questions closed."""
        span = self._tasks.get(task_id)
        if span is None:
            return
        at = request.created_at if request.pending else request.resolved_at
        span.add_event(
            f"request {request.state.value}",
            {n.SHEPHERD_REQUEST_ID: request.request_id},
            timestamp=nanos(at) if at is not None else None,
        )

    def _send(self, env: MessageEnvelope | ReplyEnvelope, target_id: str) -> str | None:
        """A message or reply routed to an agent: its span; its traceparent."""
        sender_task = env.task_id if env.sender_id != PARENT_ID else None
        if isinstance(env, ReplyEnvelope):
            sender_task = self._active.get(env.sender_id)
        parent = context_of(env.traceparent)
        if not trace.get_current_span(parent).get_span_context().is_valid:
            span_of_task = self._tasks.get(sender_task or "") or self._tasks.get(env.task_id or "")
            if span_of_task is not None:
                parent = trace.set_span_in_context(span_of_task, otel_context.Context())
        recipient_task = self._tasks.get(self._active.get(target_id, ""))
        links = [Link(recipient_task.get_span_context())] if recipient_task is not None else []
        destination = self._names.get(target_id, target_id)
        span = self._tracer.start_span(
            n.send_span(destination),
            context=parent,
            kind=SpanKind.PRODUCER,
            links=links,
            attributes=self._messaging(env, destination),
        )
        span.end()
        return traceparent_of(span)

    def _send_to_parent(self, note: AgentMessage) -> None:
        parent = context_of(None)
        span_of_task = self._tasks.get(note.task_id or "")
        if span_of_task is not None:
            parent = trace.set_span_in_context(span_of_task, otel_context.Context())
        self._tracer.start_span(
            n.send_span(PARENT_ID),
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=self._messaging(note, PARENT_ID),
        ).end()

    def _messaging(self, what: Any, destination: str) -> dict[str, Any]:
        reply_to = getattr(what, "reply_to", None)
        attributes: dict[str, Any] = {
            n.MESSAGING_SYSTEM: n.MESSAGING_SYSTEM_SHEPHERD,
            n.MESSAGING_OPERATION_NAME: n.OP_SEND,
            n.MESSAGING_OPERATION_TYPE: n.OP_SEND,
            n.MESSAGING_DESTINATION_NAME: destination,
            n.MESSAGING_MESSAGE_ID: what.message_id,
            n.GEN_AI_CONVERSATION_ID: self._session_id,
            n.SHEPHERD_MESSAGE_KIND: "reply" if reply_to else "message",
            n.SHEPHERD_EXPECTS_REPLY: bool(getattr(what, "expects_reply", False)),
        }
        if what.thread_id:
            attributes[n.MESSAGING_CONVERSATION_ID] = what.thread_id
        if reply_to:
            attributes[n.SHEPHERD_REPLY_TO] = reply_to
        if what.sender_name:
            attributes[n.SHEPHERD_SENDER_NAME] = what.sender_name
        if what.task_id:
            attributes[n.SHEPHERD_TASK_ID] = what.task_id
        return attributes

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """The session ends: open task spans end unfinished (the tasks stay open in the
        journal), the session's span ends, and what is batched is sent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for span in self._tasks.values():
                    span.set_attribute(n.SHEPHERD_TASK_STATUS, "open")
                    span.end()
                self._tasks.clear()
                self._session.end()
                self._tracing.close()
            except Exception:
                self._log.opt(exception=True).warning("closing the tracer failed")


def _stamped(effect: E, env: Any, traceparent: str | None) -> E:
    if traceparent is None or env.traceparent == traceparent:
        return effect
    return msgspec.structs.replace(
        effect, envelope=msgspec.structs.replace(env, traceparent=traceparent)
    )
