"""A child's spans: its tool calls, inside the trace of the task they belong to.

The bridge shows :class:`ChildSpans` every envelope it gets (:meth:`ChildSpans.delivered`) and
every envelope it publishes (:meth:`ChildSpans.published`, which returns it stamped with the
trace context):

- a task's envelope carries the task's traceparent: it is the parent of every span of the
  agent's work on it (none, or one that is not valid: the spans start a new trace);
- a ``tool_call`` runtime event opens ``execute_tool {tool}`` (Pi's tools, a script's ``run``
  steps), its ``tool_result`` ends it (error status when the result is an error); the
  parent's ending the task, or the bridge's exit, ends what is still open (error status);
- what the agent sends (message, reply, done, runtime events) carries the innermost open span's
  traceparent, and a command agent's turn gets it as ``TRACEPARENT``
  (:meth:`ChildSpans.environ`), so its ``shepherd-child`` calls join the task's trace
  (:class:`CommandSpan`: ``execute_tool shepherd_message`` / ``shepherd_done``).

Bounds: at most :data:`MAX_OPEN_TOOLS` tool spans are open at once; past that, the oldest is
ended (error ``no_result``). Tool arguments and results are not recorded (they may hold
secrets); the tool's name is.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from actors.tracing import names as n
from actors.tracing.sdk import (
    CHILD_EXPORT_TIMEOUT_S,
    Tracing,
    context_of,
    make_tracing,
    traceparent_of,
)
from actors.tracing.variables import ENV_TASK_ID
from protocol.core.tracecontext import ENV_TRACEPARENT, parse_traceparent
from protocol.wire.envelopes import (
    AnyEnvelope,
    ControlEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)

__all__ = ["MAX_OPEN_TOOLS", "ChildSpans", "CommandSpan", "open_tracing"]

#: tool spans open at once in one agent (a tool_call whose result never comes is ended when
#: this many are open after it)
MAX_OPEN_TOOLS: Final = 64

V = TypeVar("V", bound=AnyEnvelope)

_STAMPED = (MessageEnvelope, ReplyEnvelope, TaskDoneEnvelope, RuntimeEnvelope)


def open_tracing(environ: Mapping[str, str], agent_name: str | None) -> Tracing:
    attributes = {n.GEN_AI_AGENT_NAME: agent_name} if agent_name else {}
    return make_tracing(
        environ, "shepherd-child", attributes, export_timeout_s=CHILD_EXPORT_TIMEOUT_S
    )


class ChildSpans:
    """The spans of one agent's bridge (see the module docstring); runs on the core thread."""

    def __init__(
        self, tracing: Tracing, *, session_id: str, agent_id: str, agent_name: str | None
    ) -> None:
        self._tracing = tracing
        self._tracer = tracing.tracer
        self._common: dict[str, Any] = {
            n.GEN_AI_CONVERSATION_ID: session_id,
            n.GEN_AI_AGENT_ID: agent_id,
        }
        if agent_name:
            self._common[n.GEN_AI_AGENT_NAME] = agent_name
        self._task_id: str | None = None
        self._task_ctx: otel_context.Context = otel_context.Context()
        self._task_tp: str | None = None
        #: open tool spans, oldest first: (tool name, span)
        self._tools: list[tuple[str | None, trace.Span]] = []

    def delivered(self, envelope: AnyEnvelope) -> None:
        if isinstance(envelope, TaskEnvelope):
            self._end_tools("superseded by a new task")
            self._task_id = envelope.task_id
            valid = parse_traceparent(envelope.traceparent) is not None
            self._task_tp = envelope.traceparent if valid else None
            self._task_ctx = context_of(self._task_tp)
        elif (
            isinstance(envelope, ControlEnvelope)
            and envelope.action == "cancel_task"
            and envelope.task_id == self._task_id
        ):
            self._end_tools(envelope.reason or "the task ended")
            self._task_id, self._task_tp = None, None
            self._task_ctx = otel_context.Context()

    def published(self, envelope: AnyEnvelope) -> AnyEnvelope:
        if isinstance(envelope, RuntimeEnvelope):
            if envelope.event == "tool_call":
                return self._stamp(envelope, self._tool_call(envelope.tool))
            if envelope.event == "tool_result":
                stamped = self._stamp(envelope, self._innermost())
                self._tool_result(envelope.tool, envelope.is_error, envelope.output)
                return stamped
            if envelope.event == "exit":
                self._end_tools("the agent exited")
        if isinstance(envelope, _STAMPED) and envelope.traceparent is None:
            return self._stamp(envelope, self._innermost())
        return envelope

    def environ(self) -> dict[str, str]:
        """``TRACEPARENT`` for a process the agent starts now (its task's context)."""
        tp = self._innermost()
        return {ENV_TRACEPARENT: tp} if tp else {}

    def close(self) -> None:
        self._end_tools("the bridge exited")
        self._tracing.close()

    # ------------------------------------------------------------------ tools

    def _tool_call(self, tool: str | None) -> str | None:
        if len(self._tools) >= MAX_OPEN_TOOLS:
            _, oldest = self._tools.pop(0)
            _error(oldest, "no_result", "no tool_result came for this call")
            oldest.end()
        name = tool or "tool"
        span = self._tracer.start_span(
            n.tool_span(name),
            context=self._task_ctx,
            kind=SpanKind.INTERNAL,
            attributes={
                **self._common,
                n.GEN_AI_OPERATION_NAME: n.OP_EXECUTE_TOOL,
                n.GEN_AI_TOOL_NAME: name,
                n.GEN_AI_TOOL_TYPE: n.TOOL_TYPE_FUNCTION,
                **({n.SHEPHERD_TASK_ID: self._task_id} if self._task_id else {}),
            },
        )
        self._tools.append((tool, span))
        return traceparent_of(span)

    def _tool_result(self, tool: str | None, is_error: bool, output: str | None) -> None:
        found = next((i for i, (name, _) in enumerate(self._tools) if name == tool), None)
        if found is None:
            return
        _, span = self._tools.pop(found)
        if is_error:
            _error(span, "tool_error", (output or "the tool failed")[-200:])
        span.end()

    def _end_tools(self, why: str) -> None:
        for _, span in self._tools:
            _error(span, "interrupted", why)
            span.end()
        self._tools.clear()

    def _innermost(self) -> str | None:
        if self._tools:
            return traceparent_of(self._tools[-1][1])
        return self._task_tp

    @staticmethod
    def _stamp(envelope: V, traceparent: str | None) -> V:
        if traceparent is None:
            return envelope
        return msgspec.structs.replace(envelope, traceparent=traceparent)


