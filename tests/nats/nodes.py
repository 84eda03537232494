"""Helpers of the `shepherd node` tests: a node process, a `serve --transport` session, spawns
placed on nodes (the tests: test_node.py, test_node_refusals.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nats.test_serve import AGENT
from tests.processes.conftest import DIE_WITH_PYTEST, Serve, cli

WAIT_ANY = json.dumps({"steps": [{"await": "any"}]})


class Node:
    """A `shepherd node` process (in its own process group, as on a host of its own)."""

    def __init__(self, url: str, name: str, root: Path, *extra: str, read: bool = True) -> None:
        """``read=False``: returns at once; :meth:`read_first` then waits for its first line."""
        self.name, self.root = name, root
        argv = ["node", "--transport", url, "--name", name, "--dir", str(root), "--json", *extra]
        self.proc = subprocess.Popen(
            [*DIE_WITH_PYTEST, sys.executable, "-m", "actors.surfaces.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.first: dict[str, Any] = {}
        self.ready: dict[str, Any] | None = None
        if read:
            self.read_first()

    def read_first(self) -> None:
        """Its first line: the ready line, or the error when it refused to start."""
        assert self.proc.stdout is not None
        self.first = json.loads(self.proc.stdout.readline() or "{}")
        self.ready = self.first.get("node")

    def stop(self) -> str:
        """Stop it; what it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=30)  # reads the rest and closes the pipes
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
        return err or ""


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


@pytest.fixture
def start_node(nats_url: str, tmp_path: Path) -> Iterator[Any]:
    started: list[Node] = []

    def start(name: str) -> Node:
        node = Node(nats_url, name, tmp_path / f"host-{name}")
        assert node.ready is not None, node.proc.communicate(timeout=30)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


def settings_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config" / "shepherd" / "config.toml"  # XDG_CONFIG_HOME (isolated_state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def serve_session(tmp_path: Path, url: str | None) -> Serve:
    """``serve`` over the servers ``url`` names (``--transport``), or on its file mailbox."""
    extra = ("--transport", url) if url is not None else ()
    server = Serve(tmp_path / "session", dict(os.environ), *extra)
    assert server.wait_for(lambda lines: any("session" in x for x in lines))
    return server


@pytest.fixture
def serve(tmp_path: Path, nats_url: str) -> Iterator[Serve]:
    server = serve_session(tmp_path, nats_url)
    try:
        yield server
    finally:
        server.stop()


def spawn_command(tmp_path: Path, name: str, node: str) -> dict[str, Any]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    cmd = f"NAME={name} {shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    session = tmp_path / "session"
    _, spawned = cli(
        "spawn", name, "--adapter", "command", "--cmd", cmd, "--node", node, session=session
    )
    return spawned  # type: ignore[no-any-return]


def spawn_waiting(tmp_path: Path, name: str, node: str) -> dict[str, Any]:
    script = tmp_path / "wait.json"
    script.write_text(WAIT_ANY)
    _, spawned = cli(
        "spawn", name, "--script", str(script), "--node", node, session=tmp_path / "session"
    )
    return spawned  # type: ignore[no-any-return]


def rows(tmp_path: Path) -> dict[str, dict[str, Any]]:
    _, status = cli("status", session=tmp_path / "session")
    return {a["name"]: a for a in status["agents"]}


def failed_with(serve: Serve, task_id: str, words: str) -> Any:
    def found(lines: list[dict[str, Any]]) -> bool:
        return any(
            r["task_id"] == task_id and r["status"] == "failed" and words in (r["error"] or "")
            for x in lines
            if x.get("kind") == "task_completion"
            for r in x["results"]
        )

    return found
