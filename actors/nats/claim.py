"""One parent per session across hosts: a supervisor that keeps its records on the NATS servers
(``serve --journal nats``) claims the session there before it reads them, and answers for its
claim for as long as it runs. A second supervisor of the session, on any host, is refused
(``session_busy``) naming the live one; a dead one's claim is taken over.

Layout: stream ``<session>_parent`` (subject ``shepherd.<session>.parent``, kept as the records
are), one message per claim: who made it (:class:`Claim`). The holder answers requests on
``shepherd.<session>.parent.<writer>`` with its claim.

Rules:
- **Whole-life presence.** Before it claims, a supervisor answers on its own presence subject;
  it stops answering when its connection to the servers ends (its process ends, however: the
  servers drop the connection) or when it closes the claim (shutdown).
- **Claim by compare-and-set.** The newest claim is read; if its writer answers on its
  presence subject, the session is ``session_busy`` naming it (its host, pid and directory).
  If the servers say nobody listens there (its process is gone), the new claim is appended
  naming the sequence of the one read (``Nats-Expected-Last-Sequence``): of two supervisors
  claiming at once, the servers take one; the other reads the winner's claim and is refused.
- A writer is believed gone only when the servers say twice, a moment apart, that nobody
  listens on its presence subject (what a cluster knows of who listens travels between its
  servers in a moment). One that does not answer, asked four times (its host lost, which the
  servers notice only after their pings go unanswered), is taken as live: ``session_busy``,
  saying so. Nothing is taken over while its owner may still write.
- The journal's own one-writer rule (:mod:`actors.nats.lines`) still refuses any append that
  does not follow the last one: the claim refuses the second parent at its start, before it
  read or wrote any record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from actors.nats.lines import WRONG_LAST_SEQUENCE, lines_stream, lines_subject
from actors.nats.loop import LoopThread
from actors.nats.setup import connect, make_streams
from protocol.errors import SessionBusy, SessionUnavailable, ShepherdError
from protocol.transport_url import TlsFiles

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

    from actors.nats.auth import NatsLogin

__all__ = ["CLAIM", "Claim", "ParentClaim"]

#: the kind of the claims' stream (:func:`actors.nats.lines.lines_stream`)
CLAIM = "parent"
#: claims tried at most (each lost one was lost to a claim made meanwhile, which is read next)
_TRIES = 10
#: a claim's writer is asked this many times whether it is present before a silence is taken
#: as a live writer that cannot answer (each ask waits the request timeout)
_ASKS = 4
#: the pause between two "no responders" before a writer is believed gone
_ABSENT_PAUSE_S = 0.25


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """Who claimed the session: what a refused supervisor is told."""

    writer: str
    host: str
    pid: int
    session_dir: str

    def named(self) -> str:
        return f"pid {self.pid} on host {self.host}, session directory {self.session_dir}"


_DECODER = msgspec.json.Decoder(Claim)


class ParentClaim:
    """This supervisor's claim on a session whose records are on the NATS servers (module
    rules); raises ``session_busy`` naming the live parent, ``session_unavailable`` if the
    servers cannot be asked. :meth:`close` gives it up."""

    def __init__(
        self,
        servers: Sequence[str],
        session_id: str,
        session_dir: str,
        *,
        replicas: int = 1,
        request_timeout_s: float = 5.0,
        login: NatsLogin | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self._session_id = session_id
        self._stream = lines_stream(session_id, CLAIM)
        self._subject = lines_subject(session_id, CLAIM)
        self._timeout = request_timeout_s
        self.claim = Claim(
            writer=secrets.token_hex(8),
            host=socket.gethostname(),
            pid=os.getpid(),
            session_dir=session_dir,
        )
        self._loop = LoopThread("shepherd-nats-claim")
        self._nc: Client | None = None
        try:
            self._nc, js = self._run(
                connect(list(servers), None, None, session_id, request_timeout_s, login, tls),
                what="connect",
            )
            self._run(
                self._take(js, replicas),
                what=f"claim the session in {self._stream}",
                limit=self._timeout * (4 + _ASKS),  # a silent writer is asked _ASKS times
            )
        except ShepherdError:
            self.close()
            raise
        except Exception as exc:  # the servers' trouble (a connection lost, no leader yet)
            self.close()
            raise SessionUnavailable(
                f"the NATS servers could not be asked who serves session {session_id}: {exc!r}"
            ) from None
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Any, *, what: str, limit: float | None = None) -> Any:
        limit = self._timeout * 4 if limit is None else limit
        try:
            return self._loop.run(coro, limit)
        except TimeoutError:
            raise SessionUnavailable(
                f"the NATS servers did not answer within {limit:g} s ({what})"
            ) from None

    def _presence(self, writer: str) -> str:
        return f"{self._subject}.{writer}"

    async def _take(self, js: JetStreamContext, replicas: int) -> None:
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
        from nats.js.errors import APIError

        assert self._nc is not None
        config = StreamConfig(
            name=self._stream,
            subjects=[self._subject],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=replicas,
            discard=DiscardPolicy.NEW,
        )
        await make_streams(js, [config], self._timeout * 2)
        mine = msgspec.json.encode(self.claim)

        async def answer(msg: Msg) -> None:
            await msg.respond(mine)

        # answering before claiming: whoever reads this claim finds its writer present
        await self._nc.subscribe(self._presence(self.claim.writer), cb=answer)
        await self._nc.flush()  # bounded by _run
        for _ in range(_TRIES):
            last_seq = await self._refuse_if_held(js)
            headers = {"Nats-Expected-Last-Sequence": str(last_seq)}
            try:
                await js.publish(
                    self._subject, mine, timeout=self._timeout, stream=self._stream, headers=headers
                )
                return
            except APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise SessionUnavailable(f"{self._stream} refused the claim: {exc}") from None
                # another supervisor claimed meanwhile: its claim is read next
        raise SessionBusy(
            f"session {self._session_id}: other supervisors kept claiming it at the same time"
        )

    async def _refuse_if_held(self, js: JetStreamContext) -> int:
        """The sequence of the newest claim (0: none), whose writer is gone; ``session_busy``
        naming it if it is present (or cannot be told gone)."""
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import NotFoundError

        assert self._nc is not None
        try:
            last = await js.get_last_msg(self._stream, self._subject)
        except NotFoundError:
            return 0
        assert last.seq is not None
        try:
            held = _DECODER.decode(last.data or b"")
        except (msgspec.DecodeError, msgspec.ValidationError):
            return int(last.seq)  # not a claim this code made: nobody answers for it
        # On a cluster, who listens where travels between the servers in a moment: just after
        # a writer subscribed elsewhere, a server may not know it yet ("no responders"), and
        # just after one ended, a server may still route to it (a time-out). So absence is
        # believed only when said twice in a row, a moment apart, and a silence is asked again.
        absent = 0
        for _ in range(_ASKS):
            try:
                answer = await self._nc.request(
                    self._presence(held.writer), b"", timeout=self._timeout
                )
                break
            except NoRespondersError:
                absent += 1
                if absent == 2:
                    return int(last.seq)  # its writer is gone
                await asyncio.sleep(_ABSENT_PAUSE_S)
            except (NatsTimeout, TimeoutError):
                absent = 0
        else:
            raise SessionBusy(
                f"session {self._session_id} was claimed by a supervisor ({held.named()}) that "
                f"did not answer, asked {_ASKS} times ({self._timeout:g} s each): it is taken as "
                "live (if its host "
                "is gone, the NATS servers forget it within minutes; try again then)"
            )
        # it answered: live, named by its answer (else as its claim names it)
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            held = _DECODER.decode(answer.data)
        raise SessionBusy(
            f"session {self._session_id} has a live parent supervisor ({held.named()}); stop "
            "it first"
        )

    def close(self) -> None:
        """The claim given up: nobody answers for it any more (a next supervisor takes over)."""
        if self._nc is not None:
            nc, self._nc = self._nc, None
            with contextlib.suppress(Exception):  # the servers may be gone, and it with them
                self._loop.run(nc.close(), self._timeout)
        self._loop.stop()
