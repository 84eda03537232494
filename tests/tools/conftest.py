"""A real session for the tool and MCP tests, with all state under the test's tmp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor


class Running:
    def __init__(self, supervisor: Supervisor, sink: CollectingSink, root: Path) -> None:
        self.supervisor = supervisor
        self.sink = sink
        self.root = root


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing touches the user's home: live-session pointers go under the tmp dir."""
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    return home


@pytest.fixture
def running(tmp_path: Path, state_home: Path) -> Iterator[Running]:
    sink = CollectingSink()
    sup = Supervisor(tmp_path / "session", sinks=[sink], mailbox_root=tmp_path / "mailbox")
    try:
        yield Running(sup, sink, tmp_path)
    finally:
        sup.shutdown()
