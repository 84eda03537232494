"""A collector that does not answer is told once per outage, then counted: never a line (or a
traceback) per batch, from the parent or its agents."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from actors.tracing.sdk import OutageToldExporter
from tests.processes.conftest import DIE_WITH_PYTEST, cli
from tests.tracing.test_processes import _script

OK, FAILED = SpanExportResult.SUCCESS, SpanExportResult.FAILURE

#: a scripted agent with tool calls (spans of its own, exported by its bridge) on every task
WORKER = {
    "steps": [
        {"await": "task"},
        {"run": "echo looking"},
        {"done": {"status": "completed", "summary": "looked"}},
        {"await": "task"},
        {"run": "echo looking"},
        {"done": {"status": "completed", "summary": "looked"}},
        {"await": "task"},
        {"run": "echo looking"},
        {"done": {"status": "completed", "summary": "looked"}},
        {"await": "any"},
    ]
}


class Scripted(SpanExporter):
    """Answers each export with the next of ``answers`` (an exception is raised)."""

    def __init__(self, answers: Sequence[SpanExportResult | Exception]) -> None:
        self.answers = list(answers)
        self.stopped = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def shutdown(self) -> None:
        self.stopped = True


def _batch(n: int) -> list[ReadableSpan]:
    return [ReadableSpan(name=f"s{i}") for i in range(n)]


def test_an_outage_is_told_once_then_counted_when_the_collector_answers_again() -> None:
    said: list[str] = []
    inner = Scripted([OK, FAILED, FAILED, ConnectionError("refused"), OK, FAILED, OK])
    told = OutageToldExporter(inner, "the collector at http://c:4318", said.append)
    results = [told.export(_batch(n)) for n in (1, 2, 3, 4, 5, 6, 7)]
    assert results == [OK, FAILED, FAILED, FAILED, OK, FAILED, OK]  # never raises
    assert said == [
        "traces: the collector at http://c:4318 does not answer; spans are dropped until it "
        "does (told once; a count follows when it answers again or at exit)",
        "traces: the collector at http://c:4318 answers again; 3 batches (9 spans) were "
        "dropped while it did not answer",
        "traces: the collector at http://c:4318 does not answer; spans are dropped until it "
        "does (told once; a count follows when it answers again or at exit)",
        "traces: the collector at http://c:4318 answers again; 1 batch (6 spans) were "
        "dropped while it did not answer",
    ]


def test_an_outage_still_on_at_exit_is_counted_then() -> None:
    said: list[str] = []
    inner = Scripted([FAILED, FAILED])
    told = OutageToldExporter(inner, "the collector at x", said.append)
    told.export(_batch(2))
    told.export(_batch(1))
    told.shutdown()
    assert inner.stopped
    assert said[1:] == [
        "traces: the collector at x never answered again; 2 batches (3 spans) were dropped "
        "while it did not answer"
    ]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there now


@pytest.mark.processes
def test_serve_otel_with_no_collector_says_so_once_and_counts_at_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SHEPHERD_OTEL"))}
    env.update(
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{_closed_port()}",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",  # each batch gives up after a second of retries
        OTEL_BSP_SCHEDULE_DELAY="50",  # a batch every 50 ms: several while the tasks run
    )
    session = tmp_path / "session"
    argv = ["serve", "--otel", "--session-dir", str(session), "--json"]
    serve = subprocess.Popen(
        [*DIE_WITH_PYTEST, sys.executable, "-m", "actors.surfaces.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        assert serve.stdout is not None and serve.stderr is not None
        assert b'"session"' in serve.stdout.readline()  # it started
        cli("spawn", "scout", "--script", _script(tmp_path, "scout", WORKER), session=session)
        for _ in range(3):
            _, task = cli("delegate", "scout", "map the code base", session=session)
            _, done = cli("wait", task["task_id"], "--timeout", "60", session=session)
            assert [r["status"] for r in done["completed"]] == ["completed"]
        cli("shutdown", session=session)
        assert serve.wait(timeout=120) == 0
        err = serve.stderr.read().decode(errors="replace")
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(timeout=10)
        assert serve.stdout is not None and serve.stderr is not None
        serve.stdout.close()
        serve.stderr.close()
    told = [line for line in err.splitlines() if line.startswith("traces: ")]
    assert len([x for x in told if "does not answer" in x]) == 1, err
    (count,) = [x for x in told if "never answered again" in x]
    assert "batch" in count and "spans) were dropped" in count
    assert "Transient error" not in err and "Failed to export" not in err, err
    assert "Traceback" not in err, err
