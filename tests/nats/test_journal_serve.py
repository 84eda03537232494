"""`serve --journal nats`: the session's journal and record of delivery on the NATS servers, so
that a parent SIGKILLed on one host is resumed on another (`serve --resume SESSION_ID` in a
directory and a state of that host) with every result, handing no notification over twice.
Real `nats-server`, real `serve` processes, a real command agent; nothing sleeps."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from actors.transports.nats.server import NatsServer, free_port
from protocol.core.errors import InvalidArgument, InvalidHandle, SessionUnavailable
from protocol.core.ids import IdKind, make_id
from tests.nats.conftest import OVER_A_CLUSTER
from tests.nats.test_serve import _err, _notifications, _read_until, _spawn
from tests.processes.conftest import Serve, cli

#: real servers and processes, on a machine that may be busy: waits on events, with ceilings
pytestmark = [pytest.mark.processes, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _isolated(isolated_state: Path) -> Path:
    return isolated_state


def _streams(url: str) -> set[str]:
    async def names() -> set[str]:
        import nats

        nc = await nats.connect(url)
        try:
            return {
                s.config.name
                for s in await nc.jetstream().streams_info()
                if s.config.name is not None  # a stream always has one
            }
        finally:
            await nc.close()

    return asyncio.run(names())


def _completed(notes: list[dict[str, Any]]) -> list[str]:
    return [r["task_id"] for n in notes if n["kind"] == "task_completion" for r in n["results"]]


def _started(server: Serve) -> Serve:
    assert server.wait_for(lambda lines: any("session" in x for x in lines)), _err(server)
    return server


@OVER_A_CLUSTER
def test_a_parent_killed_on_one_host_resumes_on_another_with_every_result(
    nats_url: str, tmp_path: Path
) -> None:
    """Over a cluster of three: the records are replicated streams (R3)."""
    url = nats_url
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    session_a = host_a / "session"
    first = _started(Serve(session_a, dict(os.environ), "--transport", url, "--journal", "nats"))
    info = json.loads((session_a / "session.json").read_text())
    session_id = info["session_id"]
    try:
        assert info["records"] == "nats"
        _spawn(tmp_path, session_a, "alpha")
        _, early = cli("delegate", "alpha", "MARK-DONE", session=session_a)
        _, watched = cli("watch", early["task_id"], session=session_a)
        # settled before the watch arrived: its answer carries the result, nothing is shown
        assert any(r["task_id"] == early["task_id"] for r in watched["completed"]) or (
            first.wait_for(
                lambda lines: (
                    early["task_id"] in json.dumps(lines)
                    and any(x.get("kind") == "task_completion" for x in lines)
                )
            )
        ), "the first task's completion was never shown"
        fifo = tmp_path / "release"
        _, late = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session_a)
        cli("watch", late["task_id"], session=session_a)
        _read_until(session_a, "alpha", "BLOCKED")
    finally:
        first.stop(signal.SIGKILL)
    assert not (session_a / "journal.jsonl").exists(), "the journal belongs on the servers"

    # another host: its own state directory and session directory, nothing of host A's
    env_b = dict(os.environ, XDG_STATE_HOME=str(host_b / "state"))
    session_b = host_b / "session"
    argv = ["--transport", url, "--journal", "nats", "--resume", session_id]
    second = _started(Serve(session_b, env_b, *argv))
    try:
        assert json.loads((session_b / "session.json").read_text())["session_id"] == session_id
        _, done_early = cli("wait", early["task_id"], "--timeout", "5", session=session_b)
        (result,) = done_early["completed"]
        assert (result["status"], result["text"]) == ("completed", "done by alpha")
        with open(fifo, "w"):
            pass  # the agent's `done` reaches the resumed parent through the same servers
        _, done_late = cli("wait", late["task_id"], "--timeout", "90", session=session_b)
        assert done_late["completed"][0]["text"] == "done by alpha"
        assert second.wait_for(
            lambda lines: any(x.get("kind") == "task_completion" for x in lines), timeout=60
        )
        # host B shows the late completion once, and never the early one again
        assert _completed(_notifications(session_b)) == [late["task_id"]]
    finally:
        second.stop()


def _supervisor(tmp_path: Path, **kwargs: Any) -> Any:
    from actors.session.supervisor import Supervisor

    return Supervisor(tmp_path / "session", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"journal": "nats"}, "--journal nats needs --transport"),
        ({"journal": "disk"}, "--journal must be one of file, nats"),
        ({"journal": ""}, "--journal must be one of file, nats"),
        ({"resume": "ses_" + "0" * 16}, "--resume SESSION_ID resumes"),
        ({"resume": "ses_" + "0" * 16, "journal": "file"}, "--resume SESSION_ID resumes"),
    ],
)
def test_records_options_that_cannot_work_are_refused_naming_them(
    tmp_path: Path, kwargs: dict[str, Any], words: str
) -> None:
    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(InvalidArgument, match=words):
        _supervisor(tmp_path, **kwargs)
    assert not (tmp_path / "session" / "session.json").exists()
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == []


@pytest.mark.parametrize("hostile", ["", "ses_", "x" * 10_000, "../../etc", "tsk_0123456789abcdef"])
def test_a_resume_id_that_is_not_a_session_id_is_refused(tmp_path: Path, hostile: str) -> None:
    url = f"nats://127.0.0.1:{free_port()}"  # never reached: the id is checked first
    with pytest.raises(InvalidArgument, match="is not a session id"):
        _supervisor(tmp_path, transport=url, journal="nats", resume=hostile)


def test_resuming_a_session_the_servers_never_held_is_invalid_handle_and_creates_nothing(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    unknown = make_id(IdKind.SESSION, secrets.token_hex(8))
    before = _streams(nats_server.url)
    threads = {t.ident for t in threading.enumerate()}
    with pytest.raises(InvalidHandle, match=unknown):
        _supervisor(tmp_path, transport=nats_server.url, journal="nats", resume=unknown)
    assert _streams(nats_server.url) == before
    assert not (tmp_path / "session" / "session.json").exists()
    left = [t.name for t in threading.enumerate() if t.ident not in threads and t.is_alive()]
    assert left == []


def test_records_on_servers_out_of_reach_are_session_unavailable_leaving_nothing(
    tmp_path: Path,
) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    threads = {t.ident for t in threading.enumerate()}
    with pytest.raises(SessionUnavailable):
        _supervisor(tmp_path, transport=url, journal="nats")
    left = [t.name for t in threading.enumerate() if t.ident not in threads and t.is_alive()]
    assert left == []


def test_a_session_keeps_the_records_it_was_started_with(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    sup = _supervisor(tmp_path, transport=nats_server.url)  # records in its directory
    sup.shutdown()
    with pytest.raises(InvalidArgument, match="cannot move them"):
        _supervisor(tmp_path, journal="nats")
    with pytest.raises(InvalidArgument, match="holds session"):
        _supervisor(
            tmp_path,
            transport=nats_server.url,
            journal="nats",
            resume=make_id(IdKind.SESSION, "0" * 16),
        )


def test_a_notification_recorded_but_never_shown_before_a_kill_is_shown_after_a_restart(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """With the record of delivery on the servers, this host's ``notifications.jsonl`` is
    written after it. A parent killed between the two leaves a completion on record (so it is
    never delivered again) and missing from the file that ``shepherd notifications`` and MCP
    read: started again in the same directory, the parent shows it there, once, in the
    record's order. (The state such a kill leaves is made here by taking the line out of the
    file, with the parent gone.)"""
    session = tmp_path / "session"
    argv = ("--transport", nats_server.url, "--journal", "nats")
    first = _started(Serve(session, dict(os.environ), *argv))
    fifo = tmp_path / "release"
    try:
        _spawn(tmp_path, session, "alpha")
        _, task = cli("delegate", "alpha", f"BLOCK-UNTIL {fifo} MARK-DONE", session=session)
        _, watch = cli("watch", task["task_id"], session=session)
        assert watch["pending"] == [task["task_id"]]
        _read_until(session, "alpha", "BLOCKED")
        with open(fifo, "w"):
            pass
        assert first.wait_for(
            lambda _: _completed(_notifications(session)) == [task["task_id"]], timeout=60
        ), _err(first)
    finally:
        first.stop(signal.SIGKILL)
    view = session / "notifications.jsonl"
    lines = view.read_bytes().splitlines(keepends=True)
    view.write_bytes(b"".join(x for x in lines if b'"task_completion"' not in x))
    assert _completed(_notifications(session)) == []

    second = _started(Serve(session, dict(os.environ), *argv))
    try:
        notes = _notifications(session)
        assert notes[: len(lines)] == [json.loads(x) for x in lines]  # in the record's order
        assert _completed(notes) == [task["task_id"]]
        _, waited = cli("wait", task["task_id"], "--timeout", "5", session=session)
        assert waited["completed"][0]["task_id"] == task["task_id"]
        assert _completed(_notifications(session)) == [task["task_id"]]  # not delivered again
    finally:
        second.stop()


def test_a_restart_reads_the_record_of_delivery_on_the_servers_once(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent started again in its directory, with ``--recover``, needs three things of the
    record of delivery on the servers: what its view lacks, what was handed over, and what
    each open task's agent told. It fetches the stream once for all three."""
    from actors.transports.nats.journal import NOTIFICATIONS
    from actors.transports.nats.lines import NatsLines, lines_stream
    from protocol.records.notifications import Notice

    first = _supervisor(tmp_path, transport=nats_server.url, journal="nats")
    session_id = first.session_id
    note = Notice(created_at=1.0, code="x", text="on record, never shown")
    first.records.record(note)  # the parent died before its view showed it
    first.shutdown()
    fetched: list[str] = []
    read = NatsLines.read

    def counted(self: NatsLines, decode: Any) -> Any:
        fetched.append(self._stream)
        return read(self, decode)

    monkeypatch.setattr(NatsLines, "read", counted)
    again = _supervisor(tmp_path, transport=nats_server.url, journal="nats", recover=True)
    try:
        assert fetched.count(lines_stream(session_id, NOTIFICATIONS)) == 1
        view = tmp_path / "session" / "notifications.jsonl"
        shown = [json.loads(x) for x in view.read_text().splitlines()]
        assert [n["text"] for n in shown if n["kind"] == "notice"].count(note.text) == 1
    finally:
        again.shutdown()


