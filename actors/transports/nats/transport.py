"""Shepherd's transport on NATS JetStream: the same seam as the file mailbox, on servers that
can live on other hosts and survive one of them dying.

Layout on the server, per session (``S`` is the session id):
- stream ``S`` (dots are not allowed in stream names; session ids have none) holds subjects
  ``shepherd.S.in.<inbox>``, one subject per inbox, with work-queue retention: a message stays
  until its inbox's consumer acknowledges it, so what a subject holds is that inbox's unread
  depth. ``max_msgs_per_subject`` is the session's ``max_queue_depth`` with discard-new per
  subject: the server refuses the next publish, which is ``limit_exceeded`` (an
  :class:`~protocol.core.errors.InboxFull`) as with the file mailbox.
- one durable pull consumer per inbox, named after it, filtering its subject, explicit acks. Its
  existence is the inbox's: publishing to an inbox with no consumer is ``invalid_handle``, as a
  file mailbox refuses an inbox with no directory (an unknown recipient never swallows messages).
- stream ``S_quarantine`` keeps every refused message with its ``Shepherd-Reason`` header.

Rules:
- **Accepted means never lost.** ``publish`` returns only once the stream acknowledged the
  message, which with ``sync_interval: always`` (:mod:`actors.transports.nats.server`) means it is
  on disk; else it raises a typed error. The inbox and the envelope's message id make the
  ``Nats-Msg-Id``, so a publish retried after a lost acknowledgement is stored once (the
  server's duplicate window, two minutes by default). The inbox is in it because the window
  is the whole stream's: a message the parent forwards keeps its id.
- A message is acknowledged only after the handler took it (or it went to quarantine with its
  reason). A receiver that dies before acknowledging gets it again from the server; the
  transport's own de-duplication window (a :class:`SenderGate`) drops the repeat.
- Authentication and de-duplication are the transport's (see :mod:`actors.runtime.transport`):
  the parent's inbox takes envelopes only from admitted senders with their capability, or, when
  the owner gives a ``validate`` (as it gives the file mailbox), only what that validator
  passes; a refusal goes to quarantine and ``on_reject`` is told, as the file mailbox's drainer
  does. The capability never reaches the handler.
- Handlers run on a worker thread, never on the event loop (a handler may wait for an actor
  that publishes through this transport), one inbox's messages at a time in stream order; one
  that raises sends the message to quarantine.
- A process that did not create the session (``create=False``: a bridge, a CLI client) makes
  no stream and only its own one-shot reply inboxes (:mod:`actors.transports.nats.replies`).
- With a ``login`` (:mod:`actors.transports.nats.auth`) the process is its own NATS user, whose
  rights the server enforces; a child's one-shot inboxes and quarantine records are then under
  its agent id (:class:`~actors.transports.nats.replies.Places`). Without one: no credentials.
- ``tls://`` servers are reached over TLS only, with the session's ``tls`` files (the CA
  bundle; none: the system's trust store; a client certificate) by
  :func:`actors.transports.nats.setup.connect`.
- A server that does not answer within ``request_timeout_s`` makes ``publish`` raise
  ``session_unavailable``; the client keeps reconnecting (to any server of a cluster) and the
  pull loops resume where the consumers' ack floors are. The session's creator (the parent)
  waits an outage out instead (a publish, an inbox made), for at most ``outage_s``
  (:mod:`actors.transports.nats.outage`): a failover fails no task, a stream without a leader
  yet no start.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from actors.runtime.log import logger
from actors.runtime.transport import Handler, NotHandled, SenderGate, Subscription
from actors.transports.mailbox.files import encode_publishable, inbox_name
from actors.transports.nats import replies, setup
from actors.transports.nats.loop import LoopThread, PullLoop
from actors.transports.nats.outage import Outage, waiting_out
from actors.transports.nats.quarantine import Quarantine, QuarantineRecord
from protocol.core.errors import (
    ForbiddenSender,
    InvalidEnvelope,
    InvalidHandle,
    SessionUnavailable,
    ShepherdError,
)
from protocol.core.ids import IdKind, kind_of
from protocol.core.transport_url import TlsFiles
from protocol.records.settings import Settings
from protocol.wire.envelopes import AnyEnvelope, decode_envelope

if TYPE_CHECKING:
    from pathlib import Path

    from nats.aio.msg import Msg

    from actors.transports.mailbox.drain import RejectCallback, Validator
    from actors.transports.nats.auth import NatsLogin

__all__ = ["NatsTransport", "QuarantineRecord", "inbox_subject", "stream_name"]

#: messages fetched per pull; the handler sees them one by one, in order
_FETCH_BATCH = 256
#: how long one pull waits for messages before asking again (bounds how late a cancel is seen)
_FETCH_WAIT_S = 1.0
#: a message not acknowledged this long after delivery is delivered again (a dead receiver)
_ACK_WAIT_S = 30.0
#: how long set-up keeps asking a cluster that is still electing its leaders
_SETUP_CEILING_S = 60.0


def stream_name(session_id: str) -> str:
    return session_id


def inbox_subject(session_id: str, inbox: str) -> str:
    return f"shepherd.{session_id}.in.{inbox}"


class NatsTransport:
    """A :class:`~actors.runtime.transport.GatedTransport` on NATS JetStream (module rules)."""

    def __init__(
        self,
        servers: Sequence[str],
        session_id: str,
        settings: Settings | None = None,
        *,
        replicas: int = 1,
        request_timeout_s: float = 5.0,
        user: str | None = None,
        password: str | None = None,
        ack_wait_s: float = _ACK_WAIT_S,
        create: bool = True,
        validate: Validator | None = None,
        on_reject: RejectCallback | None = None,
        outage_s: float = 0.0,  # how long `publish` waits out an outage (module rules)
        login: NatsLogin | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self._outage_s = outage_s
        self._ack_wait = ack_wait_s
        self._create = create
        self._validate = validate
        self._on_reject = on_reject
        self.servers = list(servers)
        self._settings = settings or Settings()
        self._session_id = session_id
        self._stream = stream_name(session_id)
        self._prefix = inbox_subject(session_id, "")
        owner = login.owner if login is not None else None
        self._places = replies.Places(session_id, owner=owner, agent_replies=login is not None)
        self._replicas = replicas
        self._timeout = request_timeout_s
        self.gate = SenderGate(self._settings.dedup_window)
        self._inboxes: set[str] = set()  # inboxes whose consumer is known to exist
        self._one_shots: set[str] = set()  # this process's reply inboxes: removed at close
        self._loops: dict[str, PullLoop] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.delivered = 0
        self.quarantined = 0
        self._thread = LoopThread()
        try:
            try:
                self._nc, self._js = self._thread.run(
                    setup.connect(
                        self.servers, user, password, session_id, self._timeout, login, tls
                    ),
                    self._timeout * 2,
                )
            except SessionUnavailable:  # refused for TLS: the cause is named already
                raise
            except Exception as exc:  # the client retries forever: the bounded wait ended it
                why = "" if isinstance(exc, TimeoutError) else f": {exc!r}"
                raise SessionUnavailable(
                    f"no NATS server answered within {self._timeout * 2:g} s at "
                    f"{', '.join(self.servers)}{why}"
                ) from exc
            self._quarantined = Quarantine(self._js, self._session_id, owner)
            if create:
                inbox = setup.inbox_stream(
                    self._stream, inbox_subject(session_id, "*"), self._settings, replicas
                )
                configs = (inbox, self._quarantined.stream_config(replicas))
                self._thread.run(
                    setup.make_streams(self._js, configs, _SETUP_CEILING_S),
                    _SETUP_CEILING_S + self._timeout,
                )
        except BaseException:
            self._thread.stop()
            raise

    # ------------------------------------------------------------------ inboxes

    def ensure_inbox(self, inbox: str) -> None:
        """Make ``inbox`` (its durable consumer); harmless if it exists. A process that did not
        create the session makes only a one-shot reply inbox (a message id)."""
        inbox_name(inbox)
        if not self._create and kind_of(inbox) is not IdKind.MESSAGE:
            raise ForbiddenSender(f"only the session parent creates inbox {inbox!r}")
        stream, subject = self._places.of(inbox)
        wait, replicas = self._ack_wait, self._replicas
        own = self._create and self._places.agent_replies and kind_of(inbox) is IdKind.AGENT
        streams = [self._places.agent_stream(inbox, replicas)] if own else []

        def make() -> None:  # harmless if made already, so tried again through an outage
            self._run(setup.make_streams(self._js, streams, self._timeout))
            self._run(setup.add_consumer(self._js, stream, inbox, subject, wait, replicas))

        waiting_out(make, self._outage_s, lambda: self._closed)  # e.g. no stream leader yet
        with self._lock:
            self._inboxes.add(inbox)
            if replies.one_shot_threshold(inbox) is not None:
                self._one_shots.add(inbox)

    def has_inbox(self, inbox: str, target: str | None = None) -> bool:
        """``target``: the agent an answer published there is for (see :class:`Places`)."""
        inbox_name(inbox)
        with self._lock:
            if inbox in self._inboxes:
                return True
        stream = self._places.of(inbox, target)[0]
        found = bool(self._run(setup.consumer_exists(self._js, stream, inbox)))
        if found and replies.one_shot_threshold(inbox) is None:  # a reply inbox: used once
            with self._lock:
                self._inboxes.add(inbox)
        return found

    def remove_inbox(self, inbox: str) -> None:
        """Delete ``inbox``'s consumer and whatever it had not read."""
        inbox_name(inbox)
        with self._lock:
            self._inboxes.discard(inbox)
            self._one_shots.discard(inbox)
            loop = self._loops.get(inbox)
        if loop is not None:
            loop.cancel()
        self._run(setup.delete_consumer(self._js, *self._places.of(inbox), inbox))

    def set_aside(self, inbox: str, aside: Path) -> int:
        """What ``inbox`` holds unread, into files in ``aside`` (see its module, ``aside``)."""
        from actors.transports.nats.aside import CEILING_S, set_aside

        (stream, subject), wait = self._places.of(inbox), self._ack_wait
        moving = set_aside(
            self._js, stream, subject, inbox, aside, wait, self._replicas, self._timeout
        )
        return int(self._run(moving, CEILING_S))

    # ------------------------------------------------------------------ publish

    def admit(self, sender_id: str, session_id: str, capability: str) -> None:
        self.gate.admit(sender_id, session_id, capability)

    def publish(self, inbox: str, envelope: AnyEnvelope) -> None:
        """Accept ``envelope`` into ``inbox`` (it is then delivered or quarantined) or raise."""
        if self._closed:
            raise InvalidHandle("transport is closed")
        data = encode_publishable(
            inbox, envelope, self._session_id, self._settings.max_envelope_bytes
        )
        if not self.has_inbox(inbox, envelope.target_id):
            raise InvalidHandle(f"no inbox {inbox!r} in this session")
        place = self._places.of(inbox, envelope.target_id)
        depth = self._settings.max_queue_depth
        waiting_out(
            lambda: self._run(
                setup.publish(self._js, place, inbox, envelope.message_id, data, depth)
            ),
            self._outage_s,
            lambda: self._closed,
        )

    def _run(self, coro: Any, timeout_s: float | None = None) -> Any:
        import nats.errors

        if not self._thread.loop.is_running():
            coro.close()
            raise InvalidHandle("transport is closed")
        try:
            return self._thread.run(coro, timeout_s or self._timeout)
        except ShepherdError:
            raise
        except TimeoutError as exc:
            raise Outage(f"no answer from the NATS servers within {self._timeout:g} s") from exc
        except nats.errors.Error as exc:  # no responders, no connection: an outage
            raise Outage(f"NATS: {exc!r}") from exc
        except Exception as exc:
            raise SessionUnavailable(f"NATS: {exc!r}") from exc

    # ------------------------------------------------------------------ subscribe

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler`` on this transport's loop thread,
        starting with whatever the inbox holds. Subscribing again replaces the handler. A process
        that did not create the session subscribes only to an inbox that exists."""
        if self._create or kind_of(inbox) is IdKind.MESSAGE:
            self.ensure_inbox(inbox)
        elif not self.has_inbox(inbox):
            raise InvalidHandle(f"no inbox {inbox!r} in this session")
        with self._lock:
            existing = self._loops.get(inbox)
            if existing is not None:
                existing.handler = handler
                return existing
            loop = self._loops[inbox] = PullLoop(self._unsubscribe, inbox, handler)
        self._run(self._start(loop))
        return loop

    async def _start(self, loop: PullLoop) -> None:
        stream = self._places.of(loop.inbox)[0]
        subscription = await self._js.pull_subscribe_bind(durable=loop.inbox, stream=stream)
        loop.task = asyncio.get_running_loop().create_task(self._pull(loop, subscription))

    async def _pull(self, loop: PullLoop, subscription: Any) -> None:
        from nats.errors import ConnectionClosedError
        from nats.errors import TimeoutError as NatsTimeout

        while True:
            try:
                messages = await subscription.fetch(_FETCH_BATCH, timeout=_FETCH_WAIT_S)
            except (TimeoutError, NatsTimeout):
                continue
            except ConnectionClosedError:
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a server gone or a leader moving: ask again
                logger.debug("nats: pull on {} failed: {!r}", loop.inbox, exc)
                await asyncio.sleep(_FETCH_WAIT_S / 4)  # not a wait for an event: a retry pace
                continue
            for message in messages:
                await self._deliver(loop, message)

    async def _deliver(self, loop: PullLoop, message: Msg) -> None:
        try:
            envelope = decode_envelope(message.data, max_bytes=self._settings.max_envelope_bytes)
            if envelope.session_id != self._session_id:
                raise InvalidEnvelope(f"envelope is for session {envelope.session_id}")
        except ShepherdError as exc:
            await self._quarantine(loop.inbox, message, exc, False)
            return
        verdict: AnyEnvelope | ShepherdError | None
        if self._validate is not None:
            try:
                self._validate(loop.inbox, envelope)
            except ShepherdError as exc:
                verdict = exc
            else:
                verdict = self.gate.fresh(loop.inbox, envelope)
        else:
            verdict = self.gate.judge(loop.inbox, envelope)
        if isinstance(verdict, ShepherdError):
            await self._quarantine(loop.inbox, message, verdict, False, envelope)
            return
        if verdict is not None:
            try:
                await asyncio.to_thread(loop.handler, verdict)
            except NotHandled:  # neither acknowledged nor quarantined: for the next parent
                self.gate.forget(loop.inbox, verdict.message_id)
                return
            except Exception as exc:
                failed = ShepherdError(f"handler raised {exc!r}")
                await self._quarantine(loop.inbox, message, failed, True, verdict)
                return
            self.delivered += 1
        await message.ack()

    async def _quarantine(
        self,
        inbox: str,
        message: Msg,
        error: ShepherdError,
        authenticated: bool,
        envelope: AnyEnvelope | None = None,
    ) -> None:
        if not await self._quarantined.record(inbox, message.data, error, authenticated):
            await message.nak(delay=self._ack_wait)  # not recorded: to be judged again later
            return
        self.quarantined += 1
        await message.term()
        if self._on_reject is not None:  # off the loop: it may publish through this transport
            if envelope is not None and envelope.capability:
                envelope = msgspec.structs.replace(envelope, capability="")
            try:
                await asyncio.to_thread(self._on_reject, inbox, envelope, error, authenticated)
            except Exception:
                logger.opt(exception=True).error("nats: on_reject failed for {}", inbox)

    def quarantine(self, limit: int = 1000) -> list[tuple[QuarantineRecord, bytes]]:
        """What the quarantine holds, oldest first, at most ``limit`` records."""
        return list(self._run(self._quarantined.read(limit)))

    def _unsubscribe(self, loop: PullLoop) -> None:
        with self._lock:
            if self._loops.get(loop.inbox) is loop:
                del self._loops[loop.inbox]
        task = loop.task
        if task is not None and not self._thread.in_loop():
            self._thread.loop.call_soon_threadsafe(task.cancel)

    def wake_mode(self, inbox: str) -> str | None:
        """``nats`` once ``inbox`` is subscribed here (a pull waits on the server), else None."""
        with self._lock:
            return "nats" if inbox in self._loops else None

    def wait_drained(self, timeout_s: float) -> bool:
        """Nothing to wait for: how an inbox is woken is known once it is subscribed."""
        return not self._closed

    # ------------------------------------------------------------------ reply inboxes

    def reply_inbox(self, owner: str) -> replies.NatsReplyInbox:
        return replies.NatsReplyInbox(self, owner)

    def sweep_reply_inboxes(self) -> list[str]:
        return list(self._run(replies.sweep(self._js, self._stream, self._prefix)))

    def unread_answers(self) -> int:
        return int(self._run(replies.unread_answers(self._js, self._stream, self._prefix)))

    def destroy(self) -> None:
        """Delete the session's streams and consumers (its shutdown: as the file mailbox's
        directory is removed, once every agent has exited). Then :meth:`close`."""
        from nats.js.errors import NotFoundError

        async def delete() -> None:
            agents = await self._places.agent_streams(self._nc)
            for stream in (self._stream, self._quarantined.stream, *agents):
                with contextlib.suppress(NotFoundError):
                    await self._js.delete_stream(stream)

        try:
            with contextlib.suppress(NotFoundError):
                self._run(delete())
        finally:
            self.close()

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Stop delivering; later publishes raise. The server keeps what was not read, but for
        this process's one-shot reply inboxes: nobody else would read them."""
        if self._closed:
            return
        with self._lock:
            loops = list(self._loops.values())
            one_shots, self._one_shots = list(self._one_shots), set()
        for loop in loops:
            loop.cancel()
        for inbox in one_shots:  # not there any more is fine, as a server gone is: swept later
            with contextlib.suppress(Exception):
                self._run(setup.delete_consumer(self._js, *self._places.of(inbox), inbox))
        self._closed = True
        # acknowledgements are sent without waiting: flushed before the connection goes (a
        # drain would also wait for the pulls just cancelled, up to its timeout)
        with contextlib.suppress(Exception):
            self._thread.run(self._nc.flush(math.ceil(self._timeout)), self._timeout)
        with contextlib.suppress(Exception):
            self._thread.run(self._nc.close(), self._timeout)
        self._thread.stop()
