"""The README's two set-up commands are what CI runs and what a newcomer types."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = _commands()
    assert len(commands) == 2, commands
    assert "shepherd demo" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert _commands()[1] in ci.splitlines()
    assert "5" in ci and "exit 1" in ci  # pytest's "no tests" exit code is a failure


# ---------------------------------------------------------------------- the walkthrough


def _walkthrough() -> tuple[str, list[str]]:
    """(shell 1's command, shell 2's commands): a heredoc is one command, comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Walkthrough: two shells", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```sh\n(.+?)\n```", section, re.S)[0]
    shell1, shell2 = block.split("# shell 2", 1)
    serve = next(x for x in shell1.splitlines() if x.startswith("shepherd serve"))
    commands: list[str] = []
    heredoc: list[str] | None = None
    for line in shell2.splitlines()[1:]:
        if heredoc is not None:
            heredoc.append(line)
            if line == "EOF":
                commands.append("\n".join(heredoc))
                heredoc = None
        elif line.startswith("cat >"):
            heredoc = [line]
        elif line.strip() and not line.lstrip().startswith("#"):
            commands.append(re.sub(r"\s+#.*$", "", line))
    return serve, commands


@pytest.mark.processes
def test_the_walkthrough_shows_what_it_says(tmp_path: Path) -> None:
    serve_line, commands = _walkthrough()
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),  # exactly one live session: this one
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    }
    env.pop("SHEPHERD_SESSION", None)
    serve_line = serve_line.replace("/tmp/demo-session", str(tmp_path / "demo-session"))
    # shell 1 also prints the session's lifecycle lines: the test waits for the scout to be
    # waiting before `status`, as a person typing does without knowing it (the commands
    # answer faster than the agents start)
    serve_line += " --verbose"
    shell1 = subprocess.Popen(
        ["bash", "-c", f"exec {serve_line}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    printed: list[str] = []
    arrived = threading.Condition()

    def read() -> None:
        assert shell1.stdout is not None
        for line in shell1.stdout:
            with arrived:
                printed.append(line)
                arrived.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def shell1_shows(text: str, timeout: float = 30) -> bool:
        with arrived:
            return arrived.wait_for(lambda: text in "".join(printed), timeout)

    try:
        assert shell1_shows("directory "), "serve did not start"
        outputs: dict[str, str] = {}
        task_id = ""
        for written in commands:
            command = written.replace("TASK_ID", task_id)
            if command.startswith("shepherd status"):
                assert shell1_shows(f"task {task_id} waiting", timeout=60), "".join(printed)
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            outputs[command.split("<<", 1)[0].strip()] = done.stdout
            if command.startswith("shepherd delegate scout"):
                task_id = done.stdout.split()[0]
                assert done.stdout.strip().endswith("delegated to scout")
            if command.startswith("shepherd watch"):
                assert "1 pending" in done.stdout, done.stdout
                assert not shell1_shows("call: shepherd_watch", timeout=0)
            if command.startswith("shepherd status"):
                assert "waiting for planner" in done.stdout, done.stdout
        assert shell1_shows("call: shepherd_watch"), "the completion never reached shell 1"
        assert shell1_shows("mapped src/core")
        notifications = outputs["shepherd notifications"]
        assert any(json.loads(x)["kind"] == "task_completion" for x in notifications.splitlines())
    finally:
        os.killpg(shell1.pid, signal.SIGTERM)
        shell1.wait(timeout=30)
        reader.join(timeout=5)
        assert shell1.stdout is not None
        shell1.stdout.close()
