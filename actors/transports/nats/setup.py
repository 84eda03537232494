"""Connecting to the NATS servers and making a session's streams (see
:mod:`actors.transports.nats.transport` for the layout and its rules)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from actors.runtime.log import logger
from actors.transports.nats.outage import Outage, outage_backoff
from protocol.core.errors import InboxFull, SessionUnavailable
from protocol.core.transport_url import TlsFiles, is_tls
from protocol.records.settings import Settings

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js.client import JetStreamContext

    from actors.transports.nats.auth import NatsLogin

__all__ = [
    "add_consumer",
    "connect",
    "consumer_exists",
    "delete_consumer",
    "inbox_stream",
    "make_streams",
    "publish",
]

#: the JetStream error code for "maximum messages per subject exceeded"
_PER_SUBJECT_LIMIT = 10077


async def publish(
    js: JetStreamContext,
    place: tuple[str, str],
    inbox: str,
    message_id: str,
    data: bytes,
    max_queue_depth: int,
) -> None:
    """Publish ``data`` for ``inbox`` at ``place`` (its stream and subject); the server's
    refusals as typed errors (the inbox's limit, an outage that may pass, anything else)."""
    from nats.js.errors import APIError, ServiceUnavailableError

    try:
        await js.publish(
            place[1], data, stream=place[0], headers={"Nats-Msg-Id": f"{inbox}/{message_id}"}
        )
    except APIError as exc:
        if exc.err_code == _PER_SUBJECT_LIMIT:  # a 503 too, but no outage
            raise InboxFull(
                f"inbox {inbox!r} already holds its limit of {max_queue_depth} unread envelopes"
            ) from exc
        if isinstance(exc, ServiceUnavailableError) or (exc.code or 0) >= 500:  # no leader yet
            raise Outage(f"the NATS servers cannot take it now: {exc}") from exc
        raise SessionUnavailable(f"the NATS server refused the publish: {exc}") from exc


async def connect(
    servers: list[str],
    user: str | None,
    password: str | None,
    session_id: str,
    timeout: float,
    login: NatsLogin | None = None,
    files: TlsFiles | None = None,
    on_error: Callable[[Exception], None] | None = None,
) -> tuple[Client, JetStreamContext]:
    """A connection that reconnects forever (to any server of the list); the caller bounds how
    long the first connection may take. ``login``: this process's NATS user
    (:mod:`actors.transports.nats.auth`); ``on_error`` hears each error the client reports (a
    refused login among them, which the client would otherwise retry forever). ``tls://`` servers:
    TLS with ``files`` (the CA bundle; None: the system's trust store; a client certificate if
    given), the context built here for every process (:mod:`actors.transports.nats.tls`).

    A first connection that every listed server refused for TLS (a certificate that does not
    verify, a scheme the server does not speak) is ``session_unavailable`` at once, naming the
    servers and the cause: trying again would not change it."""
    from actors.transports.nats import tls

    secure = is_tls(servers[0]) if servers else False
    made: list[Client] = []
    refused: dict[str, BaseException] = {}  # listed server -> why TLS failed there
    warned: set[str] = set()

    async def disconnected() -> None:
        if made and made[0].is_closed:  # closed on purpose
            return
        logger.warning("nats: disconnected from {}", servers)

    async def reconnected() -> None:
        logger.info("nats: reconnected")

    async def error(exc: Exception) -> None:
        if on_error is not None:
            on_error(exc)
        if not tls.is_tls_failure(exc):
            logger.debug("nats: {!r}", exc)
            return
        cause = tls.tls_cause(exc)
        if cause not in warned:  # once per cause: a reconnecting client retries 4 times a second
            warned.add(cause)
            logger.warning("nats: {} ({})", cause, servers)
        if made:  # connected once: the client goes on trying (a certificate may be renewed)
            return
        # nats-py names the server it is handshaking with before the handshake; raising here
        # ends its first-connection loop (it awaits this callback in its except clause)
        server = getattr(nc, "_current_server", None)
        where = getattr(getattr(server, "uri", None), "netloc", None)
        refused[str(where)] = exc
        if all(url.split("://", 1)[1] in refused for url in servers):
            raise SessionUnavailable(
                f"the NATS servers at {', '.join(servers)} refused the connection: "
                f"{tls.tls_cause(exc)}"
            )

    nc = tls.client_class(secure)()
    options: dict[str, Any] = dict(login.connect_options()) if login is not None else {}
    if secure:
        options["tls"] = tls.client_context(files)
    try:
        await nc.connect(
            servers,
            user=user,
            password=password,
            name=f"shepherd {session_id}",
            connect_timeout=timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
            error_cb=error,
            **options,
        )
    except BaseException:
        # a first connection that never completed has only its socket to let go (nats-py's own
        # close waits for a TLS shutdown that a refused handshake never answers)
        socket = getattr(nc, "_transport", None)
        if socket is not None:
            with contextlib.suppress(Exception):
                socket.close()
        raise
    made.append(nc)
    return nc, nc.jetstream(timeout=timeout)


def inbox_stream(name: str, subjects: str, settings: Settings, replicas: int) -> Any:
    """The session's inbox stream: work-queue retention, one subject per inbox, the queue
    limit per subject (discard new: the next publish is refused)."""
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    return StreamConfig(
        name=name,
        subjects=[subjects],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msgs_per_subject=settings.max_queue_depth,
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
        max_msg_size=settings.max_envelope_bytes,
    )


async def make_streams(js: JetStreamContext, configs: Iterable[Any], ceiling_s: float) -> None:
    """Create each stream, or update it if it exists with other settings (a restart with other
    limits). A cluster still electing its leaders answers late or with 503, and a stream being
    made may be "in use" to one answer and "not found" to the next (the servers have not all
    heard of it yet): asked again until ``ceiling_s``, since creating a stream twice is
    harmless."""
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError

    loop = asyncio.get_running_loop()
    deadline = loop.time() + ceiling_s
    for config in configs:
        pauses = outage_backoff()
        while True:
            try:
                try:
                    await js.add_stream(config)
                except BadRequestError:  # the name is taken by another config: update it
                    await js.update_stream(config)
                break
            except (NatsTimeout, ServiceUnavailableError):
                if loop.time() > deadline:
                    raise
            except NotFoundError:  # "in use", then "not found": the stream is being made
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(pauses.next())  # a retry's pace, jittered


async def add_consumer(
    js: JetStreamContext, stream: str, inbox: str, subject: str, ack_wait: float, replicas: int
) -> None:
    """The inbox's durable pull consumer (creating it again with the same config is harmless)."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    from actors.transports.nats.replies import one_shot_threshold

    await js.add_consumer(
        stream,
        ConsumerConfig(
            durable_name=inbox,
            filter_subject=subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=ack_wait,
            max_deliver=-1,
            num_replicas=replicas,
            # a one-shot reply inbox whose owner died goes by itself (its leftover answer is
            # purged by the parent's sweep); the others live as long as the session
            inactive_threshold=one_shot_threshold(inbox),
        ),
    )


async def consumer_exists(js: JetStreamContext, stream: str, inbox: str) -> bool:
    from nats.js.errors import NotFoundError

    try:
        await js.consumer_info(stream, inbox)
    except NotFoundError:
        return False
    return True


async def delete_consumer(js: JetStreamContext, stream: str, subject: str, inbox: str) -> None:
    """The inbox's consumer and what its subject still holds."""
    from nats.js.errors import NotFoundError

    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(stream, inbox)
    with contextlib.suppress(NotFoundError):
        await js.purge_stream(stream, subject=subject)
