"""The CLI's side of a session: find it, send a ``call``, wait for the ``result``.

Finding the session (:func:`find_session`; the CLI, ``shepherd mcp``, ``notifications``,
``top`` and ``watchdog`` all go through it): ``--session DIR``, else ``$SHEPHERD_SESSION`` (an
empty value counts as unset), else the one live session of this user — a pointer in
``<state>/shepherd/live/`` whose supervisor runs and whose mailbox exists. The one live session
is used and named through ``announce``; with several live ones nothing is guessed (the newest
may be another project's): ``invalid_argument`` lists them and says how to choose. An empty
``--session``, or one that is not a directory, is ``invalid_argument`` naming the option.

A call's answer comes back in a one-shot reply inbox, removed when the call ends
(:mod:`actors.transports.mailbox.reply_inboxes`).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from actors.records.live import ENV_SESSION, pointed_sessions
from actors.records.session_info import SessionInfo, is_live
from actors.runtime.clock import SystemClock
from actors.runtime.ids import IdSource
from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.files import describe
from protocol.core.errors import InvalidArgument, SessionUnavailable, ShepherdError, error_from_info
from protocol.core.ids import PARENT_ID, IdKind
from protocol.wire.envelopes import AnyEnvelope, CallEnvelope, ResultEnvelope

__all__ = [
    "ENV_SESSION",
    "Client",
    "announcement",
    "find_session",
    "live_sessions",
    "session_alive",
]

CALL_TIMEOUT_S = 30.0
#: live sessions named in the refusal to guess; the rest are counted
MAX_LISTED = 10


def session_alive(info: SessionInfo) -> bool:
    """The supervisor runs and has not shut down (shutdown removes the mailbox; checked too
    because a session embedded in a still-running program keeps its pid; a session over NATS
    is judged by its supervisor alone: :func:`actors.transports.wire.transport_exists`)."""
    from actors.transports.wire import transport_exists

    return is_live(info) and transport_exists(info.mailbox)


def _load_info(session_dir: Path, source: str) -> SessionInfo:
    path = session_dir / "session.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=SessionInfo)
    except FileNotFoundError:
        raise SessionUnavailable(f"no session at {session_dir} (no session.json)") from None
    except OSError as exc:
        raise InvalidArgument(f"{source} {session_dir}: cannot read session.json: {exc}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SessionUnavailable(f"{path} is not a session file: {exc}") from None


def _session_dir(raw: str, source: str) -> Path:
    if not raw.strip():
        raise InvalidArgument(
            f"{source} is empty: give the session directory that `shepherd serve` printed"
        )
    path = Path(raw).expanduser().absolute()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SessionUnavailable(f"no session at {path} (no such directory)") from None
    except OSError as exc:
        raise InvalidArgument(f"{source} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidArgument(
            f"{source} {path} is a {describe(st.st_mode)}, not a session directory "
            "(the directory `shepherd serve` printed)"
        )
    return path


def live_sessions() -> list[SessionInfo]:
    """This user's live sessions, newest first."""
    found: dict[str, SessionInfo] = {}
    for session_dir in pointed_sessions():
        try:
            info = _load_info(session_dir, "live pointer")
        except ShepherdError:
            continue
        if session_alive(info):
            found[info.session_id] = info
    return sorted(found.values(), key=lambda i: i.created_at, reverse=True)


def _listed(info: SessionInfo) -> str:
    created = datetime.fromtimestamp(info.created_at).isoformat(sep=" ", timespec="seconds")
    return f"  {info.session_dir}  (created {created}, pid {info.parent_pid})"


def find_session(
    explicit: str | None = None, *, announce: Callable[[str], None] | None = None
) -> SessionInfo:
    """The session named by ``explicit`` (``--session``), else ``$SHEPHERD_SESSION``, else the
    one live session (then ``announce`` is told which; see the module docstring)."""
    env = os.environ.get(ENV_SESSION, "")
    if explicit is not None or env.strip():
        source = "--session" if explicit is not None else ENV_SESSION
        raw = explicit if explicit is not None else env
        info = _load_info(_session_dir(raw, source), source)
        if not is_live(info):
            raise SessionUnavailable(
                f"the supervisor of {info.session_dir} (pid {info.parent_pid}) is gone"
            )
        return info
    live = live_sessions()
    if not live:
        raise SessionUnavailable(
            "no live Shepherd session: start one with `shepherd serve`, or pass --session DIR"
        )
    if len(live) > 1:
        lines = [_listed(info) for info in live[:MAX_LISTED]]
        if len(live) > MAX_LISTED:
            lines.append(f"  ... and {len(live) - MAX_LISTED} more")
        raise InvalidArgument(
            f"{len(live)} live Shepherd sessions, so none is picked for you: pass --session DIR "
            f"or set {ENV_SESSION}=DIR to one of them (newest first):\n" + "\n".join(lines)
        )
    (info,) = live
    if announce is not None:
        announce(announcement(info))
    return info


def announcement(info: SessionInfo) -> str:
    """What a command says on stderr when it found its session as the one live one."""
    return (
        f"using session {info.session_dir} ({info.session_id}), the only live one; "
        f"--session DIR or {ENV_SESSION}=DIR chooses"
    )


#: how often a call waiting for its answer looks whether its supervisor is still there
_LOOK_S = 0.5


class Client:
    def __init__(self, info: SessionInfo) -> None:
        self.info = info
        self._ids = IdSource()

    def call(
        self, op: str, args: dict[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT_S
    ) -> Any:
        """Run ``op`` in the session and return its data; a refusal raises the typed error."""
        # the session's transport (its mailbox, or NATS), imported only when a call is made
        from actors.transports.wire import open_reply_inbox, open_transport

        login = None
        if self.info.nats_auth is not None:  # the session's NATS authority: its parent user
            from actors.transports.nats.auth import Authority

            login = Authority.load(self.info.nats_auth).parent_login()
        mailbox = open_transport(
            self.info.mailbox, self.info.session_id, login=login, tls=self.info.nats_tls
        )
        call_id = self._ids.new(IdKind.MESSAGE)
        got: list[ResultEnvelope] = []
        arrived = threading.Event()

        def on_result(env: AnyEnvelope) -> None:
            if isinstance(env, ResultEnvelope) and env.call_id == call_id:
                got.append(env)
                arrived.set()

        try:
            inbox = open_reply_inbox(mailbox, call_id)
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
                self._wait(arrived, timeout)
            finally:
                sub.cancel()
            result = got[0]
        finally:
            # the receiver stops first: the answer it handed over is then out of new/, and the
            # inbox can go (see actors.transports.mailbox.reply_inboxes)
            mailbox.close()
            inbox.remove()
        if not result.ok:
            assert result.error is not None
            raise error_from_info(result.error)
        return result.data

    def _wait(self, arrived: threading.Event, timeout: float) -> None:
        """Until the answer arrived; ``session_unavailable`` when ``timeout`` passes, or as soon
        as the supervisor is seen gone (killed mid-call: its answer will never come), after a
        last look for an answer it sent before it went."""
        deadline = time.monotonic() + timeout
        while not arrived.wait(min(_LOOK_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                raise SessionUnavailable(
                    f"no answer from the session within {timeout:g}s (is it still running?)"
                )
            if not is_live(self.info) and not arrived.wait(_LOOK_S):
                raise SessionUnavailable(
                    f"the supervisor of {self.info.session_dir} (pid {self.info.parent_pid}) "
                    "is gone: it stopped before it answered"
                )
