"""The environment variables that turn tracing on (see :mod:`actors.tracing`), apart so that
the modules which import OpenTelemetry can name them without importing the package's own
entry points."""

from __future__ import annotations

from typing import Final

__all__ = ["ENV_OTEL", "ENV_SPANS_DIR", "ENV_TASK_ID", "EXTRA", "OTLP_ENDPOINTS"]

#: set by ``serve --otel`` (and inherited by every agent of the session): tracing on
ENV_OTEL: Final = "SHEPHERD_OTEL"
#: a directory: every process of the session also writes its finished spans there as JSON
#: lines, one file per process (``spans-<pid>.jsonl``), with no collector needed
ENV_SPANS_DIR: Final = "SHEPHERD_OTEL_SPANS_DIR"
EXTRA: Final = "shepherd[otel]"
#: the task a command agent's turn works on (set by the bridge for each turn that has one):
#: the agent may read it, and a ``shepherd-child`` call's span carries it as
#: ``shepherd.task.id``
ENV_TASK_ID: Final = "SHEPHERD_TASK_ID"

#: the standard variables that name an OTLP endpoint (either turns tracing on)
OTLP_ENDPOINTS: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
