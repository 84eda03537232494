"""Closing a sandboxed bridge started by a fake parent (tests/child's), as a parent does."""

from __future__ import annotations

import tempfile
from pathlib import Path

from actors.child import sandbox_host
from protocol.wire.envelopes import ControlEnvelope
from tests.child.conftest import FakeParent


def closed_clean(parent: FakeParent) -> None:
    """Close the bridge as a parent does; its sandbox's pids group and socket are gone with it
    (the bridge's own clean-up: a fake parent removes nothing)."""
    bridge = parent.bridges[-1]
    name = sandbox_host.leftover_name(parent.agent_id, bridge.proc.pid)
    base = sandbox_host.pids_base()
    assert base is not None and (base / name).is_dir()
    parent.send(ControlEnvelope(**parent.base(), action="close"))
    assert bridge.wait() == 0
    assert not (base / name).exists()
    assert not (Path(tempfile.gettempdir()) / name).exists()
