"""What the parent's inbox received is handed to the broker and waited for: a broker slowed by
its records (an append waiting out an outage) is waited for past the ordinary ask timeout, and
one slower than the hand-over's ceiling leaves the envelope not taken (``NotHandled``: the
transport keeps it), never failed (which the transport would quarantine: a lost ``done``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from actors.records.journal import MemoryJournal
from actors.runtime.runtime import ThreadedRuntime
from actors.runtime.transport import InMemoryTransport, NotHandled
from actors.session import session as session_module
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.testing.simagent import SimLauncher
from protocol.core.ids import PARENT_ID, IdKind
from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TaskRecord
from protocol.scripted.script import parse_script
from protocol.wire.envelopes import TaskDoneEnvelope

QUIET = {"steps": [{"await": "task"}, {"await": "any"}]}


class HeldJournal(MemoryJournal):
    """Holds every write that settles a task until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def _hold(self, records: Sequence[msgspec.Struct]) -> None:
        if any(isinstance(r, TaskRecord) and r.terminal for r in records):
            self.entered.set()
            assert self.release.wait(60), "never released"

    def append(self, record: msgspec.Struct) -> None:
        self._hold([record])
        super().append(record)

    def append_many(self, records: Sequence[msgspec.Struct]) -> None:
        self._hold(records)
        super().append_many(records)


def _session(journal: HeldJournal, sink: CollectingSink) -> tuple[Session, Any, str, str]:
    runtime = ThreadedRuntime()
    transport = InMemoryTransport()
    launcher = SimLauncher(runtime, transport)
    session = Session(runtime, transport, launcher, sink=sink, journal=journal, sync_inbound=True)
    agent = session.spawn("worker", script=parse_script(QUIET))
    task = session.delegate(agent.agent_id, "finish it").task_id
    session.watch(task)
    # the agent's process starts on the runtime's threads, after spawn answered: wait for it
    started, deadline = threading.Event(), time.monotonic() + 60
    while "worker" not in launcher.agents and time.monotonic() < deadline:
        started.wait(0.01)  # a bounded poll of a condition another thread makes true
    capability = launcher.driver("worker").identity.capability
    done = TaskDoneEnvelope(
        message_id=runtime.ids.new(IdKind.MESSAGE),
        session_id=session.session_id,
        sender_id=agent.agent_id,
        target_id=PARENT_ID,
        created_at=time.time(),
        capability=capability,
        task_id=task,
        status="completed",
        summary="finished",
    )
    return session, done, agent.agent_id, task


def test_a_broker_slower_than_an_ask_is_waited_for_and_the_done_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_module, "ASK_TIMEOUT_S", 0.05)
    journal, sink = HeldJournal(), CollectingSink()
    session, done, _, task = _session(journal, sink)
    try:
        handing = threading.Thread(target=session._parent_inbox, args=(done,))
        handing.start()
        assert journal.entered.wait(30)
        handing.join(timeout=0.5)  # ten ask timeouts: the hand-over is still waiting
        assert handing.is_alive()
        journal.release.set()
        handing.join(timeout=30)
        assert not handing.is_alive()
        assert sink.wait_for(
            lambda items: any(isinstance(n, TaskCompletion) for n in items), timeout=30
        )
        result = session.result(task)
        assert result is not None and result.text == "finished"
    finally:
        journal.release.set()
        session.shutdown()


def test_a_broker_slower_than_the_ceiling_leaves_the_envelope_not_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_module, "INBOUND_CEILING_S", 0.2)
    journal, sink = HeldJournal(), CollectingSink()
    session, done, _, _ = _session(journal, sink)
    try:
        with pytest.raises(NotHandled, match=r"did not take it within 0\.2 s"):
            session._parent_inbox(done)  # what the transport calls for each envelope
    finally:
        journal.release.set()
        session.shutdown()
