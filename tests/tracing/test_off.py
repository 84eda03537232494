"""Tracing is off unless asked for, and then nothing of OpenTelemetry is imported; asked for
without the package (or with an exporter Shepherd does not know), ``serve`` refuses to start
with an error naming the extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors import tracing

#: every module a CLI path of the parent or the child loads, then what of OpenTelemetry came
#: (not the MCP server's: the mcp package imports opentelemetry-api for its own tracing)
IMPORT_ALL = """
import json, sys
import actors.surfaces.cli, actors.surfaces.cli_commands, actors.surfaces.client
import actors.session.supervisor, actors.session.broker, actors.session.launcher
import actors.child.cli, actors.child.bridge, actors.child.command, actors.tracing
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
"""
#: `shepherd serve` with the OpenTelemetry SDK made unimportable (the API comes with mcp)
SERVE_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry.sdk"] = None
from actors.surfaces.cli import main
sys.exit(main(sys.argv[1:]))
"""
OTEL_VARS = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    tracing.ENV_OTEL,
    tracing.ENV_SPANS_DIR,
)


def _environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OTEL_VARS}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    env.update(extra)
    return env


def test_off_the_cli_paths_import_nothing_of_opentelemetry(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL],
        env=_environ(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "   "}, False),
        ({tracing.ENV_OTEL: "1"}, True),
        ({tracing.ENV_OTEL: "0"}, False),
        ({tracing.ENV_SPANS_DIR: "/tmp/x"}, True),
        ({tracing.ENV_OTEL: "1", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_what_turns_it_on(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on
    if not on:
        assert tracing.parent_spans("s", environ) is None


def _serve(tmp_path: Path, script: str | None, *args: str, **extra: str) -> dict[str, object]:
    command = ["-c", script] if script else ["-m", "actors.surfaces.cli"]
    done = subprocess.run(
        [sys.executable, *command, "serve", "--session-dir", str(tmp_path / "s"), "--json", *args],
        env=_environ(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert not (tmp_path / "s").exists()  # refused before anything was made
    error: dict[str, object] = json.loads(done.stdout)["error"]
    return error


@pytest.mark.parametrize(
    ("args", "extra", "named"),
    [
        (["--otel"], {}, "SHEPHERD_OTEL"),
        ([], {"OTEL_TRACES_EXPORTER": "otlp"}, "OTEL_TRACES_EXPORTER=otlp"),
        ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ],
)
def test_on_without_the_package_serve_refuses_naming_the_extra(
    tmp_path: Path, args: list[str], extra: dict[str, str], named: str
) -> None:
    error = _serve(tmp_path, SERVE_WITHOUT_OTEL, *args, **extra)
    assert error["code"] == "invalid_argument"
    message = str(error["message"])
    assert "pip install 'shepherd[otel]'" in message and named in message


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "otlp, console and none"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "http/protobuf or grpc",
        ),
    ],
)
def test_an_exporter_shepherd_does_not_know_is_refused(
    tmp_path: Path, extra: dict[str, str], said: str
) -> None:
    error = _serve(tmp_path, None, **extra)
    assert error["code"] == "invalid_argument" and said in str(error["message"])
