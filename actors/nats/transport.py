"""Shepherd's transport on NATS JetStream: the same seam as the file mailbox, on servers that
can live on other hosts and survive one of them dying.

Layout on the server, per session (``S`` is the session id):
- stream ``S`` (dots are not allowed in stream names; session ids have none) holds subjects
  ``shepherd.S.in.<inbox>``, one subject per inbox, with work-queue retention: a message stays
  until its inbox's consumer acknowledges it, so what a subject holds is that inbox's unread
  depth. ``max_msgs_per_subject`` is the session's ``max_queue_depth`` with discard-new per
  subject: the server refuses the next publish, which is ``limit_exceeded`` (an
  :class:`~protocol.errors.InboxFull`) as with the file mailbox.
- one durable pull consumer per inbox, named after it, filtering its subject, explicit acks. Its
  existence is the inbox's: publishing to an inbox with no consumer is ``invalid_handle``, as a
  file mailbox refuses an inbox with no directory (an unknown recipient never swallows messages).
- stream ``S_quarantine`` (limits retention) keeps every refused message with a
  ``Shepherd-Reason`` header: nothing is dropped silently.

Rules:
- **Accepted means never lost.** ``publish`` returns only once the stream acknowledged the
  message, which with ``sync_interval: always`` (:mod:`actors.nats.server`) means it is on disk;
  else it raises a typed error. The envelope's message id is the ``Nats-Msg-Id``, so a publish
  retried after a lost acknowledgement is stored once (the server's duplicate window, two
  minutes by default).
- A message is acknowledged only after the handler took it (or it went to quarantine with its
  reason recorded). A receiver that dies before acknowledging gets it again from the server; the
  transport's own de-duplication window (a :class:`SenderGate`) drops the repeat, since consumer
  redelivery is outside the server's duplicate window.
- Authentication and de-duplication are the transport's (see :mod:`actors.runtime.transport`):
  the parent's inbox takes envelopes only from admitted senders with their capability; a
  forgery goes to quarantine unanswered. The capability never reaches the handler.
- Handlers run on this transport's event-loop thread, one inbox's messages in stream order, and
  must be quick (they ``tell`` an actor). A handler that raises sends the message to quarantine.
- A server that does not answer within ``request_timeout_s`` makes ``publish`` raise
  ``session_unavailable``; the client keeps reconnecting (to any server of a cluster) and the
  pull loops resume where the consumers' ack floors are.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from actors.mailbox.files import encode_publishable, inbox_name
from actors.nats.loop import LoopThread
from actors.nats.quarantine import Quarantine, QuarantineRecord
from actors.runtime.log import logger
from actors.runtime.transport import Handler, SenderGate, Subscription
from protocol.envelopes import AnyEnvelope, decode_envelope
from protocol.errors import (
    InboxFull,
    InvalidEnvelope,
    InvalidHandle,
    SessionUnavailable,
    ShepherdError,
)
from protocol.settings import Settings

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

__all__ = ["NatsTransport", "QuarantineRecord", "inbox_subject", "stream_name"]

#: the JetStream error code for "maximum messages per subject exceeded"
_PER_SUBJECT_LIMIT = 10077
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


class _PullLoop:
    """One inbox's subscription: a task on the loop pulling from the inbox's consumer."""

    def __init__(self, owner: NatsTransport, inbox: str, handler: Handler) -> None:
        self.owner = owner
        self.inbox = inbox
        self.handler = handler
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        self.owner._unsubscribe(self)


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
    ) -> None:
        self._ack_wait = ack_wait_s
        self._settings = settings or Settings()
        self._session_id = session_id
        self._stream = stream_name(session_id)
        self._replicas = replicas
        self._timeout = request_timeout_s
        self.gate = SenderGate(self._settings.dedup_window)
        self._inboxes: set[str] = set()  # inboxes whose consumer is known to exist
        self._loops: dict[str, _PullLoop] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.delivered = 0
        self.quarantined = 0
        self._thread = LoopThread()
        try:
            self._nc, self._js = self._thread.run(
                self._connect(list(servers), user, password), self._timeout * 2
            )
            self._quarantined = Quarantine(self._js, self._session_id)
            self._thread.run(self._ensure_streams(), _SETUP_CEILING_S + self._timeout)
        except BaseException:
            self._thread.stop()
            raise

    # ------------------------------------------------------------------ set-up

    async def _connect(
        self, servers: list[str], user: str | None, password: str | None
    ) -> tuple[Client, JetStreamContext]:
        import nats

        async def disconnected() -> None:
            logger.warning("nats: disconnected from {}", servers)

        async def reconnected() -> None:
            logger.info("nats: reconnected")

        async def error(exc: Exception) -> None:
            logger.warning("nats: {}", exc)

        nc = await nats.connect(
            servers,
            user=user,
            password=password,
            name=f"shepherd {self._session_id}",
            connect_timeout=self._timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
        )
        return nc, nc.jetstream(timeout=self._timeout)

    async def _ensure_streams(self) -> None:
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

        inbox = StreamConfig(
            name=self._stream,
            subjects=[inbox_subject(self._session_id, "*")],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            num_replicas=self._replicas,
            max_msgs_per_subject=self._settings.max_queue_depth,
            discard=DiscardPolicy.NEW,
            discard_new_per_subject=True,
            max_msg_size=self._settings.max_envelope_bytes,
        )
        for config in (inbox, self._quarantined.stream_config(self._replicas)):
            await self._make_stream(config)

    async def _make_stream(self, config: Any) -> None:
        """Create ``config``'s stream, or update it if it exists with other settings (a restart
        with other limits). A cluster still electing its leaders answers late or with 503:
        asked again until the set-up ceiling, since creating a stream twice is harmless."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import BadRequestError, ServiceUnavailableError

        deadline = asyncio.get_running_loop().time() + _SETUP_CEILING_S
        while True:
            try:
                await self._js.add_stream(config)
                return
            except BadRequestError:  # the name is taken by another config: update it in place
                await self._js.update_stream(config)
                return
            except (NatsTimeout, ServiceUnavailableError):
                if asyncio.get_running_loop().time() > deadline:
                    raise

    # ------------------------------------------------------------------ inboxes

    def ensure_inbox(self, inbox: str) -> None:
        """Make ``inbox`` (its durable consumer); harmless if it exists."""
        inbox_name(inbox)
        self._run(self._ensure_consumer(inbox))
        with self._lock:
            self._inboxes.add(inbox)

    def has_inbox(self, inbox: str) -> bool:
        inbox_name(inbox)
        with self._lock:
            if inbox in self._inboxes:
                return True
        found = bool(self._run(self._consumer_exists(inbox)))
        if found:
            with self._lock:
                self._inboxes.add(inbox)
        return found

    def remove_inbox(self, inbox: str) -> None:
        """Delete ``inbox``'s consumer and whatever it had not read."""
        inbox_name(inbox)
        with self._lock:
            self._inboxes.discard(inbox)
            loop = self._loops.get(inbox)
        if loop is not None:
            loop.cancel()
        self._run(self._delete_consumer(inbox))

    async def _ensure_consumer(self, inbox: str) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        await self._js.add_consumer(
            self._stream,
            ConsumerConfig(
                durable_name=inbox,
                filter_subject=inbox_subject(self._session_id, inbox),
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=self._ack_wait,
                max_deliver=-1,
                num_replicas=self._replicas,
            ),
        )

    async def _consumer_exists(self, inbox: str) -> bool:
        from nats.js.errors import NotFoundError

        try:
            await self._js.consumer_info(self._stream, inbox)
        except NotFoundError:
            return False
        return True

    async def _delete_consumer(self, inbox: str) -> None:
        from nats.js.errors import NotFoundError

        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self._stream, inbox)
        with contextlib.suppress(NotFoundError):
            await self._js.purge_stream(
                self._stream, subject=inbox_subject(self._session_id, inbox)
            )

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
        if not self.has_inbox(inbox):
            raise InvalidHandle(f"no inbox {inbox!r} in this session")
        self._run(self._publish(inbox, envelope.message_id, data))

    async def _publish(self, inbox: str, message_id: str, data: bytes) -> None:
        from nats.js.errors import APIError

        try:
            await self._js.publish(
                inbox_subject(self._session_id, inbox),
                data,
                stream=self._stream,
                headers={"Nats-Msg-Id": message_id},
            )
        except APIError as exc:
            if exc.err_code == _PER_SUBJECT_LIMIT:
                limit = self._settings.max_queue_depth
                raise InboxFull(
                    f"inbox {inbox!r} already holds its limit of {limit} unread envelopes"
                ) from exc
            raise SessionUnavailable(f"the NATS server refused the publish: {exc}") from exc

    def _run(self, coro: Any) -> Any:
        try:
            return self._thread.run(coro, self._timeout)
        except ShepherdError:
            raise
        except TimeoutError as exc:
            raise SessionUnavailable(
                f"no answer from the NATS servers within {self._timeout:g} s"
            ) from exc
        except Exception as exc:
            raise SessionUnavailable(f"NATS: {exc!r}") from exc

    # ------------------------------------------------------------------ subscribe

    def subscribe(self, inbox: str, handler: Handler) -> Subscription:
        """Deliver ``inbox``'s envelopes to ``handler`` on this transport's loop thread,
        starting with whatever the inbox holds. Subscribing again replaces the handler."""
        self.ensure_inbox(inbox)
        with self._lock:
            existing = self._loops.get(inbox)
            if existing is not None:
                existing.handler = handler
                return existing
            loop = self._loops[inbox] = _PullLoop(self, inbox, handler)
        self._run(self._start(loop))
        return loop

    async def _start(self, loop: _PullLoop) -> None:
        subscription = await self._js.pull_subscribe_bind(durable=loop.inbox, stream=self._stream)
        loop.task = asyncio.get_running_loop().create_task(self._pull(loop, subscription))

    async def _pull(self, loop: _PullLoop, subscription: Any) -> None:
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

    async def _deliver(self, loop: _PullLoop, message: Msg) -> None:
        try:
            envelope = decode_envelope(message.data, max_bytes=self._settings.max_envelope_bytes)
            if envelope.session_id != self._session_id:
                raise InvalidEnvelope(f"envelope is for session {envelope.session_id}")
        except ShepherdError as exc:
            await self._quarantine(loop.inbox, message, exc, authenticated=False)
            return
        verdict = self.gate.judge(loop.inbox, envelope)
        if isinstance(verdict, ShepherdError):
            await self._quarantine(loop.inbox, message, verdict, authenticated=False)
            return
        if verdict is not None:
            try:
                loop.handler(verdict)
            except Exception as exc:
                failed = ShepherdError(f"handler raised {exc!r}")
                await self._quarantine(loop.inbox, message, failed, authenticated=True)
                return
            self.delivered += 1
        await message.ack()

    async def _quarantine(
        self, inbox: str, message: Msg, error: ShepherdError, *, authenticated: bool
    ) -> None:
        if await self._quarantined.record(inbox, message.data, error, authenticated):
            self.quarantined += 1
            await message.term()
        else:  # not recorded: left unacknowledged, to be judged again later
            await message.nak(delay=self._ack_wait)

    def quarantine(self, limit: int = 1000) -> list[tuple[QuarantineRecord, bytes]]:
        """What the quarantine holds, oldest first, at most ``limit`` records."""
        return list(self._run(self._quarantined.read(limit)))

    def _unsubscribe(self, loop: _PullLoop) -> None:
        with self._lock:
            if self._loops.get(loop.inbox) is loop:
                del self._loops[loop.inbox]
        task = loop.task
        if task is not None and not self._thread.in_loop():
            self._thread.loop.call_soon_threadsafe(task.cancel)

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Stop delivering; later publishes raise. The server keeps what was not read."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            loops = list(self._loops.values())
        for loop in loops:
            loop.cancel()
        try:
            self._thread.run(self._nc.drain(), self._timeout)
        except Exception:  # no server to drain to: close the connection without it
            with contextlib.suppress(Exception):
                self._thread.run(self._nc.close(), self._timeout)
        self._thread.stop()
