"""Batches: one hand-off per receiving pass, acknowledged once handled; a batch partly refused;
a crash between the hand-off and the acknowledgement (a real process killed at the
``mailbox.before_ack`` crash point)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX, DeliveryFailed, NotHandled, Refusals
from actors.transports.mailbox.drain import BATCH_MAX
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import ForbiddenSender, InvalidArgument
from protocol.wire.envelopes import AnyEnvelope, MessageEnvelope, encode_envelope

from .conftest import (
    AGENT,
    OTHER_AGENT,
    WAIT_S,
    MailboxFactory,
    Rejections,
    file_name,
    listing,
    message,
    plant,
)

REPO = str(Path(__file__).resolve().parents[2])


class Batches:
    """A batch handler that records each call's envelopes; ``refuse`` names the message ids it
    refuses (with ``why``), ``raise_on`` a content that makes the whole call raise."""

    def __init__(self, refuse: set[str] | None = None, raise_on: str | None = None) -> None:
        self.calls: list[list[AnyEnvelope]] = []
        self.refuse = refuse or set()
        self.raise_on = raise_on
        self._cond = threading.Condition()

    def __call__(self, envelopes: Sequence[AnyEnvelope]) -> Refusals | None:
        with self._cond:
            self.calls.append(list(envelopes))
            self._cond.notify_all()
        if self.raise_on is not None and any(
            getattr(e, "content", None) == self.raise_on for e in envelopes
        ):
            raise RuntimeError("the session is gone")
        refused = {
            e.message_id: InvalidArgument("refused by the handler")
            for e in envelopes
            if e.message_id in self.refuse
        }
        return refused or None

    @property
    def handed(self) -> list[str]:
        """Every message id handed over, in order, repeats kept."""
        with self._cond:
            return [e.message_id for call in self.calls for e in call]


def _validator(inbox: str, envelope: AnyEnvelope) -> None:
    if envelope.sender_id != AGENT:
        raise ForbiddenSender(f"unknown sender {envelope.sender_id!r}")


def _plant_all(mailbox: Mailbox, envelopes: list[MessageEnvelope]) -> list[str]:
    """Put ``envelopes`` into the parent inbox's new/ before anyone reads it (one pass)."""
    names = []
    for stamp, envelope in enumerate(envelopes, start=1):
        name = file_name(envelope.message_id, stamp)
        plant(mailbox, PARENT_INBOX, name, encode_envelope(envelope))
        names.append(name)
    return names


def _reasons(mailbox: Mailbox) -> dict[str, dict]:  # type: ignore[type-arg]
    """message id -> its quarantine reason."""
    folder = mailbox.root / "quarantine"
    names = [n for n in listing(folder) if n.endswith(".reason")]
    reasons = [json.loads((folder / n).read_text()) for n in names]
    return {r["message_id"]: r for r in reasons}


