"""An ACP agent in a sandbox (``spawn --sandbox``): the real bridge against a fake parent starts
the scripted ACP agent inside bubblewrap, without network; its shell steps run there (a write
outside its directory fails) and its ``shepherd-child done`` reaches the parent through the
sandbox's socket."""

from __future__ import annotations

import json
import secrets
import shlex
import sys
from pathlib import Path

import pytest

from protocol.wire.envelopes import TaskDoneEnvelope
from tests.child.conftest import FakeParent
from tests.sandbox.closing import closed_clean

pytestmark = [pytest.mark.timeout(90)]

AGENT = Path(__file__).with_name("scripted_agent.py")


def test_an_acp_agent_runs_sandboxed_and_its_done_reaches_the_parent(parent: FakeParent) -> None:
    outside = Path("/var/tmp") / f"shepherd-acp-probe-{secrets.token_hex(6)}"
    found = parent.tmp_path / "found.txt"
    probe = f"touch {outside}; echo rc=$? > {found}; tr '\\0' ' ' < /proc/1/cmdline >> {found}"
    done = [sys.executable, "-m", "actors.child.entry", "done", "--status", "completed"]
    turns = [[{"shell": ["bash", "-c", probe]}, {"shell": [*done, "--summary", "probed"]}]]
    script = parent.tmp_path / "agent.json"
    script.write_text(json.dumps(turns))
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT))} {shlex.quote(str(script))}"
    parent.start_bridge("acp", {"acp_cmd": cmd, "sandbox": True})
    parent.wait_event("output", text=lambda t: t and "acp agent ready" in t)
    parent.delegate("Probe the sandbox, then finish.")
    _, said = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(said, TaskDoneEnvelope)
    assert (said.status, said.summary) == ("completed", "probed")
    text = found.read_text()
    assert text.startswith("rc=1"), text
    assert "bwrap" in text, text
    assert not outside.exists()
    closed_clean(parent)