def test_a_damaged_line_on_the_record_of_delivery_is_counted_and_the_rest_is_shown(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A line of the record on the servers that cannot be read is counted among the journal's
    problems (``status``), and the restart makes the view whole with the lines around it."""
    from actors.transports.nats.journal import NOTIFICATIONS
    from actors.transports.nats.lines import lines_subject
    from protocol.records.notifications import Notice
    from tests.nats.test_journal import _publish_raw

    first = _supervisor(tmp_path, transport=nats_server.url, journal="nats")
    session_id = first.session_id
    before, after = (Notice(created_at=1.0, code="x", text=t) for t in ("before", "after"))
    first.records.record(before)
    first.shutdown()
    subject = lines_subject(session_id, NOTIFICATIONS)
    asyncio.run(_publish_raw(nats_server.url, subject, b'{"kind": "notice", "bro\n'))
    again = _supervisor(tmp_path, transport=nats_server.url, journal="nats")
    try:
        again.records.record(after)
        again.shutdown()
        again = _supervisor(tmp_path, transport=nats_server.url, journal="nats")
        view = tmp_path / "session" / "notifications.jsonl"
        shown = [json.loads(x) for x in view.read_text().splitlines()]
        assert [n["text"] for n in shown if n["kind"] == "notice"][-2:] == ["before", "after"]
        assert len(again.records.delivered.problems) == 1
    finally:
        again.shutdown()
