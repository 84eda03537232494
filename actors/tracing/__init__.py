"""Traces with OpenTelemetry: one trace per task, the child's spans inside it.

Install extra ``shepherd[otel]``. Tracing is off unless the standard ``OTEL_*`` variables ask
for it (``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), ``shepherd serve --otel`` does (it sets
:data:`ENV_OTEL`, which the agents inherit), or :data:`ENV_SPANS_DIR` names a directory for
span files. ``OTEL_SDK_DISABLED=true`` turns it off whatever else is set.

Rules:
- Off, nothing of OpenTelemetry is imported: this module is light (its factories import the
  rest only when tracing is on), and only
  :mod:`actors.tracing.sdk`, :mod:`actors.tracing.parent` and :mod:`actors.tracing.child`
  import OpenTelemetry, when tracing is on.
- On but not installed: the parent refuses to start with an error naming the extra
  (:func:`require`); a child (the bridge, ``shepherd-child``) warns on its stderr and goes on
  untraced: a trace is never worth an agent or a task.
- A tracing failure never breaks a task: every hook catches what it raises and logs it.

Where the spans come from: the parent's broker shows every effect it runs to
:class:`actors.tracing.parent.ParentSpans` (the session's rules stay pure: spans are opened and
ended from the effects); the bridge shows it every envelope it gets and sends
(:class:`actors.tracing.child.ChildSpans`); ``shepherd-child message|done`` run in a command
agent's turn wraps its call in one span (:class:`actors.tracing.child.CommandSpan`). Trace
context travels as a W3C traceparent (:mod:`protocol.core.tracecontext`) in envelopes and in
``TRACEPARENT``. The environment variables are :mod:`actors.tracing.variables`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from actors.tracing.variables import ENV_OTEL, ENV_SPANS_DIR, EXTRA, OTLP_ENDPOINTS
from protocol.core.errors import InvalidArgument
from protocol.core.tracecontext import ENV_TRACEPARENT

__all__ = [
    "ENV_OTEL",
    "ENV_SPANS_DIR",
    "EXTRA",
    "OTLP_ENDPOINTS",
    "child_spans",
    "command_span",
    "parent_spans",
    "parent_tracing",
    "reason",
    "require",
    "wanted",
]


def reason(environ: Mapping[str, str]) -> str | None:
    """What in ``environ`` turns tracing on (a variable's name), or None when it is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get(ENV_OTEL, "").strip() not in ("", "0"):
        return f"{ENV_OTEL} (serve --otel)"
    if environ.get(ENV_SPANS_DIR, "").strip():
        return ENV_SPANS_DIR
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return None if exporter == "none" else f"OTEL_TRACES_EXPORTER={exporter}"
    return next((name for name in OTLP_ENDPOINTS if environ.get(name, "").strip()), None)


def wanted(environ: Mapping[str, str]) -> bool:
    return reason(environ) is not None


def require(environ: Mapping[str, str]) -> None:
    """Raise ``invalid_argument`` naming the extra if tracing is on and OpenTelemetry's SDK is
    not installed."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        raise InvalidArgument(
            f"tracing is on ({reason(environ) or ENV_OTEL}) but the OpenTelemetry SDK is not "
            f"installed: pip install '{EXTRA}' (or unset the OTEL_* variables)"
        ) from None


def parent_tracing(environ: Mapping[str, str]) -> Any:
    """The parent's tracing (its provider and exporters) when tracing is on, else None (and
    nothing of OpenTelemetry imported). Raises ``invalid_argument`` when it is on and cannot
    be: the package missing (naming the extra), an exporter unknown. Made before the session
    is touched, so that a refusal leaves nothing behind."""
    if not wanted(environ):
        return None
    require(environ)
    from actors.tracing.sdk import make_tracing

    return make_tracing(environ, "shepherd")


def parent_spans(session_id: str, environ: Mapping[str, str], made: Any = None) -> Any:
    """The session's :class:`~actors.tracing.parent.ParentSpans` over ``made`` (what
    :func:`parent_tracing` gave) or over a new :func:`parent_tracing`; None when tracing is
    off."""
    made = made if made is not None else parent_tracing(environ)
    if made is None:
        return None
    from actors.tracing.parent import ParentSpans

    return ParentSpans(made, session_id)


def _off(who: str, exc: BaseException) -> None:
    print(f"{who}: tracing is off: {exc}", file=sys.stderr)


def child_spans(
    environ: Mapping[str, str], *, session_id: str, agent_id: str, agent_name: str | None
) -> Any:
    """The bridge's :class:`~actors.tracing.child.ChildSpans` when tracing is on, else None;
    a child that cannot trace says why on its stderr (the agent's log) and runs untraced."""
    if not wanted(environ):
        return None
    try:
        require(environ)
        from actors.tracing.child import ChildSpans, open_tracing

        return ChildSpans(
            open_tracing(environ, agent_name),
            session_id=session_id,
            agent_id=agent_id,
            agent_name=agent_name,
        )
    except Exception as exc:
        _off("shepherd-child run", exc)
        return None


def command_span(
    environ: Mapping[str, str],
    tool: str,
    *,
    session_id: str,
    agent_id: str,
    agent_name: str | None,
) -> Any:
    """A ``shepherd-child`` call's :class:`~actors.tracing.child.CommandSpan` when tracing is
    on and the call runs in a command agent's turn (its ``TRACEPARENT`` names the task), else
    None (nothing imported): Pi's and a script's tool calls are traced by the bridge, from the
    agent's tool events. A failure to trace is said on stderr, never fatal."""
    if not wanted(environ) or not environ.get(ENV_TRACEPARENT, "").strip():
        return None
    try:
        require(environ)
        from actors.tracing.child import CommandSpan

        return CommandSpan(
            environ, tool, session_id=session_id, agent_id=agent_id, agent_name=agent_name
        )
    except Exception as exc:
        _off("shepherd-child", exc)
        return None
