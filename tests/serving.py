"""Fixtures for tests that start ``shepherd serve`` processes themselves (a kill -9 of the
parent, then ``serve --recover``): a private state directory, and the servers started, each
stopped at the end. Loaded for every test by the root conftest (``pytest_plugins``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes.conftest import Serve

__all__ = ["Servers"]


class Servers:
    """``shepherd serve`` processes in one private environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[Serve] = []

    def start(self, session: Path, *extra: str) -> Serve:
        """``serve --session-dir SESSION EXTRA...``, once it has said its session."""
        server = Serve(session, self.env, *extra)
        self.started.append(server)
        assert server.wait_for(lambda lines: any("session" in x for x in lines)), "no serve"
        return server

    def stop(self) -> None:
        for server in self.started:
            server.stop()


@pytest.fixture
def servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Servers]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    started = Servers(dict(os.environ))
    try:
        yield started
    finally:
        started.stop()
