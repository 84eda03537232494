"""The OpenTelemetry SDK set up from the standard environment, and the trace-context helpers.

Exporters (``OTEL_TRACES_EXPORTER``, comma-separated; default ``otlp`` when tracing is on):
``otlp`` (HTTP/protobuf, configured by the exporter's own ``OTEL_EXPORTER_OTLP_*`` variables;
``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` needs ``opentelemetry-exporter-otlp-proto-grpc``),
``console`` (to stderr: a child's stdout may be its agent's), ``none``. With
:data:`~actors.tracing.ENV_SPANS_DIR`, each process also writes its spans as JSON lines
(:class:`JsonLinesExporter`, written as each span ends). The tracer provider is the caller's,
never the global one: several sessions in one process (tests, an embedding program) keep their
own.

What is batched (OTLP) is sent when the process ends normally (:meth:`Tracing.close`); a
process killed with SIGKILL loses what it had not sent yet.

A collector that does not answer is told once per outage on stderr, then counted
(:class:`OutageToldExporter`): the exporter's own messages for it (a warning per retry, an error
per batch) are filtered out of the standard ``logging`` loggers it writes to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from actors.tracing.variables import ENV_OTEL, ENV_SPANS_DIR, OTLP_ENDPOINTS
from protocol.core.errors import InvalidArgument
from protocol.core.tracecontext import format_traceparent, parse_traceparent

__all__ = [
    "ChosenTraceIds",
    "JsonLinesExporter",
    "OutageToldExporter",
    "Tracing",
    "context_of",
    "make_tracing",
    "nanos",
    "traceparent_of",
]

INSTRUMENTATION: str = "shepherd"
#: the standard variables that set how long an OTLP export may take
OTLP_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
#: a child's default for it (see :func:`make_tracing`)
CHILD_EXPORT_TIMEOUT_S = 3.0


class JsonLinesExporter(SpanExporter):
    """Each finished span as one JSON line (the SDK's own ``to_json``) in
    ``DIR/spans-<pid>.jsonl``: spans of a session without a collector, and what the tests of
    real processes read."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(  # noqa: SIM115 - open until shutdown
            directory / f"spans-{os.getpid()}.jsonl", "a", encoding="utf-8"
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            self._file.write("".join(span.to_json(indent=None) + "\n" for span in spans))
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


#: the OTLP exporters' loggers, and the beginnings of their lines about a collector that does
#: not answer (told by :class:`OutageToldExporter` instead)
_EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)
_EXPORT_FAILURES = (
    "Transient error",
    "Failed to export",
    "Shutdown in progress, aborting retry",
)


class _QuietExportFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_EXPORT_FAILURES)


_QUIET = _QuietExportFailures()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class OutageToldExporter(SpanExporter):
    """An exporter to a collector (OTLP) whose failures are told once per outage, then
    counted: the first failed batch says the collector does not answer; the next ones are
    counted; the first batch that goes through again says how many were dropped, and so does
    :meth:`shutdown` while the collector is still out of reach. Never raises."""

    def __init__(self, inner: SpanExporter, where: str, say: Callable[[str], None] = _say) -> None:
        self._inner, self._where, self._say = inner, where, say
        self._lock = threading.Lock()
        self._down = False
        self._batches = self._spans = 0
        for name in _EXPORT_LOGGERS:
            logging.getLogger(name).addFilter(_QUIET)  # one filter object: added once

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        why = ""
        try:
            result = self._inner.export(spans)
        except Exception as exc:
            result, why = SpanExportResult.FAILURE, f" ({exc!r:.200})"
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                if self._down:
                    self._say(f"traces: {self._where} answers again; {self._lost()}")
                self._down, self._batches, self._spans = False, 0, 0
                return result
            if not self._down:
                self._say(
                    f"traces: {self._where} does not answer{why}; spans are "
                    "dropped until it does (told once; a count follows when it answers again or "
                    "at exit)"
                )
            self._down = True
            self._batches += 1
            self._spans += len(spans)
        return result

    def _lost(self) -> str:
        batches = f"{self._batches} batch{'es' if self._batches != 1 else ''}"
        return f"{batches} ({self._spans} spans) were dropped while it did not answer"

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception as exc:
            self._say(f"traces: the exporter failed to stop: {exc!r:.200}")
        with self._lock:
            if self._down:
                self._say(f"traces: {self._where} never answered again; {self._lost()}")
                self._down = False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _collector(environ: Mapping[str, str]) -> str:
    """Where the OTLP exporter sends spans, as its own variables say (for the messages)."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if environ.get(name, "").strip():
            return f"the collector at {environ[name].strip()[:200]}"
    return "the collector at the default endpoint (localhost:4318)"


class ChosenTraceIds(RandomIdGenerator):
    """The SDK's random ids, except the trace id of a root span started inside
    :meth:`chosen` on the same thread (a task's span starts the trace
    :func:`~protocol.core.tracecontext.task_trace_id` names)."""

    def __init__(self) -> None:
        self._next = threading.local()

    @contextlib.contextmanager
    def chosen(self, trace_id: str) -> Iterator[None]:
        self._next.value = int(trace_id, 16)
        try:
            yield
        finally:
            self._next.value = None

    def generate_trace_id(self) -> int:
        chosen: int | None = getattr(self._next, "value", None)
        if chosen is None:
            return super().generate_trace_id()
        self._next.value = None
        return chosen


class Tracing:
    """A tracer and the provider behind it (closed once, flushing what is batched), and the
    provider's ids (:class:`ChosenTraceIds`)."""

    def __init__(self, provider: TracerProvider, ids: ChosenTraceIds) -> None:
        self.provider = provider
        self.ids = ids
        self.tracer = provider.get_tracer(INSTRUMENTATION)

    def close(self) -> None:
        self.provider.shutdown()


