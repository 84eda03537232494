"""Who may write to the parent's inbox, and what a refused sender is told.

Rules:

1. The parent reads only its own inbox. A call (``shepherd ...``) proves itself with the
   session's client token; anything else comes from an agent and proves itself with that
   agent's capability. Both are compared in constant time.
2. An agent is known from its spawn (:meth:`SenderGate.register`), and, after a restart, from
   the records, before the inbox is drained: envelopes the bridges sent meanwhile wait there, and
   an unknown sender would be quarantined (a lost ``done``).
3. An authenticated sender whose envelope was refused gets a ``not_delivered`` notice; nothing
   is dropped silently. A sender that did not prove its id gets none: the id may be a forger's
   claim, and telling the victim would end a wait it never started (the quarantine reason names
   the forgery).
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Mapping

from actors.runtime.clock import Clock
from actors.runtime.ids import IdSource
from actors.runtime.transport import PARENT_INBOX, Transport
from actors.session.agent import AgentSpec
from protocol.core.errors import ForbiddenSender, ShepherdError
from protocol.core.ids import PARENT_ID, IdKind
from protocol.wire.envelopes import AnyEnvelope, CallEnvelope, NoticeEnvelope

__all__ = ["SenderGate"]


class SenderGate:
    """The parent inbox's validator and refusal callback (module rules); ``mailbox`` is set
    once the transport it guards is open."""

    def __init__(
        self,
        client_token: str,
        capabilities: Mapping[str, str],
        *,
        session_id: str,
        ids: IdSource,
        clock: Clock,
    ) -> None:
        self._client_token = client_token
        self._capabilities = dict(capabilities)
        self._session_id, self._ids, self._clock = session_id, ids, clock
        self.mailbox: Transport | None = None

    def register(self, spec: AgentSpec) -> None:
        self._capabilities[spec.agent_id] = spec.capability

    def capability(self, agent_id: str) -> str | None:
        """The capability ``agent_id`` proves itself with (None: not an agent known here)."""
        return self._capabilities.get(agent_id)

    def validate(self, inbox: str, env: AnyEnvelope) -> None:
        if inbox != PARENT_INBOX:
            raise ForbiddenSender(f"the parent does not read inbox {inbox!r}")
        if isinstance(env, CallEnvelope):
            if not hmac.compare_digest(env.capability.encode(), self._client_token.encode()):
                raise ForbiddenSender("call without this session's client token")
            return
        expected = self._capabilities.get(env.sender_id)
        if expected is None:
            raise ForbiddenSender(f"unknown sender {env.sender_id!r}")
        if not hmac.compare_digest(env.capability.encode(), expected.encode()):
            raise ForbiddenSender(f"capability does not match sender {env.sender_id}")

    def on_reject(
        self, inbox: str, env: AnyEnvelope | None, error: ShepherdError, authenticated: bool
    ) -> None:
        """Rule 3."""
        if not authenticated or env is None or env.sender_id not in self._capabilities:
            return
        notice = NoticeEnvelope(
            message_id=self._ids.new(IdKind.MESSAGE),
            session_id=self._session_id,
            sender_id=PARENT_ID,
            target_id=env.sender_id,
            created_at=self._clock.now(),
            capability=self._capabilities[env.sender_id],
            code="not_delivered",
            text=f"envelope {env.message_id} was refused: {error.code}: {error.message}",
            ref_id=env.message_id,
        )
        if self.mailbox is not None:
            with contextlib.suppress(ShepherdError):
                self.mailbox.publish(env.sender_id, notice)
