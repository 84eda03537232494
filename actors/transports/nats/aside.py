"""``serve --recover`` over NATS: what a dead agent's inbox still holds, moved aside into files
before the agent starts again (the rules: :mod:`actors.session.recovery`).

Rules:
- The agent's consumer is deleted and made again first: what was handed to the dead process
  and never acknowledged is then readable at once (the stream keeps every message of a work
  queue until it is acknowledged), not after the acknowledgement wait, when it would reach the
  new process.
- Each message is written as ``<stream sequence>.json`` (0600, whole or not at all, fsynced:
  the name is the server's number, never a sender's) before it is acknowledged, so a
  parent killed in the middle keeps it on the server and writes the same file again at the
  next recovery.
- Nothing left: nothing is made.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from actors.records.session_info import write_private
from actors.transports.nats.setup import add_consumer

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

__all__ = ["CEILING_S", "set_aside"]

#: messages fetched at once
_BATCH = 256
#: how long it may take: a full inbox is ``max_queue_depth`` messages, each written and
#: acknowledged in turn
CEILING_S = 60.0


async def set_aside(
    js: JetStreamContext,
    stream: str,
    subject: str,
    inbox: str,
    aside: Path,
    ack_wait: float,
    replicas: int,
    timeout: float,
) -> int:
    """Move what ``inbox``'s consumer holds into ``aside`` (module rules); how many."""
    from nats.js.errors import NotFoundError

    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(stream, inbox)
    await add_consumer(js, stream, inbox, subject, ack_wait, replicas)
    left = (await js.consumer_info(stream, inbox)).num_pending
    if not left:
        return 0
    aside.mkdir(mode=0o700, parents=True, exist_ok=True)
    subscription = await js.pull_subscribe_bind(durable=inbox, stream=stream)
    kept = 0
    try:
        while kept < left:
            for message in await subscription.fetch(min(_BATCH, left - kept), timeout=timeout):
                write_private(aside / f"{message.metadata.sequence.stream:020d}.json", message.data)
                await message.ack_sync(timeout=timeout)
                kept += 1
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
    return kept
