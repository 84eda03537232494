"""A child's mailbox keeps the session's limits, not the defaults: the launcher hands the
session's settings to each bridge (``SHEPHERD_SETTINGS``), and a malformed value is a named
error."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from actors.child.env import ENV_SETTINGS, child_env_from
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.core.errors import InvalidArgument
from protocol.core.ids import IdKind
from protocol.records.settings import Settings
from tests.child.conftest import new_id

pytestmark = pytest.mark.processes

DONE = {
    "steps": [
        {"await": "task"},
        {"done": {"status": "completed", "summary": "read it"}},
        {"await": "any"},
    ]
}


def test_a_task_larger_than_the_default_limit_reaches_the_child(tmp_path: Path) -> None:
    big = "x" * (100 * 1024)  # over the 64 KiB default, under this session's 256 KiB
    settings = Settings(max_envelope_bytes=256 * 1024)
    sink = CollectingSink()
    sup = Supervisor(
        tmp_path / "session", settings=settings, sinks=[sink], mailbox_root=tmp_path / "mailbox"
    )
    try:
        script = tmp_path / "done.json"
        script.write_text(json.dumps(DONE))
        s = sup.session
        s.spawn("reader", script=str(script), cwd=str(tmp_path))
        task = s.delegate("reader", big)
        done = s.wait([task.task_id], timeout_s=60)
        assert [(r.status, r.text) for r in done.completed] == [("completed", "read it")]
        child_quarantine = list((tmp_path / "mailbox" / "quarantine").glob("*.reason"))
        assert child_quarantine == []
    finally:
        sup.shutdown()


def _environ(**extra: str) -> dict[str, str]:
    return {
        "SHEPHERD_SESSION_ID": new_id(IdKind.SESSION),
        "SHEPHERD_AGENT_ID": new_id(IdKind.AGENT),
        "SHEPHERD_MAILBOX": "/nonexistent",
        "SHEPHERD_CAPABILITY": "c" * 32,
        **extra,
    }


def test_the_child_reads_the_session_settings_from_its_environment() -> None:
    settings = Settings(max_envelope_bytes=1234, max_queue_depth=7)
    raw = msgspec.json.encode(settings).decode()
    env = child_env_from(_environ(**{ENV_SETTINGS: raw}), bridge=False)
    assert env.settings == settings
    assert child_env_from(_environ(), bridge=False).settings == Settings()


@pytest.mark.parametrize("raw", ["{", '{"max_queue_depth": "many"}', '{"bogus": 1}', "[" * 5000])
def test_malformed_settings_in_the_environment_are_a_named_error(raw: str) -> None:
    with pytest.raises(InvalidArgument, match=ENV_SETTINGS):
        child_env_from(_environ(**{ENV_SETTINGS: raw}), bridge=False)
