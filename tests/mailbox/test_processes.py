"""A mailbox shared by real processes: a child publishes, the parent receives, and back."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox
from protocol.wire.envelopes import MessageEnvelope

from .conftest import AGENT, Collector, message

REPO = str(Path(__file__).resolve().parents[2])

CHILD = textwrap.dedent(
    """
    import secrets, sys, threading
    sys.path.insert(0, {repo!r})
    from actors.transports.mailbox.mailbox import Mailbox
    from protocol.wire.envelopes import MessageEnvelope
    from protocol.core.ids import IdKind, make_id

    def envelope(content):
        return MessageEnvelope(
            message_id=make_id(IdKind.MESSAGE, secrets.token_hex(8)),
            session_id={session!r}, sender_id={agent!r}, target_id="shepherd",
            created_at=0.0, content=content,
        )

    mailbox = Mailbox.open({root!r}, {session!r})
    got = threading.Event()

    def on_message(received):
        mailbox.publish("parent", envelope("pong: " + received.content))
        got.set()

    mailbox.subscribe({agent!r}, on_message)
    for i in range({count}):
        mailbox.publish("parent", envelope(str(i)))
    ok = got.wait(30)
    mailbox.close()
    sys.exit(0 if ok else 3)
    """
)


def test_a_child_process_publishes_to_the_parent_and_receives_from_it(
    parent: Mailbox, root: Path, session_id: str
) -> None:
    collector = Collector()
    parent.subscribe(PARENT_INBOX, collector)
    code = CHILD.format(repo=REPO, root=str(root), session=session_id, agent=AGENT, count=50)
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        collector.wait_for(50)
        assert collector.contents == [str(i) for i in range(50)]
        parent.publish(AGENT, message(session_id, target_id=AGENT, content="ping"))
        collector.wait_for(51)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr.decode()[-2000:]
    assert collector.contents[-1] == "pong: ping"
    assert all(isinstance(item, MessageEnvelope) for item in collector.items)
    assert all(item.sender_id == AGENT for item in collector.items)
