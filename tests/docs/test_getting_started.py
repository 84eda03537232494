"""Every command of the getting-started guide runs as written: each ``sh`` block in page order,
in one directory, as a newcomer types them. A block that starts ``shepherd serve`` is shell 1:
it runs in the background, as a second terminal holds it, and the next block starts once it
printed its directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .markdown import DOCS, blocks

GUIDE = DOCS / "getting-started.md"

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]


def test_the_guide_has_a_session_and_a_command_agent() -> None:
    commands = blocks(GUIDE, "sh")
    serves = [b for b in commands if b.startswith("shepherd serve")]
    assert len(serves) == 1 and len(serves[0].splitlines()) == 1
    assert any("--adapter command" in b and "shepherd-child done" in b for b in commands)
    assert commands[-1].strip() == "shepherd shutdown"


def test_every_command_of_the_guide_runs_as_written(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),  # exactly one live session: this one
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    }
    env.pop("SHEPHERD_SESSION", None)
    serve: subprocess.Popen[str] | None = None
    printed: list[str] = []
    arrived = threading.Condition()

    def read(stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with arrived:
                printed.append(line)
                arrived.notify_all()

    reader: threading.Thread | None = None
    try:
        for block in blocks(GUIDE, "sh"):
            if block.startswith("shepherd serve"):
                serve = subprocess.Popen(
                    ["bash", "-c", f"exec {block.strip()}"],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
                reader = threading.Thread(target=read, args=(serve.stdout,), daemon=True)
                reader.start()
                with arrived:
                    started = arrived.wait_for(lambda: "directory " in "".join(printed), 120)
                assert started, "".join(printed)
                continue
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            assert done.returncode == 0, (block, done.stdout, done.stderr)
            if "shepherd wait" in block:
                assert " completed (rc 0) " in done.stdout, done.stdout
            if block.strip() == "shepherd shutdown":
                assert serve is not None
                assert serve.wait(timeout=120) == 0, "".join(printed)
        assert serve is not None and serve.returncode is not None, "no shutdown ended serve"
    finally:
        if serve is not None and serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(timeout=30)
        if reader is not None:
            reader.join(timeout=5)
        if serve is not None and serve.stdout is not None:
            serve.stdout.close()