def test_one_pass_is_one_hand_off_in_name_order_then_acknowledged(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox()
    mailbox.ensure_inbox(PARENT_INBOX)
    sent = [message(session_id, content=str(i)) for i in range(40)]
    names = _plant_all(mailbox, sent)
    batches = Batches()
    mailbox.subscribe_batch(PARENT_INBOX, batches)
    assert mailbox.wait_drained(WAIT_S)
    assert len(batches.calls) == 1
    assert batches.handed == [e.message_id for e in sent]
    assert all(e.capability == "" for e in batches.calls[0])
    box = mailbox.inbox_path(PARENT_INBOX)
    assert listing(box / "new") == []
    assert listing(box / "cur") == names
    assert mailbox.stats().delivered == 40


def test_a_batch_is_bounded_by_batch_max(make_mailbox: MailboxFactory, session_id: str) -> None:
    mailbox = make_mailbox()
    mailbox.ensure_inbox(PARENT_INBOX)
    sent = [message(session_id, content=str(i)) for i in range(2 * BATCH_MAX + 7)]
    _plant_all(mailbox, sent)
    batches = Batches()
    subscription = mailbox.subscribe_batch(PARENT_INBOX, batches)
    assert mailbox.wait_drained(WAIT_S)
    assert [len(call) for call in batches.calls] == [BATCH_MAX, BATCH_MAX, 7]
    assert batches.handed == [e.message_id for e in sent]
    subscription.cancel()
    _plant_all(mailbox, [message(session_id) for _ in range(7)])
    small = Batches()
    mailbox.subscribe_batch(PARENT_INBOX, small, batch_max=3)
    assert mailbox.wait_drained(WAIT_S)
    assert [len(call) for call in small.calls] == [3, 3, 1]


@pytest.mark.parametrize("batch_max", [0, -1, BATCH_MAX + 1, 10**9])
def test_batch_max_out_of_bounds_is_refused_naming_the_bound(
    make_mailbox: MailboxFactory, batch_max: int
) -> None:
    mailbox = make_mailbox()
    mailbox.ensure_inbox(PARENT_INBOX)
    with pytest.raises(InvalidArgument, match=f"batch_max must be 1..{BATCH_MAX}"):
        mailbox.subscribe_batch(PARENT_INBOX, Batches(), batch_max=batch_max)


def test_a_batch_partly_refused_hands_the_accepted_once_and_quarantines_the_rest_with_reasons(
    make_mailbox: MailboxFactory, session_id: str, rejections: Rejections
) -> None:
    """In one pass: a forgery (refused by the validator, before the batch), garbage, an
    envelope the handler refuses, and good ones. The good ones are handed over once and
    acknowledged; each refused one is quarantined with its reason; only the sender the validator
    proved is told it was refused as authenticated."""
    mailbox = make_mailbox(validate=_validator, on_reject=rejections)
    mailbox.ensure_inbox(PARENT_INBOX)
    good = [message(session_id, content=f"good {i}") for i in range(4)]
    forged = message(session_id, sender_id=OTHER_AGENT, content="forged")
    refused = message(session_id, content="refused")
    names = _plant_all(mailbox, [good[0], forged, good[1], refused, good[2], good[3]])
    plant(mailbox, PARENT_INBOX, file_name(message(session_id).message_id, 99), b"{not json")
    batches = Batches(refuse={refused.message_id})
    mailbox.subscribe_batch(PARENT_INBOX, batches)
    assert mailbox.wait_drained(WAIT_S)
    assert len(batches.calls) == 1
    in_order = [good[0], good[1], refused, good[2], good[3]]
    assert batches.handed == [e.message_id for e in in_order]
    box = mailbox.inbox_path(PARENT_INBOX)
    assert listing(box / "new") == []
    assert listing(box / "cur") == [names[i] for i in (0, 2, 4, 5)]
    reasons = _reasons(mailbox)
    assert reasons[forged.message_id]["code"] == "forbidden_sender"
    assert reasons[refused.message_id]["code"] == "invalid_argument"
    assert reasons[refused.message_id]["message"] == "refused by the handler"
    assert len(listing(mailbox.root / "quarantine")) == 6  # 3 files, 3 reasons
    rejected = rejections.wait_for(3)
    told = {
        (env.message_id if env else None): authenticated
        for (_, env, _), authenticated in zip(rejected, rejections.authenticated, strict=True)
    }
    assert told == {forged.message_id: False, refused.message_id: True, None: False}
    # handed over once: a later pass (and the same files planted again) hands over nothing new
    _plant_all(mailbox, [good[0], good[3]])
    assert mailbox.wait_drained(WAIT_S)
    assert sorted(batches.handed) == sorted(e.message_id for e in [*good, refused])
    assert mailbox.stats().duplicates == 2


def test_a_handler_that_raises_refuses_its_whole_batch_and_the_next_batch_goes_on(
    make_mailbox: MailboxFactory, session_id: str, rejections: Rejections
) -> None:
    mailbox = make_mailbox(on_reject=rejections)
    mailbox.ensure_inbox(PARENT_INBOX)
    first = [message(session_id, content="boom"), message(session_id, content="with it")]
    _plant_all(mailbox, first)
    batches = Batches(raise_on="boom")
    mailbox.subscribe_batch(PARENT_INBOX, batches)
    assert mailbox.wait_drained(WAIT_S)
    reasons = _reasons(mailbox)
    assert {reasons[e.message_id]["code"] for e in first} == {DeliveryFailed.code}
    assert "the session is gone" in reasons[first[0].message_id]["message"]
    assert rejections.authenticated == [True, True]
    later = message(session_id, content="later")
    mailbox.publish(PARENT_INBOX, later)
    assert mailbox.wait_drained(WAIT_S)
    assert batches.handed[-1] == later.message_id
    assert listing(mailbox.inbox_path(PARENT_INBOX) / "new") == []


class Stopped(Batches):
    """A session that stopped deciding: it takes nothing (``NotHandled``)."""

    def __call__(self, envelopes: Sequence[AnyEnvelope]) -> Refusals | None:
        super().__call__(envelopes)
        raise NotHandled("the session stopped: its journal could not be written")

    def wait_for(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.handed) >= count, timeout=WAIT_S)


