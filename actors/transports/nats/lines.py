"""A session's append-only JSON lines on NATS JetStream: what a
:class:`~actors.records.jsonlines.JsonLinesFile` keeps on disk, kept by the servers instead, so
that a parent started again on another host finds every line (the journal and the
notifications on top: :mod:`actors.transports.nats.journal`).

Layout: stream ``<session>_<kind>`` (limits retention, nothing expires, file storage, R3 on a
cluster of three or more), one subject ``shepherd.<session>.<kind>``. A message holds one or
more lines (the lines of one append, up to :data:`CHUNK_BYTES` a message), in order.

Rules:
- **Durable before told.** ``append`` returns once the stream acknowledged every message, which
  with the servers' ``sync_interval: always`` (:mod:`actors.transports.nats.server`) means on disk
  (on a majority of a cluster). An outage (a server's death, a leader's election) is waited out for
  at most :data:`OUTAGE_CEILING_S`, trying the same message again; past that it raises
  ``session_unavailable`` and the caller tells nobody, as when a file's ``fsync`` fails.
- **One writer.** Each message is published with the sequence the writer expects to be the
  stream's last (``Nats-Expected-Last-Sequence``): the server refuses it if anyone else
  appended since this writer last read or wrote, and ``append`` raises ``session_unavailable``.
  Two supervisors of one session cannot both write: the second to append loses, before it told
  anyone (compare-and-set: "first terminal event wins" across processes and hosts).
- **Read in order, damage reported.** ``read`` returns every line it can decode, in order; one
  it cannot is reported in :attr:`problems` with its message and line, never skipped in
  silence.
- A lost acknowledgement is not a lost line: each message has a ``Nats-Msg-Id`` made of the
  writer's id and its count, so a publish retried by the client is stored once.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from actors.records.jsonlines import LineProblem
from actors.transports.nats.loop import LoopThread
from actors.transports.nats.outage import Outage, outage_backoff, through_outage
from actors.transports.nats.setup import connect, make_streams
from protocol.core.errors import InvalidHandle, SessionUnavailable
from protocol.core.transport_url import TlsFiles

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js.client import JetStreamContext

    from actors.transports.nats.auth import NatsLogin

__all__ = [
    "CHUNK_BYTES",
    "OUTAGE_CEILING_S",
    "WRONG_LAST_SEQUENCE",
    "NatsLines",
    "lines_stream",
    "lines_subject",
]

T = TypeVar("T")

#: lines per message at most this many bytes (a single longer line is one message): under the
#: servers' default 1 MiB payload limit
CHUNK_BYTES = 512 * 1024
#: the JetStream error code for "wrong last sequence"
WRONG_LAST_SEQUENCE = 10071
#: messages asked for per fetch when reading back
_READ_BATCH = 1000
#: how long an append waits out an outage (a server's death, a new leader's election: seconds
#: on a cluster of three) before it raises ``session_unavailable``
OUTAGE_CEILING_S = 60.0
#: how long reading everything back may take at most
_READ_CEILING_S = 600.0


def lines_stream(session_id: str, kind: str) -> str:
    return f"{session_id}_{kind}"


def lines_subject(session_id: str, kind: str) -> str:
    return f"shepherd.{session_id}.{kind}"


def _chunks(lines: Sequence[bytes]) -> list[bytes]:
    out: list[bytes] = []
    current = b""
    for line in lines:
        if current and len(current) + len(line) > CHUNK_BYTES:
            out.append(current)
            current = b""
        current += line
    if current:
        out.append(current)
    return out


class NatsLines:
    """One session's lines of one ``kind`` on JetStream (module rules)."""

    def __init__(
        self,
        servers: Sequence[str],
        session_id: str,
        kind: str,
        *,
        replicas: int = 1,
        request_timeout_s: float = 5.0,
        user: str | None = None,
        password: str | None = None,
        create: bool = True,
        outage_s: float = OUTAGE_CEILING_S,
        login: NatsLogin | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        """``create=False``: the stream must exist already (a session resumed from the
        servers' records); if it does not, :class:`~protocol.core.errors.InvalidHandle`. ``login``:
        this process's NATS user (:mod:`actors.transports.nats.auth`); ``tls``: the TLS files of ``tls://``
        servers (:mod:`actors.transports.nats.tls`)."""
        self._session_id = session_id
        self._stream = lines_stream(session_id, kind)
        self._subject = lines_subject(session_id, kind)
        self._timeout = request_timeout_s
        self._outage_s = outage_s
        self._appending = threading.Lock()
        self._writer = secrets.token_hex(8)
        self._count = 0
        self._last_seq = 0
        self._problems: list[LineProblem] = []
        #: why this writer may append no more (its session's claim was taken over)
        self._fenced: str | None = None
        self._loop = LoopThread(f"shepherd-nats-{kind}")
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        try:
            self._nc, self._js = self._run(
                connect(list(servers), user, password, session_id, request_timeout_s, login, tls),
                what="connect",
            )
            if create:
                self._run(self._ensure_stream(replicas), what=f"make the stream {self._stream}")
            elif not self._run(self._stream_exists(), what=f"look for {self._stream}"):
                raise InvalidHandle(
                    f"session {session_id} has no {kind} on these NATS servers "
                    f"(no stream {self._stream})"
                )
            self._last_seq = self._run(self._stream_last(), what=f"read {self._stream}")
        except BaseException:
            self.close()
            raise

    @property
    def stream(self) -> str:
        return self._stream

    @property
    def problems(self) -> list[LineProblem]:
        """Lines that could not be read back, each named by its message and line."""
        return self._problems

    def _run(self, coro: Any, *, what: str, timeout: float | None = None) -> Any:
        return self._loop.answer(coro, self._timeout * 4 if timeout is None else timeout, what)

    def _require_js(self) -> JetStreamContext:
        if self._js is None:
            raise SessionUnavailable(f"{self._stream} is closed")
        return self._js

    async def _ensure_stream(self, replicas: int) -> None:
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

        config = StreamConfig(
            name=self._stream,
            subjects=[self._subject],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=replicas,
            discard=DiscardPolicy.NEW,
            max_msg_size=max(CHUNK_BYTES, 1024 * 1024),
        )
        await make_streams(self._require_js(), [config], self._timeout * 4)

    async def _stream_exists(self) -> bool:
        from nats.js.errors import NotFoundError

        try:
            await self._require_js().stream_info(self._stream)
        except NotFoundError:
            return False
        return True

    async def _stream_last(self) -> int:
        info = await self._require_js().stream_info(self._stream)
        return int(info.state.last_seq or 0)

    # ------------------------------------------------------------------ writing

    def append(self, lines: Sequence[bytes]) -> None:
        """Every line (each ending in a newline) durable before this returns, in order. Appends
        from several threads (the broker, the watchers) go one at a time: each names the
        sequence the last one left, and two at once would refuse each other."""
        with self._appending:
            if self._fenced is not None:
                raise SessionUnavailable(self._fenced)
            for chunk in _chunks(lines):
                self._count += 1
                self._last_seq = self._run(
                    self._publish(chunk, f"{self._writer}-{self._count}", self._last_seq),
                    what=f"append to {self._stream}",
                    timeout=self._outage_s + 2 * self._timeout,
                )

    async def _publish(self, data: bytes, msg_id: str, expected_last: int) -> int:
        """One message appended, waiting out an outage (a server down, a leader being
        elected) for at most :data:`OUTAGE_CEILING_S`. Every attempt is the same message (its
        id and the sequence it follows), so an attempt whose acknowledgement was lost is not
        stored twice: the server drops the repeat, and if it refuses it as following the wrong
        sequence instead, the stream's last message is read to see whether it is ours."""
        import nats.errors
        from nats.js.errors import APIError, ServiceUnavailableError

        headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Sequence": str(expected_last)}
        deadline = asyncio.get_running_loop().time() + self._outage_s
        backoff, tried = outage_backoff(), False
        while True:
            try:
                ack = await self._require_js().publish(
                    self._subject, data, timeout=self._timeout, stream=self._stream, headers=headers
                )
                return int(ack.seq)
            except ServiceUnavailableError as exc:  # no leader yet: an outage
                outage: Exception = exc
            except APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    if (exc.code or 0) >= 500:  # the servers' own trouble: an outage
                        outage = exc
                    else:
                        raise SessionUnavailable(
                            f"{self._stream} refused an append: {exc}"
                        ) from None
                else:
                    try:
                        stored = await self._stored_as(msg_id) if tried else None
                    except Exception as lookup:  # cannot tell yet: try again, as in an outage
                        outage = lookup
                    else:
                        if stored is not None:
                            return stored
                        raise SessionUnavailable(
                            f"another process appended to {self._stream} after message "
                            f"{expected_last} (only one supervisor may write a session's "
                            "records): this one stops writing"
                        ) from None
            except (TimeoutError, nats.errors.Error) as exc:  # no answer, no connection
                outage = exc
            tried = True
            pause = backoff.next()
            if asyncio.get_running_loop().time() + pause > deadline:
                raise SessionUnavailable(
                    f"{self._stream}: the NATS servers took no append for "
                    f"{self._outage_s:g} s ({outage!r})"
                )
            await asyncio.sleep(pause)  # a backoff between attempts, while the servers recover

    async def _stored_as(self, msg_id: str) -> int | None:
        """The stream's sequence of its last message if that message is ``msg_id``, else None;
        raises if the stream cannot be asked now."""
        last = await self._require_js().get_last_msg(self._stream, self._subject)
        headers = last.headers or {}
        if last.seq is None or headers.get("Nats-Msg-Id") != msg_id:
            return None
        return int(last.seq)

    def fence(self, why: str) -> None:
        """Every later append refused with ``why`` (another supervisor holds the session now)."""
        self._fenced = why

    # ------------------------------------------------------------------ reading

    def read(self, decode: Callable[[bytes], T]) -> list[T]:
        """Every line ``decode`` takes, in order (each one it cannot is reported); also where
        this writer's next append must follow."""
        # a read may be made again: a cluster electing a leader (a consumer not made yet, no
        # answer) is waited out as an outage
        got: tuple[list[T], list[LineProblem], int] = self._run(
            through_outage(lambda: self._read_all(decode), self._outage_s, f"read {self._stream}"),
            what=f"read {self._stream}",
            timeout=_READ_CEILING_S + self._outage_s,
        )
        items, problems, last = got
        self._problems.extend(problems)
        with self._appending:
            self._last_seq = max(self._last_seq, last)
        return items

    async def _read_all(
        self, decode: Callable[[bytes], T]
    ) -> tuple[list[T], list[LineProblem], int]:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        last = await self._stream_last()
        items: list[T] = []
        problems: list[LineProblem] = []
        if last == 0:
            return items, problems, 0
        subscription = await self._require_js().pull_subscribe(
            self._subject,
            durable=None,
            stream=self._stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=60.0
            ),
        )
        try:
            seen = 0
            while seen < last:
                try:
                    messages = await subscription.fetch(_READ_BATCH, timeout=self._timeout)
                except (TimeoutError, NatsTimeout):
                    raise Outage(
                        f"{self._stream} stopped answering at message {seen} of {last}"
                    ) from None
                for message in messages:
                    seen = int(message.metadata.sequence.stream)
                    if seen > last:
                        break  # appended after we looked: a reader reads once, at its start
                    self._decode(message.data, seen, decode, items, problems)
        finally:
            await subscription.unsubscribe()
        return items, problems, last

    def _decode(
        self,
        data: bytes,
        seq: int,
        decode: Callable[[bytes], T],
        items: list[T],
        problems: list[LineProblem],
    ) -> None:
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                where = f"nats stream {self._stream}, message {seq}"
                problems.append(
                    LineProblem(path=where, line=number, kind="corrupt", detail=str(exc))
                )

    def close(self) -> None:
        if self._nc is not None:
            nc, self._nc, self._js = self._nc, None, None
            with contextlib.suppress(Exception):  # the servers may be gone: nothing more to do
                self._loop.run(nc.close(), self._timeout)
        self._loop.stop()
