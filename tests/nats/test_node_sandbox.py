"""A sandboxed agent on a ``shepherd node``: the node checks the sandbox can be made there,
its bridge makes it, the agent's done reaches the parent, and what a bridge killed with
``SIGKILL`` left on the node's host is removed by the node once it has exited."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest

from actors.child import sandbox_host
from tests.nats.nodes import _isolated, rows, serve, start_node
from tests.processes.conftest import Serve, cli

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

__all__ = ["_isolated", "serve", "start_node"]  # fixtures used here


def test_a_sandboxed_agent_on_a_node_completes_and_its_leftovers_are_removed(
    serve: Serve, start_node: Any, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    start_node("n1")
    work = tmp_path / "work"
    work.mkdir()
    (work / "w.sh").write_text("shepherd-child done --status completed --summary 'on a node'\n")
    cli("spawn", "boxed", "--adapter", "command", "--cmd", "bash w.sh {message}", "--cwd",
        str(work), "--node", "n1", "--sandbox", session=session)  # fmt: skip
    _, task = cli("delegate", "boxed", "go", session=session)
    _, waited = cli("wait", task["task_id"], "--timeout", "90", session=session)
    assert waited["completed"][0]["text"] == "on a node", waited
    row = rows(tmp_path)["boxed"]
    assert row["node"] == "n1" and row["sandbox"]["pids"] == 512
    name = sandbox_host.leftover_name(row["agent_id"], row["pid"])
    base = sandbox_host.pids_base()
    assert base is not None and (base / name).is_dir()
    os.kill(row["pid"], signal.SIGKILL)
    assert serve.wait_for(lambda lines: any(x.get("code") == "agent_exited" for x in lines), 60), (
        serve.lines
    )
    assert not (base / name).exists()
    assert not (Path(tempfile.gettempdir()) / name).exists()
