"""The CLI's side of a session: find it, send a ``call``, wait for the ``result``.

Finding the session: ``--session DIR``, else ``$SHEPHERD_SESSION``, else the newest live
session of this user (a pointer in ``<state>/shepherd/live/`` whose supervisor pid is alive).

A call's answer comes back in a one-shot reply inbox, removed when the call ends
(:mod:`actors.reply_inboxes`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import msgspec

from actors.clock import SystemClock
from actors.idsource import IdSource
from actors.mailbox import Mailbox
from actors.reply_inboxes import ReplyInbox
from actors.supervisor import SessionInfo, live_dir
from actors.transport import PARENT_INBOX
from protocol.envelopes import AnyEnvelope, CallEnvelope, ResultEnvelope
from protocol.errors import SessionUnavailable, ShepherdError, error_from_info
from protocol.ids import PARENT_ID, IdKind

__all__ = ["Client", "find_session", "pid_alive"]

CALL_TIMEOUT_S = 30.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _load_info(session_dir: Path) -> SessionInfo:
    path = session_dir / "session.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=SessionInfo)
    except FileNotFoundError:
        raise SessionUnavailable(f"no session at {session_dir} (no session.json)") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SessionUnavailable(f"{path} is not a session file: {exc}") from None


def find_session(explicit: str | None = None) -> SessionInfo:
    chosen = explicit or os.environ.get("SHEPHERD_SESSION")
    if chosen:
        info = _load_info(Path(chosen).expanduser().absolute())
        if not pid_alive(info.parent_pid):
            raise SessionUnavailable(f"the supervisor of {chosen} (pid {info.parent_pid}) is gone")
        return info
    candidates: list[SessionInfo] = []
    if live_dir().is_dir():
        for pointer in live_dir().glob("*.json"):
            try:
                data = json.loads(pointer.read_text())
                info = _load_info(Path(data["session_dir"]))
            except (OSError, ValueError, KeyError, ShepherdError):
                continue
            if pid_alive(info.parent_pid):
                candidates.append(info)
    if not candidates:
        raise SessionUnavailable(
            "no live Shepherd session: start one with `shepherd serve`, or pass --session DIR"
        )
    return max(candidates, key=lambda i: i.created_at)


class Client:
    def __init__(self, info: SessionInfo) -> None:
        self.info = info
        self._ids = IdSource()

    def call(
        self, op: str, args: dict[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT_S
    ) -> Any:
        """Run ``op`` in the session and return its data; a refusal raises the typed error."""
        mailbox = Mailbox.open(self.info.mailbox, self.info.session_id)
        call_id = self._ids.new(IdKind.MESSAGE)
        got: list[ResultEnvelope] = []
        arrived = threading.Event()

        def on_result(env: AnyEnvelope) -> None:
            if isinstance(env, ResultEnvelope) and env.call_id == call_id:
                got.append(env)
                arrived.set()

        try:
            inbox = ReplyInbox(mailbox, call_id)
        except BaseException:
            mailbox.close()
            raise
        try:
            sub = mailbox.subscribe(call_id, on_result)
            try:
                mailbox.publish(
                    PARENT_INBOX,
                    CallEnvelope(
                        message_id=call_id,
                        session_id=self.info.session_id,
                        sender_id=call_id,
                        target_id=PARENT_ID,
                        created_at=SystemClock().now(),
                        capability=self.info.client_token,
                        reply_inbox=call_id,
                        op=op,
                        args={k: v for k, v in (args or {}).items() if v is not None},
                    ),
                )
                if not arrived.wait(timeout):
                    raise SessionUnavailable(
                        f"no answer from the session within {timeout:g}s (is it still running?)"
                    )
            finally:
                sub.cancel()
            result = got[0]
        finally:
            # the receiver stops first: the answer it handed over is then out of new/, and the
            # inbox can go (see actors.reply_inboxes)
            mailbox.close()
            inbox.remove()
        if not result.ok:
            assert result.error is not None
            raise error_from_info(result.error)
        return result.data
