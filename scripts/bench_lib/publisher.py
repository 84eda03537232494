"""``python -m bench_lib.publisher PARAMS``: the other process, publishing as a child would.

It opens the session mailbox (``Mailbox.open``), says ``ready`` on stdout, then publishes
``MessageEnvelope``s into one inbox through ``Mailbox.publish`` — the same encode /
exclusive-create / rename path for every receiver under test. Each envelope's content is
``"<phase> <CLOCK_MONOTONIC ns>"``, stamped just before it is built and published.

Each phase starts when a ``go`` line arrives on stdin, so the receiving side decides when: the
tail of an idle phase must not sit in a burst's debounce, and one figure's producers must not
overlap the next figure's.

PARAMS (JSON): ``root``, ``session_id``, ``inbox``, ``sender_id``, ``capability``, ``seed``,
``phases``: a list of ``{"count": N, "gap_ms": [lo, hi] | null}``; a gap, drawn uniformly,
is slept before each envelope (the pacing is the workload); ``null`` publishes flat out.
``raw``: true writes the same files with bare system calls instead (the throughput floor).
A phase may override ``root``, ``session_id``, ``inbox`` and ``raw``: one producer process then
serves several mailboxes in turn. When the inbox is full (``limit_exceeded``) the publisher
backs off on the producers' schedule (``actors.transports.mailbox.backoff``, as a child bridge does)
and retries, counting each wait: the shipped ``max_queue_depth`` applies, as it would to a child.

Result: per phase, envelopes published, back-pressure waits, elapsed time, and the duration of
the ``publish`` calls themselves (p50 / p99 / max / mean).
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import time

from bench_lib.common import GO_LINE, READY_LINE, emit_result, latency_summary, now_ns


def main(argv: list[str]) -> int:
    params = json.loads(argv[0])
    from actors.runtime.ids import IdSource
    from actors.transports.mailbox.backoff import Backoff
    from actors.transports.mailbox.mailbox import Mailbox
    from protocol.core.errors import LimitExceeded
    from protocol.core.ids import PARENT_ID, IdKind
    from protocol.wire.envelopes import MessageEnvelope, encode_envelope

    rng = random.Random(params.get("seed"))
    ids = IdSource()
    phases = [{**params, **phase} for phase in params["phases"]]  # a phase may override any key
    message_ids = [[ids.new(IdKind.MESSAGE) for _ in range(p["count"])] for p in phases]
    mailboxes: dict[str, Mailbox] = {}
    for phase in phases:
        if phase["root"] not in mailboxes:
            mailboxes[phase["root"]] = Mailbox.open(phase["root"], phase["session_id"])
    sender_id, capability = params["sender_id"], params["capability"]
    sequence = 0

    def publish_raw(box: str, envelope: MessageEnvelope) -> None:
        """The floor: the same file name and bytes, written with bare system calls (no checks,
        no depth limit, no logging)."""
        nonlocal sequence
        sequence += 1
        name = f"{time.time_ns():020d}.{os.getpid()}.{sequence}.{envelope.message_id}.json"
        tmp = os.path.join(box, "tmp", name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.write(fd, encode_envelope(envelope))
        os.close(fd)
        os.rename(tmp, os.path.join(box, "new", name))

    sys.stdout.write(READY_LINE + "\n")
    sys.stdout.flush()
    report = []
    for index, phase in enumerate(phases):
        if sys.stdin.readline().strip() != GO_LINE:  # each phase starts on its own "go"
            return 2
        inbox, session_id = phase["inbox"], phase["session_id"]
        if phase.get("raw"):
            publish = functools.partial(publish_raw, os.path.join(phase["root"], "inbox", inbox))
        else:
            publish = functools.partial(mailboxes[phase["root"]].publish, inbox)
        gap = phase.get("gap_ms")
        waits = 0
        calls: list[int] = []  # how long each publish() call took
        started = time.perf_counter()
        for message_id in message_ids[index]:
            if gap is not None:
                time.sleep(rng.uniform(gap[0], gap[1]) / 1000.0)
            envelope = MessageEnvelope(
                message_id=message_id,
                session_id=session_id,
                sender_id=sender_id,
                target_id=PARENT_ID,
                created_at=time.time(),
                capability=capability,
                content=f"{index} {now_ns()}",
            )
            backoff = Backoff(rng=rng)
            while True:
                try:
                    before = now_ns()
                    publish(envelope)
                    calls.append(now_ns() - before)
                    break
                except LimitExceeded:  # back-pressure: the reader is behind; a polite client
                    waits += 1  # backs off and tries again
                    time.sleep(backoff.next())
        report.append(
            {
                "published": len(calls),
                "backpressure_waits": waits,
                "elapsed_s": time.perf_counter() - started,
                "publish_call": latency_summary(calls),
            }
        )
    for mailbox in mailboxes.values():
        mailbox.close()
    emit_result({"phases": report})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
