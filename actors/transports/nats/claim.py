"""One parent per session across hosts: a supervisor that keeps its records on the NATS servers
(``serve --journal nats``) claims the session there before it reads them, and holds the claim as
a lease for as long as it runs. A second supervisor of the session, on any host, is refused
(``session_busy``) naming the live one; a dead one's claim is taken over.

Layout: stream ``<session>_parent`` (subject ``shepherd.<session>.parent``, one message kept),
whose message says who holds the session (:class:`Claim`). The holder answers requests on
``shepherd.<session>.parent.<writer>`` with its claim.

Rules:
- **Claim by compare-and-set.** The newest claim is read, and the new one is appended naming
  that claim's sequence (``Nats-Expected-Last-Sequence``): of two supervisors claiming at once,
  the servers take one; the other reads the winner's claim and is refused.
- **A lease, renewed.** The holder appends its claim again every :data:`RENEW_EVERY_S`, each
  naming the sequence of its last (so a holder whose claim was taken over finds out at its next
  renewal, and its records refuse it from then on: :meth:`ParentClaim.lost`). A supervisor that
  stops cleanly appends a *released* claim, which the next one takes at once.
- **Taken over only when both say gone.** A claim is held while its writer answers on its
  presence subject (``session_busy`` at once), and while it was renewed less than
  :data:`LEASE_S` ago. A claim is taken over only when the servers say nobody listens on its
  presence subject *and* it is not renewed for :data:`LEASE_S` (watched from the moment it was
  read; on the same host, from the moment its writer last renewed it, by the one clock they
  share). Either alone can be wrong for a moment on a loaded cluster: what the servers know of
  who listens travels between them (a live writer may look absent), and a loaded holder may
  renew late; both wrong at once is what it would take to run two parents, and even then the
  journal's own one-writer rule (:mod:`actors.transports.nats.lines`) refuses every append that does
  not follow the last one.
- A writer that neither answers nor is said gone (asked :data:`_ASKS` times: its host lost,
  which the servers notice only after their pings go unanswered) is taken as live:
  ``session_busy``, saying so.
- The servers' own trouble (no stream leader yet, no answer) is waited out as an outage, up to
  the bound the caller gives, then ``session_unavailable``.
- A claim judged gone whose writer renews it before the new claim is appended (the append
  then follows the wrong sequence, and a newer claim of that writer is read) is live after
  all: ``session_busy`` naming it. Otherwise the claim is read again (at most :data:`_TRIES`
  times, with the pauses of an outage's wait: a read just after the refusal may not show yet, on a
  cluster, the claim that caused it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from loguru import logger

from actors.transports.nats.lines import WRONG_LAST_SEQUENCE, lines_stream, lines_subject
from actors.transports.nats.loop import LoopThread
from actors.transports.nats.outage import Outage, outage_backoff, through_outage
from actors.transports.nats.setup import connect, make_streams
from protocol.core.errors import SessionBusy, SessionUnavailable, ShepherdError
from protocol.core.transport_url import TlsFiles

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.js.api import RawStreamMsg
    from nats.js.client import JetStreamContext

    from actors.transports.nats.auth import NatsLogin

__all__ = ["CLAIM", "LEASE_S", "RENEW_EVERY_S", "Claim", "ParentClaim", "waited_out"]

T = TypeVar("T")

#: the kind of the claims' stream (:func:`actors.transports.nats.lines.lines_stream`)
CLAIM = "parent"
#: how often the holder renews its claim
RENEW_EVERY_S = 0.5
#: a claim not renewed for this long, whose writer nobody listens for, is taken over
LEASE_S = 3.0
#: claims tried at most (each lost one was lost to a claim made meanwhile, which is read next)
_TRIES = 10
#: a claim's writer is asked this many times whether it is present before a silence is taken
#: as a live writer that cannot answer (each ask waits the request timeout)
_ASKS = 4
#: how often a claim is read again while its lease is watched
_WATCH_EVERY_S = 0.2


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """Who claimed the session: what a refused supervisor is told."""

    writer: str
    host: str
    pid: int
    session_dir: str
    #: when its writer last renewed it, by its writer's clock (seconds since the epoch)
    renewed_at: float = 0.0
    #: given up by its writer (a clean stop): the next supervisor takes it at once
    released: bool = False

    def named(self) -> str:
        return f"pid {self.pid} on host {self.host}, session directory {self.session_dir}"


_DECODER = msgspec.json.Decoder(Claim)


async def waited_out(attempt: Callable[[], Awaitable[T]], outage_s: float, whose: str) -> T:
    """``await attempt()`` through the servers' own trouble, as every NATS read waits it out
    (:func:`~actors.transports.nats.outage.through_outage`, at most ``outage_s``); a refusal,
    or trouble that outlasted the wait, is ``session_unavailable`` naming ``whose`` claim."""
    from nats.js.errors import APIError

    try:
        return await through_outage(attempt, outage_s, f"the claim on {whose}")
    except APIError as exc:
        raise SessionUnavailable(f"the NATS servers refused the claim on {whose}: {exc}") from None
    except Outage as exc:
        raise SessionUnavailable(
            f"the NATS servers could not be asked who serves {whose} (waited {outage_s:g} s): "
            f"{exc.message}"
        ) from None


class _Moved(Exception):
    """The claim read changed meanwhile (another supervisor claimed): it is read again."""


class ParentClaim:
    """This supervisor's claim on a session whose records are on the NATS servers (module
    rules); raises ``session_busy`` naming the live parent, ``session_unavailable`` if the
    servers cannot be asked within ``outage_s``. ``lost`` is called (once, on the claim's own
    thread) if the claim is ever taken over while this supervisor runs. :meth:`close` gives it
    up."""

    def __init__(
        self,
        servers: Sequence[str],
        session_id: str,
        session_dir: str,
        *,
        replicas: int = 1,
        request_timeout_s: float = 5.0,
        outage_s: float = 0.0,
        login: NatsLogin | None = None,
        tls: TlsFiles | None = None,
        lost: Callable[[str], None] | None = None,
    ) -> None:
        self._session_id = session_id
        self._stream = lines_stream(session_id, CLAIM)
        self._subject = lines_subject(session_id, CLAIM)
        self._timeout = request_timeout_s
        self._outage_s = outage_s
        self._lost = lost
        self.claim = Claim(
            writer=secrets.token_hex(8),
            host=socket.gethostname(),
            pid=os.getpid(),
            session_dir=session_dir,
        )
        #: the sequence of this supervisor's newest claim (0: none yet)
        self._seq = 0
        self._renewing: asyncio.Task[None] | None = None
        self._answering: Subscription | None = None
        self._loop = LoopThread("shepherd-nats-claim")
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        try:
            self._nc, self._js = self._run(
                connect(list(servers), None, None, session_id, request_timeout_s, login, tls),
                what="connect",
            )
            self._run(
                self._take(replicas),
                what=f"claim the session in {self._stream}",
                # a silent writer is asked _ASKS times; a lease watched; an outage waited out
                limit=self._timeout * (4 + _ASKS) + LEASE_S * 2 + outage_s,
            )
        except ShepherdError:
            self.close()
            raise
        except Exception as exc:  # the servers' trouble, past what was waited out
            self.close()
            raise SessionUnavailable(
                f"the NATS servers could not be asked who serves session {session_id}: {exc!r}"
            ) from None
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Any, *, what: str, limit: float | None = None) -> Any:
        return self._loop.answer(coro, self._timeout * 4 if limit is None else limit, what)

    def _presence(self, writer: str) -> str:
        return f"{self._subject}.{writer}"

    def _require_js(self) -> JetStreamContext:
        if self._js is None:
            raise SessionUnavailable(f"{self._stream} is closed")
        return self._js

    # ------------------------------------------------------------------ claiming

    async def _take(self, replicas: int) -> None:
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

        assert self._nc is not None
        config = StreamConfig(
            name=self._stream,
            subjects=[self._subject],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=replicas,
            discard=DiscardPolicy.NEW,
            max_msgs_per_subject=1,  # the newest claim is all that counts
        )
        mine = msgspec.json.encode(self.claim)

        async def answer(msg: Msg) -> None:
            await msg.respond(mine)

        # answering before claiming: whoever reads this claim finds its writer present
        self._answering = await self._nc.subscribe(self._presence(self.claim.writer), cb=answer)
        await self._nc.flush()  # bounded by _run
        # made as the records' streams are: a stream being made on a cluster may be "not
        # found" to one answer (the servers have not all heard of it), asked again meanwhile
        await self._waited_out(
            lambda: make_streams(self._require_js(), [config], self._timeout * 4)
        )
        tries, pauses = 0, outage_backoff()  # doubling from 50 ms to 1 s, in random steps
        while True:
            try:
                self._seq = await self._waited_out(self._claim_once)
                break
            except _Moved:
                tries += 1
                if tries >= _TRIES:
                    raise SessionBusy(
                        f"session {self._session_id}: other supervisors kept claiming it at "
                        "the same time"
                    ) from None
                # the next read may be as stale as the last one was: let the servers catch up
                await asyncio.sleep(pauses.next())  # a retry's pace
        self._renewing = asyncio.get_running_loop().create_task(self._renew())

    async def _claim_once(self) -> int:
        """The new claim appended after the newest one, whose writer is gone; its sequence."""
        from nats.js.errors import APIError

        last_seq, gone = await self._refuse_if_held()
        try:
            claim = msgspec.structs.replace(self.claim, renewed_at=time.time())
            return await self._append(claim, last_seq)
        except APIError as exc:
            if exc.err_code != WRONG_LAST_SEQUENCE:
                raise
        now_seq, now = await self._last()
        # a read just after the refusal may not show the claim that caused it yet (a cluster):
        # only a newer claim of the same writer says it renewed
        newer = now if now_seq > last_seq else None
        if gone is not None and newer is not None and newer.writer == gone.writer:
            raise self._busy(newer)  # renewed meanwhile: live, though it looked gone
        raise _Moved  # another supervisor claimed meanwhile

    async def _append(self, claim: Claim, after: int) -> int:
        ack = await self._require_js().publish(
            self._subject,
            msgspec.json.encode(claim),
            timeout=self._timeout,
            stream=self._stream,
            headers={"Nats-Expected-Last-Sequence": str(after)},
        )
        return int(ack.seq)

    async def _waited_out(self, attempt: Callable[[], Awaitable[T]]) -> T:
        return await waited_out(attempt, self._outage_s, f"session {self._session_id}")

    async def _last(self) -> tuple[int, Claim | None]:
        """The newest claim's sequence (0: none) and the claim (None: not one this code
        made, or released: nobody answers for it)."""
        from nats.js.errors import NotFoundError

        try:
            last: RawStreamMsg = await self._require_js().get_last_msg(self._stream, self._subject)
        except NotFoundError:
            return 0, None
        assert last.seq is not None
        try:
            held = _DECODER.decode(last.data or b"")
        except (msgspec.DecodeError, msgspec.ValidationError):
            return int(last.seq), None
        return int(last.seq), None if held.released else held

    async def _refuse_if_held(self) -> tuple[int, Claim | None]:
        """The sequence of the newest claim (0: none) and that claim, whose writer is gone
        (None: none, or released); ``session_busy`` naming it if it is held (or cannot be told
        gone)."""
        seq, held = await self._last()
        if held is None:
            return seq, None
        answer = await self._ask(held)
        if answer is not None:  # it answered: live, named by its answer
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                held = _DECODER.decode(answer)
            raise self._busy(held)
        await self._watch_lease(seq, held)
        return seq, held

    async def _ask(self, held: Claim) -> bytes | None:
        """Its writer's answer, or None when the servers say nobody listens for it."""
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout

        assert self._nc is not None
        for _ in range(_ASKS):
            try:
                reply = await self._nc.request(
                    self._presence(held.writer), b"", timeout=self._timeout
                )
                return bytes(reply.data)
            except NoRespondersError:
                return None
            except (NatsTimeout, TimeoutError):
                continue  # just after one ended, a server may still route to it: ask again
        raise SessionBusy(
            f"session {self._session_id} was claimed by a supervisor ({held.named()}) that "
            f"did not answer, asked {_ASKS} times ({self._timeout:g} s each): it is taken as "
            "live (if its host is gone, the NATS servers forget it within minutes; try again "
            "then)"
        )

    async def _watch_lease(self, seq: int, held: Claim) -> None:
        """Returns once the claim at ``seq`` went :data:`LEASE_S` without a renewal;
        ``session_busy`` if its writer renews it meanwhile; :class:`_Moved` if another claim
        replaced it."""
        wait = LEASE_S
        if held.host == self.claim.host:  # one clock: the lease counts from its last renewal
            wait = min(LEASE_S, max(0.0, LEASE_S - (time.time() - held.renewed_at)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(_WATCH_EVERY_S, left))
            now_seq, now = await self._last()
            if now_seq == seq:
                continue
            if now is not None and now.writer == held.writer:
                raise self._busy(now)  # renewed: live, though the servers said otherwise
            raise _Moved

    def _busy(self, held: Claim) -> SessionBusy:
        return SessionBusy(
            f"session {self._session_id} has a live parent supervisor ({held.named()}); stop "
            "it first"
        )

    # ------------------------------------------------------------------ holding

    async def _renew(self) -> None:
        """The lease renewed every :data:`RENEW_EVERY_S` until the claim is given up, or found
        taken over (then :attr:`lost`)."""
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            if not await self._renew_once():
                return

    async def _renew_once(self) -> bool:
        """One renewal; False once the claim is found taken over (:attr:`lost` told). A
        renewal the servers cannot take now (an outage) is tried at the next one."""
        from nats.js.errors import APIError

        renewed = msgspec.structs.replace(self.claim, renewed_at=time.time())
        try:
            self._seq = await self._append(renewed, self._seq)
            return True
        except APIError as exc:
            if exc.err_code != WRONG_LAST_SEQUENCE:
                return True
        except Exception:  # an outage: the next renewal tries again
            return True
        # not after its own last claim: an acknowledgement lost, or taken over
        try:
            seq, now = await self._last()
        except Exception:  # cannot tell now: the next renewal asks again
            return True
        if now is not None and now.writer == self.claim.writer:
            self._seq = seq
            return True
        taker = f" by a supervisor ({now.named()})" if now is not None else ""
        self._on_lost(f"session {self._session_id} was taken over{taker}")
        return False

    def _on_lost(self, why: str) -> None:
        logger.error("{}: this supervisor writes none of its records from now on", why)
        if self._lost is not None:
            with contextlib.suppress(Exception):
                self._lost(why)

    def close(self) -> None:
        """The claim given up: nobody answers for it, and it is marked released (a next
        supervisor takes over at once)."""
        if self._nc is not None:
            nc, self._nc = self._nc, None
            with contextlib.suppress(Exception):  # the servers may be gone, and it with them
                self._loop.run(self._release(), self._timeout)
            with contextlib.suppress(Exception):
                self._loop.run(nc.close(), self._timeout)
        self._js = None
        self._loop.stop()

    async def _release(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        if self._seq:  # only its own claim, and only if nobody took it over since
            released = msgspec.structs.replace(self.claim, released=True, renewed_at=time.time())
            await self._append(released, self._seq)
