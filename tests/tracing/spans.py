"""Reading the spans a session's processes wrote (``SHEPHERD_OTEL_SPANS_DIR``): one JSON line
per span, the OpenTelemetry SDK's own ``ReadableSpan.to_json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Span:
    def __init__(self, raw: dict[str, Any], file: Path) -> None:
        self.raw = raw
        self.file = file
        self.name: str = raw["name"]
        self.trace_id: str = raw["context"]["trace_id"]
        self.span_id: str = raw["context"]["span_id"]
        self.parent_id: str | None = raw["parent_id"]
        self.attributes: dict[str, Any] = raw["attributes"]
        self.status: str = raw["status"]["status_code"]
        self.description: str | None = raw["status"].get("description")
        self.kind: str = raw["kind"]
        self.links: list[dict[str, Any]] = raw["links"]

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id[2:]}-{self.span_id[2:]}-01"

    def __repr__(self) -> str:
        return f"<{self.name} {self.trace_id[-6:]}/{self.span_id[-6:]} <- {self.parent_id}>"


def read_spans(directory: Path) -> list[Span]:
    spans: list[Span] = []
    for file in sorted(directory.glob("spans-*.jsonl")):
        for line in file.read_text().splitlines():
            if line.strip():
                spans.append(Span(json.loads(line), file))
    return spans


def named(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]