def test_a_batch_the_session_did_not_take_stays_for_the_next_parent_unquarantined(
    make_mailbox: MailboxFactory, session_id: str, rejections: Rejections
) -> None:
    mailbox = make_mailbox(on_reject=rejections)
    mailbox.ensure_inbox(PARENT_INBOX)
    sent = [message(session_id, content=f"kept {i}") for i in range(3)]
    names = _plant_all(mailbox, sent)
    stopped = Stopped()
    mailbox.subscribe_batch(PARENT_INBOX, stopped)
    assert stopped.wait_for(3)
    box = mailbox.inbox_path(PARENT_INBOX)
    assert listing(box / "new") == names  # neither acknowledged nor quarantined
    assert _reasons(mailbox) == {} and rejections.authenticated == []
    mailbox.close()
    # the parent started next: a receiver on the same mailbox takes them, once each
    again = make_mailbox(open=True)
    batches = Batches()
    again.subscribe_batch(PARENT_INBOX, batches)
    assert again.wait_drained(WAIT_S)
    assert batches.handed == [e.message_id for e in sent]
    assert listing(box / "new") == [] and listing(box / "cur") == names


def test_a_repeat_inside_one_pass_is_handed_over_once(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    mailbox = make_mailbox()
    mailbox.ensure_inbox(PARENT_INBOX)
    once = message(session_id, content="once")
    other = message(session_id, content="other")
    _plant_all(mailbox, [once, other, once])
    batches = Batches()
    mailbox.subscribe_batch(PARENT_INBOX, batches)
    assert mailbox.wait_drained(WAIT_S)
    assert batches.handed == [once.message_id, other.message_id]
    assert mailbox.stats().duplicates == 1
    assert listing(mailbox.inbox_path(PARENT_INBOX) / "new") == []


def test_a_repeat_of_a_refused_envelope_in_the_same_pass_gets_its_own_chance(
    make_mailbox: MailboxFactory, session_id: str
) -> None:
    """The first copy is refused: the repeat is not a duplicate of anything handled."""
    mailbox = make_mailbox()
    mailbox.ensure_inbox(PARENT_INBOX)
    twice = message(session_id, content="twice")
    _plant_all(mailbox, [twice, twice])
    batches = Batches(refuse={twice.message_id})
    mailbox.subscribe_batch(PARENT_INBOX, batches)
    assert mailbox.wait_drained(WAIT_S)
    assert batches.handed == [twice.message_id, twice.message_id]
    assert mailbox.stats().duplicates == 0


# ---------------------------------------------------------------------- a crash between them

READER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from actors.transports.mailbox.mailbox import Mailbox

    journal = open({journal!r}, "a")

    def handle(envelopes):
        # the receiving side's own record, as the parent journals what it handled
        for envelope in envelopes:
            journal.write(envelope.message_id + "\\n")
        journal.flush()
        os.fsync(journal.fileno())

    def validate(inbox, envelope):
        if envelope.sender_id != {agent!r}:
            raise __import__("protocol.core.errors").errors.ForbiddenSender("unknown sender")

    mailbox = Mailbox.open({root!r}, {session!r}, validate=validate)
    mailbox.subscribe_batch("parent", handle)
    mailbox.wait_drained(60)
    mailbox.close()
    sys.exit(0)
    """
)


def test_a_crash_between_the_hand_off_and_the_acknowledgement_hands_over_again_and_loses_nothing(
    make_mailbox: MailboxFactory, session_id: str, root: Path, tmp_path: Path
) -> None:
    """A reader process is killed (SIGKILL) at ``mailbox.before_ack``: its batch was handled
    (journaled) and none of its files acknowledged. Every accepted file is still in new/; the
    next reader hands them over again, and the record of what was handled drops the repeats:
    each envelope handled exactly once, nothing lost. The forgery was quarantined before the
    hand-off, so the crash does not bring it back."""
    parent = make_mailbox()
    parent.ensure_inbox(PARENT_INBOX)
    good = [message(session_id, content=str(i)) for i in range(5)]
    forged = message(session_id, sender_id=OTHER_AGENT, content="forged")
    names = _plant_all(parent, [*good[:2], forged, *good[2:]])
    journal = tmp_path / "handled.txt"
    code = READER.format(
        repo=REPO, root=str(root), session=session_id, agent=AGENT, journal=str(journal)
    )
    env = {**os.environ, "SHEPHERD_CRASH_AT": "mailbox.before_ack"}
    reader = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, timeout=120, check=False
    )
    assert reader.returncode == -signal.SIGKILL, reader.stderr.decode()[-2000:]
    box = parent.inbox_path(PARENT_INBOX)
    handled = journal.read_text().split()
    assert handled == [e.message_id for e in good]  # handled, all in one batch
    assert listing(box / "new") == [n for i, n in enumerate(names) if i != 2]  # none acked
    assert listing(box / "cur") == []
    assert forged.message_id in _reasons(parent)

    # the restart: the same files again, the record drops what it already handled
    seen = set(handled)
    again: list[str] = []

    def handle(envelopes: Sequence[AnyEnvelope]) -> None:
        for envelope in envelopes:
            again.append(envelope.message_id)
            if envelope.message_id not in seen:
                seen.add(envelope.message_id)
                handled.append(envelope.message_id)

    parent.subscribe_batch(PARENT_INBOX, handle)
    assert parent.wait_drained(WAIT_S)
    assert again == [e.message_id for e in good]  # handed over again: never lost
    assert handled == [e.message_id for e in good]  # and handled once
    assert listing(box / "new") == []
    assert listing(box / "cur") == [n for i, n in enumerate(names) if i != 2]


def test_a_crash_before_the_hand_off_returns_loses_nothing(
    make_mailbox: MailboxFactory, session_id: str, root: Path, tmp_path: Path
) -> None:
    """A reader killed inside its handler, before it recorded anything: every file stays in
    new/ and the next reader gets all of them."""
    parent = make_mailbox()
    parent.ensure_inbox(PARENT_INBOX)
    good = [message(session_id, content=str(i)) for i in range(3)]
    _plant_all(parent, good)
    code = READER.format(
        repo=REPO, root=str(root), session=session_id, agent=AGENT, journal=os.devnull
    ).replace(
        "def handle(envelopes):",
        "def handle(envelopes):\n    os.kill(os.getpid(), 9)",
    )
    reader = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=120, check=False
    )
    assert reader.returncode == -signal.SIGKILL, reader.stderr.decode()[-2000:]
    batches = Batches()
    parent.subscribe_batch(PARENT_INBOX, batches)
    assert parent.wait_drained(WAIT_S)
    assert batches.handed == [e.message_id for e in good]