def _otlp_exporter(environ: Mapping[str, str], timeout_s: float | None) -> SpanExporter:
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found, unused-ignore]
                OTLPSpanExporter,
            )

            grpc: SpanExporter = OTLPSpanExporter(timeout=timeout_s)
            return grpc
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpExporter,
            )

            return HttpExporter(timeout=timeout_s)
    except ImportError:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
        raise InvalidArgument(
            f"OTLP over {protocol} needs {package}: pip install 'shepherd[otel]'"
            + (f" {package}" if protocol == "grpc" else "")
        ) from None
    raise InvalidArgument(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r:.40} is not supported: use http/protobuf or grpc"
    )


def make_tracing(
    environ: Mapping[str, str],
    service_name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    processors: Sequence[Any] = (),
    export_timeout_s: float | None = None,
) -> Tracing:
    """A provider with the exporters ``environ`` names (raises ``invalid_argument`` for an
    unknown one), plus ``processors`` (a test's in-memory exporter). ``export_timeout_s``: how
    long an OTLP export may try (retries included) unless ``OTEL_EXPORTER_OTLP_*TIMEOUT`` says:
    a child's exit, or a ``shepherd-child`` call, must not wait the SDK's 10 s on a collector
    that is down."""
    if any(environ.get(v, "").strip() for v in OTLP_TIMEOUTS):
        export_timeout_s = None  # the exporter reads the user's own
    resource_attrs: dict[str, Any] = dict(attributes or {})
    if not environ.get("OTEL_SERVICE_NAME"):
        resource_attrs["service.name"] = service_name
    ids = ChosenTraceIds()
    provider = TracerProvider(resource=Resource.create(resource_attrs), id_generator=ids)
    names = [
        n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()
    ]
    if not names and (
        environ.get(ENV_OTEL, "").strip() not in ("", "0")
        or any(environ.get(v, "").strip() for v in OTLP_ENDPOINTS)
    ):
        names = ["otlp"]  # on, with no exporter named: the standard default
    for name in names:
        if name == "none":
            continue
        if name == "otlp":
            exporter = _otlp_exporter(environ, export_timeout_s)
            told = OutageToldExporter(exporter, _collector(environ))
            provider.add_span_processor(BatchSpanProcessor(told))
        elif name == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        else:
            raise InvalidArgument(
                f"OTEL_TRACES_EXPORTER names {name!r:.40}: Shepherd knows otlp, console and none"
            )
    spans_dir = environ.get(ENV_SPANS_DIR, "").strip()
    if spans_dir:
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(Path(spans_dir))))
    for processor in processors:
        provider.add_span_processor(processor)
    return Tracing(provider, ids)


def context_of(traceparent: str | None) -> otel_context.Context:
    """The context whose parent is the span named by ``traceparent``; an empty context (a new
    trace) when there is none or it is not valid."""
    parsed = parse_traceparent(traceparent)
    if parsed is None:
        return otel_context.Context()
    remote = trace.SpanContext(
        trace_id=parsed.trace_id,
        span_id=parsed.span_id,
        is_remote=True,
        trace_flags=trace.TraceFlags(parsed.flags & 0x01),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(remote), otel_context.Context())


def traceparent_of(span: trace.Span) -> str | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return format_traceparent(ctx.trace_id, ctx.span_id, int(ctx.trace_flags))


def nanos(seconds: float) -> int:
    """A wall-clock time in seconds as the nanoseconds a span's start and end take."""
    return int(seconds * 1e9)