def _error(span: trace.Span, kind: str, why: str) -> None:
    span.set_attribute(n.ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, why))


class CommandSpan:
    """A ``shepherd-child`` call as ``execute_tool {tool}``, a child of ``TRACEPARENT`` (the
    turn's task, or the tool call that ran the command): :attr:`traceparent` goes in the
    envelope; :meth:`end` ends and exports it (never raises)."""

    def __init__(
        self,
        environ: Mapping[str, str],
        tool: str,
        *,
        session_id: str,
        agent_id: str,
        agent_name: str | None,
    ) -> None:
        self._tracing = open_tracing(environ, agent_name)
        self._span = self._tracing.tracer.start_span(
            n.tool_span(tool),
            context=context_of(environ.get(ENV_TRACEPARENT)),
            kind=SpanKind.INTERNAL,
            attributes={
                n.GEN_AI_OPERATION_NAME: n.OP_EXECUTE_TOOL,
                n.GEN_AI_TOOL_NAME: tool,
                n.GEN_AI_TOOL_TYPE: n.TOOL_TYPE_FUNCTION,
                n.GEN_AI_CONVERSATION_ID: session_id,
                n.GEN_AI_AGENT_ID: agent_id,
                **({n.GEN_AI_AGENT_NAME: agent_name} if agent_name else {}),
                **({n.SHEPHERD_TASK_ID: task_id} if (task_id := environ.get(ENV_TASK_ID)) else {}),
            },
        )
        self.traceparent = traceparent_of(self._span)

    def end(self, error: tuple[str, str] | None = None) -> None:
        """``error``: (its type, its description) when the call failed or was refused."""
        try:
            if error is not None:
                _error(self._span, error[0], error[1][:200])
            self._span.end()
            self._tracing.close()
        except Exception as exc:
            print(f"shepherd-child: tracing failed: {exc!r}", file=sys.stderr)
