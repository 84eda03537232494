"""One-shot reply inboxes on NATS, and what the session parent does with them.

A CLI call or a child command (``shepherd-child message|done``) gets its one answer in an inbox
named by its message id, as with the file mailbox (:mod:`actors.transports.mailbox.reply_inboxes`);
here it is a durable consumer on the session's stream. Rules:

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
- With per-process credentials (:mod:`actors.transports.nats.auth`), a child's one-shot inboxes are
  on a
  stream of its own (:class:`Places`), since a consumer's rights can be limited only by its
  stream's name: the child may create, pull and delete consumers there and nowhere else. The
  parent finds that stream by the answer's target (the agent). Nobody sweeps it: it keeps at
  most :data:`AGENT_REPLIES_KEEP` answers, each unread for at most
  :data:`AGENT_REPLIES_MAX_AGE_S` (a live caller pulls its answer as it arrives, so an older
  one is for a caller gone long ago), and goes with the session's streams.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from actors.runtime.log import logger
from actors.transports.nats.auth import reply_stream, reply_subject
from protocol.core.errors import ShepherdError
from protocol.core.ids import IdKind, kind_of

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js.client import JetStreamContext

__all__ = [
    "AGENT_REPLIES_KEEP",
    "AGENT_REPLIES_MAX_AGE_S",
    "ONE_SHOT_INACTIVE_S",
    "NatsReplyInbox",
    "Places",
    "one_shot_threshold",
    "sweep",
    "unread_answers",
]

#: one-shot inboxes are named by a message id; agents' and the parent's never are
ONE_SHOT_PREFIX = "shepherd-message-"
#: a one-shot consumer nobody pulled from this long is deleted by the server
ONE_SHOT_INACTIVE_S = 60.0


#: an agent's reply stream keeps at most this many answers (the oldest go first) ...
AGENT_REPLIES_KEEP = 10_000
#: ... each unread at most this long (a live caller reads its answer as it arrives)
AGENT_REPLIES_MAX_AGE_S = 3600.0


def one_shot_threshold(inbox: str) -> float | None:
    return ONE_SHOT_INACTIVE_S if inbox.startswith(ONE_SHOT_PREFIX) else None


class Places:
    """Where an inbox lives: its stream and subject (see the module rules)."""

    def __init__(self, session_id: str, *, owner: str | None, agent_replies: bool) -> None:
        self.session_id = session_id
        self.stream = session_id
        #: the agent this process is (a child's bridge or command), else None
        self.owner = owner
        self.agent_replies = agent_replies

    def subject(self, inbox: str) -> str:
        return f"shepherd.{self.session_id}.in.{inbox}"

    def agent_of(self, inbox: str, target: str | None = None) -> str | None:
        """The agent whose own reply stream holds ``inbox``, if any (``target``: the agent an
        answer is for, when the parent publishes it)."""
        if not self.agent_replies or one_shot_threshold(inbox) is None:
            return None
        if self.owner is not None:
            return self.owner
        if target is not None and kind_of(target) is IdKind.AGENT:
            return target
        return None

    def of(self, inbox: str, target: str | None = None) -> tuple[str, str]:
        agent = self.agent_of(inbox, target)
        if agent is None:
            return self.stream, self.subject(inbox)
        return reply_stream(self.session_id, agent), reply_subject(self.session_id, agent, inbox)

    def agent_stream(self, agent_id: str, replicas: int) -> Any:
        """The agent's reply stream (work queue: an answer stays until its caller acked it)."""
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

        return StreamConfig(
            name=reply_stream(self.session_id, agent_id),
            subjects=[reply_subject(self.session_id, agent_id, "*")],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            num_replicas=replicas,
            max_msgs=AGENT_REPLIES_KEEP,
            max_age=AGENT_REPLIES_MAX_AGE_S,
            discard=DiscardPolicy.OLD,
        )

    async def agent_streams(self, nc: Client) -> list[str]:
        """The names of this session's agents' reply streams (for its shutdown)."""
        names: list[str] = []
        if not self.agent_replies:
            return names
        while True:
            request = {"offset": len(names), "subject": reply_subject(self.session_id, "*", "*")}
            answer = await nc.request("$JS.API.STREAM.NAMES", json.dumps(request).encode(), 5.0)
            body = json.loads(answer.data)
            page = body.get("streams") or []
            names += page
            if not page or len(names) >= int(body.get("total", 0)):
                return names


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
