"""Shared test options: how many simulation seeds to run, and replaying one seed.

``--sim-seeds N`` runs the seeded simulation tests over N seeds (default 200; CI uses the
default, a soak run uses more). ``--sim-seed S`` replays exactly seed S — every failing
simulation test prints that command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from loguru import logger

pytest_plugins = ["tests.serving"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seeds", type=int, default=200, help="seeds per simulation test")
    parser.addoption("--sim-seed", type=int, default=None, help="replay one simulation seed")


class SeedRunner:
    def __init__(self, config: pytest.Config, nodeid: str) -> None:
        replay = config.getoption("--sim-seed")
        count = config.getoption("--sim-seeds")
        self.seeds: list[int] = [replay] if replay is not None else list(range(count))
        self._nodeid = nodeid

    def run(self, scenario: Callable[[int], None], *, limit: int | None = None) -> int:
        """Run ``scenario(seed)`` for every seed; a failure names the seed and the replay."""
        seeds = self.seeds if limit is None else self.seeds[:limit]
        for seed in seeds:
            try:
                scenario(seed)
            except Exception as exc:
                raise AssertionError(
                    f"seed {seed} failed: {exc!r}\n"
                    f"replay: python -m pytest '{self._nodeid}' --sim-seed={seed}"
                ) from exc
        return len(seeds)


@pytest.fixture
def seeds(request: pytest.FixtureRequest) -> SeedRunner:
    return SeedRunner(request.config, request.node.nodeid)


@pytest.fixture
def enable_logs() -> Iterator[list[str]]:
    """Capture the project's log lines (loguru is off for library users by default)."""
    lines: list[str] = []
    logger.enable("actors")
    handler = logger.add(lines.append, level="DEBUG", format="{level} {message}")
    try:
        yield lines
    finally:
        logger.remove(handler)
        logger.disable("actors")


@pytest.fixture
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep live-session pointers and settings files out of the user's home (and no session
    named by the environment)."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    return state
