"""Fixtures for driving the real Pi agent (and a fake one) against the scripted model."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.child.pi.events import RuntimeEvent, map_event
from actors.child.pi.rpc import PiProcess
from actors.child.scripted_model import ScriptedModel, models_json

# the fake parent of a bridge under test (tests/child): the ``parent`` fixture here too
from tests.child.conftest import parent  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
INSTALL_PI = REPO / "scripts" / "install_pi.sh"


class EventLog:
    """Collects Pi events from the reader thread; tests wait on it (never sleep)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._events: list[dict[str, Any]] = []
        self.exit_codes: list[int] = []

    def __call__(self, event: dict[str, Any]) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def on_exit(self, returncode: int) -> None:
        with self._cond:
            self.exit_codes.append(returncode)
            self._cond.notify_all()

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._events)

    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.events]

    def runtime(self) -> list[RuntimeEvent]:
        return [r for r in map(map_event, self.events) if r is not None]

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0
    ) -> dict[str, Any]:
        """The first event (old or new) matching ``predicate``."""
        found: list[dict[str, Any]] = []

        def check() -> bool:
            found[:] = [e for e in self._events if predicate(e)][:1]
            return bool(found)

        with self._cond:
            if not self._cond.wait_for(check, timeout):
                raise TimeoutError(f"no matching Pi event within {timeout}s; saw {self.types()}")
        return found[0]

    def wait_type(self, kind: str, timeout: float = 60.0) -> dict[str, Any]:
        return self.wait_for(lambda e: e.get("type") == kind, timeout)

    def wait_exit(self, timeout: float = 60.0) -> int:
        with self._cond:
            if not self._cond.wait_for(lambda: bool(self.exit_codes), timeout):
                raise TimeoutError(f"Pi did not exit within {timeout}s")
            return self.exit_codes[0]


def tool_output_contains(text: str) -> Callable[[dict[str, Any]], bool]:
    """Matches a ``tool_execution_update`` whose partial output (not its args) has ``text``."""

    def match(event: dict[str, Any]) -> bool:
        if event.get("type") != "tool_execution_update":
            return False
        content = (event.get("partialResult") or {}).get("content") or []
        return any(text in str(part.get("text", "")) for part in content)

    return match


@pytest.fixture(scope="session")
def pi_bin() -> Path:
    """The real Pi binary, installed by the project's own script on first use."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail(
            "node and npm are required for the Pi tests (Node 20 or newer; "
            "scripts/install_pi.sh then installs Pi)"
        )
    result = subprocess.run(
        ["bash", str(INSTALL_PI)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip():
        pytest.fail(f"scripts/install_pi.sh failed ({result.returncode}):\n{result.stderr}")
    path = Path(result.stdout.strip().splitlines()[-1])
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        yield scripted


StartPi = Callable[..., tuple[PiProcess, EventLog]]


@pytest.fixture
def start_pi(pi_bin: Path, model: ScriptedModel, tmp_path: Path) -> Iterator[StartPi]:
    """Start a real Pi (RPC mode) against ``model``, wait until it answers; closed after."""
    started: list[PiProcess] = []

    def start(**kwargs: Any) -> tuple[PiProcess, EventLog]:
        log = EventLog()
        workdir = tmp_path / f"work{len(started)}"
        workdir.mkdir()
        kwargs.setdefault("models", models_json(model.base_url))
        kwargs.setdefault("cwd", workdir)
        pi = PiProcess(pi_bin, on_event=log, on_exit=log.on_exit, **kwargs)
        started.append(pi)
        pi.wait_ready(timeout=30.0)
        return pi, log

    yield start
    for pi in started:
        pi.close()


# the live scenarios' team (a real supervisor whose agents are real Pi processes), for every
# test here that asks for ``team``
from tests.pi.test_pi_live import team  # noqa: E402, F401
