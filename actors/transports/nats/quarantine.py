"""The NATS transport's quarantine: a stream of its own keeping every message an inbox refused
(undecodable, forged, or its handler failed), each with a ``Shepherd-Reason`` header saying why.
Nothing accepted is dropped silently; a reader of the session can list what was refused."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgspec

from actors.runtime.log import logger
from protocol.core.errors import ShepherdError

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

__all__ = ["Quarantine", "QuarantineRecord"]

#: the quarantine stream keeps at most this many messages (the oldest go first)
KEEP = 100_000
_MAX_REASON_CHARS = 2000


class QuarantineRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Why a message went to quarantine (the ``Shepherd-Reason`` header, JSON)."""

    inbox: str
    code: str
    message: str
    authenticated: bool


class Quarantine:
    def __init__(self, js: JetStreamContext, session_id: str, owner: str | None = None) -> None:
        self._js = js
        #: a child with its own credentials records under its agent id, which its rights name
        self._owner = owner
        self.stream = f"{session_id}_quarantine"
        self._prefix = f"shepherd.{session_id}.quarantine."

    def stream_config(self, replicas: int) -> Any:
        from nats.js.api import RetentionPolicy, StorageType, StreamConfig

        return StreamConfig(
            name=self.stream,
            subjects=[self._prefix + "*"],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=replicas,
            max_msgs=KEEP,
        )

    async def record(
        self, inbox: str, data: bytes, error: ShepherdError, authenticated: bool
    ) -> bool:
        """Keep ``data`` with its reason; False if the server did not take it."""
        reason = QuarantineRecord(
            inbox=inbox,
            code=error.code,
            message=error.message[:_MAX_REASON_CHARS],
            authenticated=authenticated,
        )
        try:
            await self._js.publish(
                self._prefix + (self._owner or inbox),
                data,
                stream=self.stream,
                headers={"Shepherd-Reason": json.dumps(msgspec.to_builtins(reason))},
            )
        except Exception as exc:
            logger.warning("nats: could not quarantine a message of {}: {!r}", inbox, exc)
            return False
        logger.warning("nats: quarantined a message of {}: {}", inbox, error.message)
        return True

    async def read(self, limit: int) -> list[tuple[QuarantineRecord, bytes]]:
        from nats.js.errors import NotFoundError

        state = (await self._js.stream_info(self.stream)).state
        found: list[tuple[QuarantineRecord, bytes]] = []
        if not state.messages:  # empty: its first and last sequence say 0, no message has it
            return found
        for seq in range(state.first_seq, state.last_seq + 1):
            if len(found) >= limit:
                break
            try:
                stored = await self._js.get_msg(self.stream, seq)
            except NotFoundError:  # removed by the keep limit meanwhile
                continue
            reason = (stored.headers or {}).get("Shepherd-Reason", "{}")
            record = msgspec.json.decode(reason.encode(), type=QuarantineRecord)
            found.append((record, stored.data or b""))
        return found
