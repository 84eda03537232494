"""A child bridge's way to the parent (actors/child/outbox.py) on virtual time: a full parent
inbox, or a session that cannot be reached for a moment (a NATS leader election), is retried on
the producers' schedule (no busy loop: attempts bounded), as the same envelopes in their order,
and they get through as soon as they can; an unreachable session is waited out for a bounded
time, then what was given up is told to the parent first once it can be reached again."""

from __future__ import annotations

import math
from typing import Any

from loguru import logger

from actors.child.outbox import ParentOutbox, until_reachable
from actors.runtime.clock import SystemClock, VirtualClock
from actors.transports.mailbox.backoff import FIRST_S, LONGEST_S, OUTAGE_FIRST_S, OUTAGE_LONGEST_S
from protocol.core.errors import (
    DiskFull,
    InboxFull,
    InvalidEnvelope,
    SessionUnavailable,
    Unreachable,
)

OUTAGE_S = 60.0


def _report(text: str) -> str:
    return f"NOT SENT: {text}"


class Envelope:
    """What the outbox needs of an envelope: a tag and a message id."""

    class __struct_config__:
        tag = "task_done"

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id

    def __repr__(self) -> str:
        return self.message_id


class FullInbox:
    """A mailbox whose parent inbox refuses every publish until ``room`` is set."""

    def __init__(self) -> None:
        self.attempts = 0
        self.room = False
        self.published: list[Any] = []

    def publish(self, inbox: str, envelope: Any) -> None:
        self.attempts += 1
        if not self.room:
            raise InboxFull("inbox 'parent' already holds 1000 unread envelopes (limit 1000)")
        self.published.append(envelope)


def test_a_full_parent_inbox_is_retried_a_bounded_number_of_times_then_drained_in_order() -> None:
    clock = VirtualClock()
    inbox = FullInbox()
    outbox = ParentOutbox(
        inbox,  # type: ignore[arg-type]
        clock,
        lambda fn: fn(),
        logger,
        give_up_s=OUTAGE_S,
        report=_report,  # type: ignore[arg-type]
    )
    envelopes = [f"envelope {i}" for i in range(5)]
    for envelope in envelopes:
        outbox.publish(envelope)  # type: ignore[arg-type]
    start, horizon = clock.now(), 10.0
    while clock.fire_next(start + horizon):
        pass
    # one attempt per retry, never one per envelope waiting, and bounded by the schedule
    bound = 1 + math.log2(LONGEST_S / FIRST_S) + 1 + 2 * horizon / LONGEST_S
    assert horizon / LONGEST_S <= inbox.attempts <= bound
    inbox.room = True
    clock.fire_next(clock.now() + LONGEST_S)  # the next retry comes within the longest wait
    assert inbox.published == envelopes


class Session:
    """A parent inbox behind a transport that fails as told: ``failure`` (an exception) is
    raised by every publish while set. Every attempt is recorded, with its message id."""

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.tried: list[str] = []
        self.published: list[Any] = []

    def publish(self, inbox: str, envelope: Any) -> None:
        self.tried.append(str(envelope))
        if self.failure is not None:
            raise self.failure
        self.published.append(envelope)


def _outbox(session: Session, clock: VirtualClock) -> ParentOutbox:
    return ParentOutbox(
        session,  # type: ignore[arg-type]
        clock,
        lambda fn: fn(),
        logger,
        give_up_s=OUTAGE_S,
        report=_report,  # type: ignore[arg-type]
    )


def test_a_leader_election_is_waited_out_and_the_same_envelopes_get_through_in_order() -> None:
    clock, session = VirtualClock(), Session()
    outbox = _outbox(session, clock)
    session.failure = Unreachable("NATS: NoStreamResponseError()")
    dones = [Envelope(f"m{i}") for i in range(3)]
    for done in dones:
        outbox.publish(done)  # type: ignore[arg-type]
    start = clock.now()
    while clock.fire_next(start + 5.0):  # an election of a few seconds
        pass
    assert session.published == [] and set(session.tried) == {"m0"}  # only the head, retried
    # on an outage's schedule, not a full inbox's: seconds pass, not milliseconds
    bound = 1 + math.log2(OUTAGE_LONGEST_S / OUTAGE_FIRST_S) + 1 + 2 * 5.0 / OUTAGE_LONGEST_S
    assert len(session.tried) <= bound
    session.failure = None
    clock.fire_next(clock.now() + OUTAGE_LONGEST_S)
    assert session.published == dones  # the same envelopes (ids), once each, in order


def test_an_outage_past_the_bound_gives_the_head_up_and_tells_the_parent_first() -> None:
    clock, session = VirtualClock(), Session()
    outbox = _outbox(session, clock)
    session.failure = Unreachable("no answer from the NATS servers within 5 s")
    first, second = Envelope("m1"), Envelope("m2")
    outbox.publish(first)  # type: ignore[arg-type]
    outbox.publish(second)  # type: ignore[arg-type]
    start = clock.now()
    while clock.fire_next(start + OUTAGE_S + 2 * OUTAGE_LONGEST_S):
        pass
    assert "m1" in session.tried and session.published == []
    session.failure = None  # the servers are back
    while clock.fire_next(clock.now() + OUTAGE_S + 2 * OUTAGE_LONGEST_S) and not session.published:
        pass
    # m1 waited past the bound and was given up; the parent hears of it before m2 arrives
    (report, *rest) = session.published
    assert report.startswith("NOT SENT: given up while the session could not be reached: ")
    assert "task_done m1" in report
    assert rest == [second]


