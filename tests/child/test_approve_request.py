"""``shepherd-child approve-request`` against the fake parent: what it publishes, that it waits
past the receipt for the decision, that only the real decision (this request, the parent's,
with this agent's capability) ends it, and its bounds."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from protocol.calls.approvals import APPROVED, DENIED
from protocol.core.ids import PARENT_ID, IdKind
from protocol.wire.envelopes import MessageEnvelope, NoticeEnvelope

from .conftest import FakeParent, new_id

pytestmark = pytest.mark.processes


def _decision(parent: FakeParent, request_id: str, code: str, text: str, **kw: str) -> None:
    fields = {
        "message_id": new_id(IdKind.MESSAGE),
        "session_id": parent.session_id,
        "sender_id": PARENT_ID,
        "target_id": parent.agent_id,
        "created_at": time.time(),
        "capability": parent.capability,
        "code": code,
        "text": text,
        "ref_id": request_id,
        **kw,
    }
    # into the call's one-shot inbox, named by the request id
    parent.mailbox.publish(request_id, NoticeEnvelope(**fields))  # type: ignore[arg-type]


def _ask(parent: FakeParent, *args: str) -> tuple[list[subprocess.CompletedProcess[str]], str]:
    """Start the call on a thread; the request id once the parent has it."""
    done: list[subprocess.CompletedProcess[str]] = []
    thread = threading.Thread(
        target=lambda: done.append(parent.run_child("approve-request", "--json", *args)),
        daemon=True,
    )
    thread.start()
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    assert isinstance(sent, MessageEnvelope)
    assert sent.target_id == PARENT_ID and sent.expects_reply
    assert sent.reply_inbox == sent.message_id
    parent.threads = [*getattr(parent, "threads", []), thread]  # type: ignore[attr-defined]
    return done, sent.message_id


def _finished(parent: FakeParent, done: list[subprocess.CompletedProcess[str]]) -> None:
    for thread in parent.threads:  # type: ignore[attr-defined]
        thread.join(60)
    assert done, "the call did not end"


def test_it_waits_past_the_receipt_and_only_the_real_decision_ends_it(parent: FakeParent) -> None:
    done, request_id = _ask(parent, "--timeout", "600", "--", "git push: release")
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    assert isinstance(sent, MessageEnvelope) and sent.reply_timeout_s == 600.0
    assert sent.content == "git push: release"
    # hostile or stray: another request's decision, a forged one (wrong capability), another
    # code: none ends the call (the forged one is quarantined by the inbox's validator)
    _decision(parent, request_id, APPROVED, "not yours", ref_id=new_id(IdKind.MESSAGE))
    _decision(parent, request_id, APPROVED, "forged", capability="0" * 32)
    _decision(parent, request_id, "request_timed_out", "a question's notice")
    assert not done, done
    _decision(parent, request_id, DENIED, "frozen")
    _finished(parent, done)
    (run,) = done
    assert run.returncode == 1, run.stderr
    assert json.loads(run.stdout) == {
        "request_id": request_id,
        "approved": False,
        "answer": "frozen",
    }


def test_approved_exits_0_with_the_note_in_text_mode(parent: FakeParent) -> None:
    done: list[subprocess.CompletedProcess[str]] = []
    thread = threading.Thread(
        target=lambda: done.append(parent.run_child("approve-request", "--", "rm -rf build/")),
        daemon=True,
    )
    thread.start()
    _, sent = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    _decision(parent, sent.message_id, APPROVED, "only build/")
    thread.join(60)
    (run,) = done
    assert run.returncode == 0 and run.stdout.strip() == "only build/"
    assert not parent.mailbox.has_inbox(sent.message_id)


def test_a_text_too_big_for_an_envelope_is_limit_exceeded(parent: FakeParent) -> None:
    run = parent.run_child("approve-request", "--json", "--", "x" * 100_000)
    assert run.returncode == 2
    assert json.loads(run.stdout)["error"]["code"] == "limit_exceeded"
