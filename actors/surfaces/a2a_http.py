"""The A2A front door's HTTP side: the Agent Card, the guard that checks every request (token,
size, nesting: the one place its bounds are checked), the app and where it may listen
(:mod:`actors.surfaces.a2a_server`)."""

from __future__ import annotations

import contextlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
from a2a.server.request_handlers import build_error_response
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import PROTOCOL_VERSION_1_0
from a2a.utils.errors import (
    InvalidRequestError,
)

from actors.records.session_info import SessionInfo
from actors.surfaces.a2a_follow import Monitor
from protocol.core.limits import (
    MAX_A2A_REQUEST_BYTES,
    MAX_NESTING,
)
from protocol.wire.envelopes import nested_deeper

TOKEN_FILE = "a2a.token"
_Asgi = Callable[[Any, Any, Any], Awaitable[None]]


def agent_card(url: str, info: SessionInfo, agents: list[dict[str, Any]]) -> pb.AgentCard:
    """Rule 1: the session's card, a skill per live agent."""
    card = pb.AgentCard(
        name=f"Shepherd session {info.session_id}",
        description=(
            "A team of agent processes supervised by Shepherd. Each skill is one agent: name "
            "it in the message's metadata.agent (or continue in the contextId of its earlier "
            "task). A task ends only when its agent says done."
        ),
        version=_version(),
        supported_interfaces=[
            pb.AgentInterface(
                url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(
        pb.HTTPAuthSecurityScheme(
            scheme="Bearer", description=f"the token in the session directory's {TOKEN_FILE}"
        )
    )
    requirement = card.security_requirements.add()
    requirement.schemes["bearer"].SetInParent()
    for row in agents:
        if row.get("closed"):
            continue
        card.skills.append(
            pb.AgentSkill(
                id=row["name"],
                name=row["name"],
                description=(
                    f"Shepherd agent {row['name']} ({row['adapter']} adapter, agent id "
                    f"{row['agent_id']}): give it a task by naming it in metadata.agent"
                ),
                tags=["shepherd", row["adapter"]],
            )
        )
    return card


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shepherd")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def _answer(status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> list[Any]:
    return [
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        },
        {"type": "http.response.body", "body": body},
    ]


class Guard:
    """Rule 5, as ASGI middleware in front of every route: the token, then the request's
    bounds, all in this one place: a body is read up to :data:`MAX_A2A_REQUEST_BYTES` (a
    longer one, or one that says it is, is refused unread) and its JSON may nest
    :data:`~protocol.core.limits.MAX_NESTING` levels (the SDK's parser would otherwise recurse
    until Python's limit). Refusals of a frame are the SDK's JSON-RPC ``InvalidRequestError``;
    a body that is not JSON is left to the SDK, which says so (``JSONParseError``)."""

    def __init__(self, app: _Asgi, token: str) -> None:
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
            body = json.dumps(
                {
                    "error": {
                        "code": "unauthorized",
                        "message": "every request needs Authorization: Bearer TOKEN (the "
                        f"token is in the session directory's {TOKEN_FILE})",
                    }
                }
            ).encode()
            for part in _answer(401, body, ((b"www-authenticate", b'Bearer realm="shepherd"'),)):
                await send(part)
            return
        if scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        body_or_why = await self._read(headers.get(b"content-length"), receive)
        if isinstance(body_or_why, str):
            refusal = build_error_response(None, InvalidRequestError(message=body_or_why))
            for part in _answer(200, json.dumps(refusal).encode()):
                await send(part)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:  # the body was given whole: what follows is the client leaving
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body_or_why, "more_body": False}

        # a client that leaves ends what it waits on: a stream's own listener sees it too,
        # but a waiting SendMessage reads nothing more of its request, so it is watched here
        async with anyio.create_task_group() as group:

            async def until_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(until_gone)
            await self._app(scope, replay, send)
            group.cancel_scope.cancel()

    @staticmethod
    async def _read(declared: bytes | None, receive: Any) -> bytes | str:
        """The body, or why it is refused."""
        too_big = f"Payload too large: a request body is at most {MAX_A2A_REQUEST_BYTES} bytes"
        if declared is not None and (
            not declared.isdigit() or int(declared) > MAX_A2A_REQUEST_BYTES
        ):
            return too_big
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return "the client left before its request was read"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_A2A_REQUEST_BYTES:
                return too_big
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            frame = msgspec.json.decode(body)
        except RecursionError:
            return f"the request nests more than {MAX_NESTING} levels deep"
        except msgspec.DecodeError:
            return body  # the SDK answers it with its parse error
        if nested_deeper(frame, MAX_NESTING):
            return f"the request nests more than {MAX_NESTING} levels deep"
        return body


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, whose stop also ends the follows at once (rule 4)."""

        def __init__(self, config: uvicorn.Config, monitor: Monitor) -> None:
            super().__init__(config)
            self._monitor = monitor

        def handle_exit(self, sig: int, frame: Any) -> None:
            self._monitor.stop_soon()
            super().handle_exit(sig, frame)

    return Server


def _write_token(session_dir: Path, token: str) -> Path:
    """The token, mode 0600 from its creation (never readable by others for a moment)."""
    path = session_dir / TOKEN_FILE
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return path