def test_a_full_inbox_is_waited_for_without_a_bound() -> None:
    clock, session = VirtualClock(), Session()
    outbox = _outbox(session, clock)
    session.failure = InboxFull("inbox 'parent' already holds 1000 unread envelopes")
    outbox.publish(Envelope("m1"))  # type: ignore[arg-type]
    start = clock.now()
    while clock.fire_next(start + 5 * OUTAGE_S):
        pass
    session.failure = None
    clock.fire_next(clock.now() + LONGEST_S)
    assert [str(e) for e in session.published] == ["m1"]  # never given up for back-pressure


def test_a_refusal_that_will_not_pass_drops_that_envelope_only() -> None:
    clock, session = VirtualClock(), Session()
    outbox = _outbox(session, clock)
    for failure in (InvalidEnvelope("bad"), SessionUnavailable("the session is gone")):
        session.failure = failure
        outbox.publish(Envelope("bad"))  # type: ignore[arg-type]
        assert session.tried[-1] == "bad" and not clock.fire_next(clock.now() + OUTAGE_S)
    session.failure = None
    outbox.publish(Envelope("good"))  # type: ignore[arg-type]
    assert [str(e) for e in session.published] == ["good"]  # no report: nothing passing was lost


def test_a_one_shot_step_waits_out_an_outage_within_its_bound_then_says_so() -> None:
    """``shepherd-child``'s steps (opening its reply inbox, subscribing, publishing) wait out
    an outage until the call's deadline; the first retry is said once; past the deadline, or
    for a refusal that will not pass, the caller hears of it."""
    clock = SystemClock()
    failures: list[Exception] = [Unreachable("NATS: NoStreamResponseError()")] * 2
    said: list[str] = []

    class Err:
        def write(self, text: str) -> None:
            said.append(text)

        def flush(self) -> None:
            pass

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "opened"

    deadline = clock.monotonic() + 30.0
    assert until_reachable(flaky, clock, deadline, Err()) == "opened"  # type: ignore[arg-type]
    assert "".join(said).count("retrying") == 1

    def down() -> str:
        raise Unreachable("no NATS server answered")

    try:
        until_reachable(down, clock, clock.monotonic() + 0.2, Err())  # type: ignore[arg-type]
    except Unreachable as exc:
        assert "no NATS server answered" in exc.message
    else:
        raise AssertionError("an outage past the deadline was not said")

    tries: list[int] = []

    def refused() -> str:
        tries.append(1)
        raise InvalidEnvelope("bad")

    try:
        until_reachable(refused, clock, deadline, Err())  # type: ignore[arg-type]
    except InvalidEnvelope:
        assert tries == [1]  # never tried again
    else:
        raise AssertionError("a refusal that will not pass was retried")


def test_a_full_disk_is_waited_out_like_an_outage_and_nothing_is_dropped() -> None:
    clock, session = VirtualClock(), Session()
    outbox = _outbox(session, clock)
    session.failure = DiskFull("no space left for inbox 'parent': No space left on device")
    done = Envelope("m0")
    outbox.publish(done)  # type: ignore[arg-type]
    start = clock.now()
    while clock.fire_next(start + 10.0):  # someone frees space within seconds
        pass
    assert session.published == [] and set(session.tried) == {"m0"}
    session.failure = None
    clock.fire_next(clock.now() + OUTAGE_LONGEST_S)
    assert session.published == [done]


class Recovering(Session):
    """A session that cannot be reached until its ``attempts``-th publish."""

    def __init__(self, attempts: int) -> None:
        super().__init__()
        self.left = attempts
        self.failure = Unreachable("NATS: NoStreamResponseError()")

    def publish(self, inbox: str, envelope: Any) -> None:
        self.left -= 1
        if self.left <= 0:
            self.failure = None
        super().publish(inbox, envelope)


def test_at_exit_what_waits_is_tried_again_for_a_bounded_time() -> None:
    """An agent that said done and exited during an outage: its done still goes out."""
    session = Recovering(attempts=4)
    outbox = _outbox(session, VirtualClock())
    outbox._clock = SystemClock()  # close waits on real time
    done = Envelope("m0")
    outbox.publish(done)  # type: ignore[arg-type]
    assert session.published == []
    outbox.close(linger_s=30.0)
    assert session.published == [done]

    down = Session()
    down.failure = Unreachable("no NATS server answered")
    outbox = _outbox(down, VirtualClock())
    outbox._clock = SystemClock()
    outbox.publish(Envelope("m1"))  # type: ignore[arg-type]
    outbox.close(linger_s=0.2)  # bounded: returns, the loss said in the log
    assert down.published == []
