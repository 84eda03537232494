"""The README's way: ``shepherd serve --otel`` sends every process's spans to an OTLP/HTTP
endpoint. A small collector here (a real HTTP server decoding the OTLP protobuf requests)
receives the parent's and the agent's spans: one trace per task, the tool call inside it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.processes.conftest import DIE_WITH_PYTEST, cli
from tests.tracing.test_processes import TOOLS, _script

pytestmark = pytest.mark.processes

ANSWER = {"steps": [{"await": "message"}, {"reply": {"text": "src"}}, {"await": "any"}]}


class Collector(ThreadingHTTPServer):
    """Keeps (service name, span) for every span POSTed to /v1/traces."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.server.lock:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource_spans.scope_spans:
                    self.server.spans.extend((service, span) for span in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_serve_otel_sends_one_trace_per_task_to_the_otlp_endpoint(
    tmp_path: Path, collector: Collector
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SHEPHERD_OTEL"))}
    env.update(
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
    )
    session = tmp_path / "session"
    argv = ["serve", "--otel", "--session-dir", str(session), "--json"]
    serve = subprocess.Popen(
        [*DIE_WITH_PYTEST, sys.executable, "-m", "actors.surfaces.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        assert serve.stdout is not None
        assert b'"session"' in serve.stdout.readline()  # it started
        script = _script(tmp_path, "scout", TOOLS)
        planner = _script(tmp_path, "planner", ANSWER)
        cli("spawn", "scout", "--script", script, session=session)
        cli("spawn", "planner", "--script", planner, session=session)
        _, task = cli("delegate", "scout", "map the code base", session=session)
        _, done = cli("wait", task["task_id"], "--timeout", "60", session=session)
        assert [r["status"] for r in done["completed"]] == ["completed"]
        cli("shutdown", session=session)
        assert serve.wait(timeout=60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(timeout=10)
        assert serve.stdout is not None
        serve.stdout.close()
    with collector.lock:
        spans = list(collector.spans)
    (agent,) = [(svc, s) for svc, s in spans if s.name == "invoke_agent scout"]
    tools = [(svc, s) for svc, s in spans if s.name == "execute_tool bash"]
    assert agent[0] == "shepherd" and {svc for svc, _ in tools} == {"shepherd-child"}
    assert len(tools) == 2
    assert {s.trace_id for _, s in tools} == {agent[1].trace_id}
    assert {s.parent_span_id for _, s in tools} == {agent[1].span_id}
    assert [s.name for _, s in spans if s.name.startswith("invoke_workflow")] == [
        "invoke_workflow shepherd"
    ]
