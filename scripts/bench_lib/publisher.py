"""``python -m bench_lib.publisher PARAMS``: the other process, publishing as a child would.

It opens the session mailbox (``Mailbox.open``), says ``ready`` on stdout, waits for ``go`` on
stdin, then publishes ``MessageEnvelope``s into one inbox through ``Mailbox.publish`` — the
same encode / exclusive-create / rename path for every receiver under test. Each envelope's
content is ``"<phase> <CLOCK_MONOTONIC ns>"``, stamped just before ``publish`` is called.

PARAMS (JSON): ``root``, ``session_id``, ``inbox``, ``sender_id``, ``capability``, ``seed``,
``phases``: a list of ``{"count": N, "gap_ms": [lo, hi] | null}``; a gap, drawn uniformly,
is slept before each envelope (the pacing is the workload); ``null`` publishes flat out. When
the inbox is full (``limit_exceeded``) the publisher backs off 0.5 ms and retries, counting it.
"""

from __future__ import annotations

import json
import random
import sys
import time

from bench_lib.common import GO_LINE, READY_LINE, emit_result, now_ns


def main(argv: list[str]) -> int:
    params = json.loads(argv[0])
    from actors.idsource import IdSource
    from actors.mailbox import Mailbox
    from protocol.envelopes import MessageEnvelope
    from protocol.errors import LimitExceeded
    from protocol.ids import PARENT_ID, IdKind

    mailbox = Mailbox.open(params["root"], params["session_id"])
    rng = random.Random(params.get("seed"))
    ids = IdSource()
    phases = params["phases"]
    message_ids = [[ids.new(IdKind.MESSAGE) for _ in range(p["count"])] for p in phases]
    inbox, session_id = params["inbox"], params["session_id"]
    sender_id, capability = params["sender_id"], params["capability"]
    sys.stdout.write(READY_LINE + "\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() != GO_LINE:
        return 2
    published = waits = 0
    started = time.perf_counter()
    for index, phase in enumerate(phases):
        gap = phase.get("gap_ms")
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
            while True:
                try:
                    mailbox.publish(inbox, envelope)
                    break
                except LimitExceeded:
                    waits += 1
                    time.sleep(0.0005)  # back-pressure: the reader is behind
            published += 1
    elapsed = time.perf_counter() - started
    mailbox.close()
    emit_result({"published": published, "backpressure_waits": waits, "elapsed_s": elapsed})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
