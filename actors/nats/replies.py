"""One-shot reply inboxes on NATS, and what the session parent does with them.

A CLI call or a child command (``shepherd-child message|done``) gets its one answer in an inbox
named by its message id, as with the file mailbox (:mod:`actors.mailbox.reply_inboxes`); here
it is a durable consumer on the session's stream. Rules:

- Proof that the owner is alive is the server's, not a file lock: the consumer is made with an
  ``inactive_threshold`` (:data:`ONE_SHOT_INACTIVE_S`), so the server deletes it once nobody
  pulls from it - an owner killed mid-call, however it ended. A live owner always has a pull
  pending (the pull loop asks again every second), so a call of any length keeps its inbox.
- The owner removes its inbox when the call ends (:meth:`NatsReplyInbox.remove`: the consumer
  and what its subject still holds).
- What is left anyway - an answer published after the owner gave up, or after the server
  deleted a dead owner's consumer - sits on a subject nobody reads. The parent's sweep
  (:func:`sweep`, on the same schedule as the file mailbox's) purges every one-shot subject
  without a consumer. :func:`unread_answers` is what a shutdown waits for before it deletes
  the session's streams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from actors.runtime.log import logger
from protocol.errors import ShepherdError

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

__all__ = ["ONE_SHOT_INACTIVE_S", "NatsReplyInbox", "one_shot_threshold", "sweep", "unread_answers"]

#: one-shot inboxes are named by a message id; agents' and the parent's never are
ONE_SHOT_PREFIX = "shepherd-message-"
#: a one-shot consumer nobody pulled from this long is deleted by the server
ONE_SHOT_INACTIVE_S = 60.0


def one_shot_threshold(inbox: str) -> float | None:
    return ONE_SHOT_INACTIVE_S if inbox.startswith(ONE_SHOT_PREFIX) else None


class _Inboxes(Protocol):  # the transport's side (it imports this module)
    def ensure_inbox(self, inbox: str) -> None: ...

    def remove_inbox(self, inbox: str) -> None: ...


class NatsReplyInbox:
    """The owner's side: the inbox exists from construction until :meth:`remove`."""

    def __init__(self, transport: _Inboxes, owner: str) -> None:
        self._transport = transport
        self.owner = owner
        transport.ensure_inbox(owner)

    def remove(self) -> None:
        """Remove the inbox. Never raises: what cannot be removed now is the sweep's."""
        try:
            self._transport.remove_inbox(self.owner)
        except ShepherdError as exc:
            logger.bind(inbox=self.owner).debug("reply inbox left for the sweep: {}", exc)


async def _one_shot_subjects(js: JetStreamContext, stream: str, prefix: str) -> dict[str, int]:
    """One-shot inbox -> messages its subject holds (only subjects holding some)."""
    info = await js.stream_info(stream, subjects_filter=prefix + "*")
    subjects = info.state.subjects or {}
    found: dict[str, int] = {}
    for subject, count in subjects.items():
        inbox = subject[len(prefix) :]
        if inbox.startswith(ONE_SHOT_PREFIX) and count:
            found[inbox] = count
    return found


async def _consumers(js: JetStreamContext, stream: str) -> set[str]:
    return {c.name for c in await js.consumers_info(stream)}


async def sweep(js: JetStreamContext, stream: str, prefix: str) -> list[str]:
    """Purge the one-shot subjects that hold messages and have no consumer; their inboxes."""
    held = await _one_shot_subjects(js, stream, prefix)
    if not held:
        return []
    alive = await _consumers(js, stream)
    removed = [inbox for inbox in held if inbox not in alive]
    for inbox in removed:
        await js.purge_stream(stream, subject=prefix + inbox)
        # an unread answer was for a call whose caller is gone: nobody can read it any more
        logger.info("removed the reply inbox {} of an ended call ({} unread)", inbox, held[inbox])
    return removed


async def unread_answers(js: JetStreamContext, stream: str, prefix: str) -> int:
    """One-shot inboxes holding an unread answer whose owner still pulls from them."""
    held = await _one_shot_subjects(js, stream, prefix)
    if not held:
        return 0
    alive = await _consumers(js, stream)
    return sum(1 for inbox in held if inbox in alive)
