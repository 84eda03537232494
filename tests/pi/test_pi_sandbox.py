"""Pi in a sandbox (``spawn --sandbox``): the real ``shepherd-child run`` bridge against a fake
parent starts the real Pi inside bubblewrap; Pi's tools run there (a write outside its
directory fails, its process namespace is its own) and its ``shepherd_done`` reaches the
parent through the sandbox's socket. Pi reaches its model over the network, so the sandbox has
``sandbox_net``."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from actors.child.scripted_model import ScriptedModel, ToolCall, models_json
from protocol.wire.envelopes import RuntimeEnvelope, TaskDoneEnvelope
from tests.child.conftest import FakeParent
from tests.sandbox.closing import closed_clean

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]


def test_pi_runs_sandboxed_its_tools_are_held_and_its_done_reaches_the_parent(
    parent: FakeParent, pi_bin: Path, model: ScriptedModel
) -> None:
    outside = Path("/var/tmp") / f"shepherd-pi-probe-{secrets.token_hex(6)}"
    probe = f"touch {outside}; echo rc=$?; tr '\\0' ' ' < /proc/1/cmdline; echo; echo $HOME"
    model.add_steps(
        ToolCall("bash", {"command": probe}),
        ToolCall("shepherd_done", {"status": "completed", "summary": "probed"}),
    )
    models = parent.tmp_path / "models.json"
    models.write_text(json.dumps(models_json(model.base_url)))
    options = {"pi": str(pi_bin), "models_json": str(models), "sandbox": True}
    parent.start_bridge("pi-rpc", {**options, "sandbox_net": True})
    parent.wait_event("ready")
    parent.delegate("Probe the sandbox, then finish.")
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.status, done.summary) == ("completed", "probed")
    results = [
        e
        for e in parent.snapshot()
        if isinstance(e, RuntimeEnvelope) and e.event == "tool_result" and e.tool == "bash"
    ]
    output = results[0].output or ""
    assert "rc=1" in output, output  # read-only outside its directory
    lines = output.splitlines()
    assert any("bwrap --unshare" in line for line in lines), output  # pid 1: the sandbox's
    assert any(line.endswith("/home") for line in lines), output  # its own home
    assert not outside.exists()
    closed_clean(parent)
