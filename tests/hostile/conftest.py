"""A live session for the hostile-input tests: an in-process :class:`Supervisor` whose agents
are real ``shepherd-child`` processes, with every piece of state under the test's tmp dir.
The CLI and MCP are driven as real processes against it (``tests.processes.conftest.cli``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.records.settings import Settings
from tests.reliability.live import Story

from .canary import Canary

__all__ = ["Live", "live"]


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    """Every test here keeps its state out of the user's home (tests/conftest.py)."""
    return isolated_state


class Live:
    def __init__(self, root: Path, settings: Settings | None = None) -> None:
        self.root = root
        self.sink = CollectingSink()
        self.story = Story(timeout=30.0)  # the lifecycle lines, to wait on
        self.sup = Supervisor(
            root / "session",
            settings=settings,
            sinks=[self.sink],
            tap=self.story,
            mailbox_root=root / "mailbox",
        )
        self.session = root / "session"
        self.canary = Canary(self.sup, self.sink, root)

    def close(self) -> None:
        self.sup.shutdown()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    running = Live(tmp_path)
    try:
        yield running
    finally:
        running.close()
