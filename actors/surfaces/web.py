"""The live board: ``shepherd web --listen HOST:PORT`` serves a running session as a web page
(Starlette on uvicorn), the agents in lanes, an inbox of what waits on the parent, and the
parent's actions.

Rules:

1. **Token.** A token made at start is printed once; every request needs it: the page is
   opened as ``/?token=TOKEN``, which sets it as an HttpOnly, SameSite=Strict cookie; reads
   (``GET /api/...``) take the cookie or the ``X-Shepherd-Token`` header. Without it: HTTP
   401 ``unauthorized``.
2. **Acting is CSRF-safe.** An action is ``POST /api/op/NAME`` with a JSON body and the token
   in the ``X-Shepherd-Token`` header (the page reads it from its own URL): a cookie alone
   never acts, and a form of another site cannot set that header.
3. **Only the parent's answers.** The operations the page may run are :data:`WEB_OPS`; each
   call's arguments are checked against the operation table's Args Struct before the
   session is asked (its bounds are the table's). A body over :data:`MAX_WEB_REQUEST_BYTES`
   is refused unread; one that is not a JSON object is ``invalid_argument``.
4. **Errors** are ``{"error": {"code", "message"}}`` with the project's codes: 400 for a
   refused argument, 401 without the token, 404 for an unknown id or route, 413 for a body too
   large, 503 when the session cannot be reached.
5. **Live.** ``GET /api/events`` is a server-sent event stream of the session's
   notifications as they are appended (filtered by ``agent``, ``task`` and ``kind``); the
   page reloads the board when one comes instead of polling. The board watches every open
   task it shows or delegates, so that each one's end is a notification.
6. **Loopback only** unless ``--allow-remote``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from actors.records.session_info import SessionInfo
from actors.surfaces.listening import check_listen, listening_socket, live_session
from protocol import ops
from protocol.core.errors import (
    InvalidArgument,
    InvalidHandle,
    LimitExceeded,
    SessionUnavailable,
    ShepherdError,
)
from protocol.core.ids import PARENT_ID
from protocol.core.limits import MAX_NESTING
from protocol.wire.envelopes import nested_deeper

#: the operations the page may run (rule 3)
WEB_OPS = frozenset({"approve", "deny", "message", "delegate", "cancel", "close"})
#: a request body's bound (rule 3)
MAX_WEB_REQUEST_BYTES = 256 * 1024
#: one notification line sent on the stream at most this long (longer ones are cut)
MAX_EVENT_BYTES = 64 * 1024
#: how often the stream looks for new notifications
EVENT_POLL_S = 0.1
#: a filter value's bound
MAX_FILTER_CHARS = 200
COOKIE = "shepherd_web"
HEADER = "x-shepherd-token"
_STATIC = Path(__file__).with_name("web_static")

#: lanes, in the order the board shows them
LANES = ("needs_parent", "working", "waiting_peer", "idle", "exited")


def lane_of(row: Mapping[str, Any]) -> str:
    """The lane of one agent row of ``status``: a question or approval to the parent first,
    then a task waiting on a peer, a working one, an exited or closed agent, else idle."""
    if row.get("closed") or row.get("state") in ("exited", "crashed", "closed"):
        return "exited"
    task = row.get("task") or {}
    pending = task.get("pending_requests") or ()
    if any(_to_parent(p) for p in pending):
        return "needs_parent"
    if task and not task.get("result"):
        if task.get("state") == "waiting":
            return "waiting_peer"
        return "working"
    return "idle"


def _to_parent(request: Mapping[str, Any]) -> bool:
    return request.get("target_id") == PARENT_ID and request.get("state", "pending") == "pending"


def _error(exc: ShepherdError) -> JSONResponse:
    status = 400
    if isinstance(exc, InvalidHandle):
        status = 404
    elif isinstance(exc, SessionUnavailable):
        status = 503
    elif isinstance(exc, LimitExceeded) and "body" in exc.message:
        status = 413
    return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status)


def _unauthorized() -> JSONResponse:
    return JSONResponse(
        {
            "error": {
                "code": "unauthorized",
                "message": "every request needs the token printed by shepherd web (open the "
                "page as /?token=TOKEN)",
            }
        },
        401,
    )


class Board:
    """The session's side of the page: its calls, off the event loop."""

    def __init__(self, info: SessionInfo) -> None:
        from actors.surfaces.client import Client

        self.info = info
        self._client = Client(info)
        #: the open tasks this board watches, so that their ends reach the notifications
        self.watched: set[str] = set()

    async def watch(self, rows: list[dict[str, Any]]) -> None:
        """Watch every open task shown and not yet watched (rule 5): a task's end is then a
        notification, and the stream moves its card."""
        ids = [
            row["task"]["task_id"]
            for row in rows
            if row.get("task")
            and not row["task"].get("result")
            and row["task"]["task_id"] not in self.watched
        ][:1000]
        if ids:
            await self.call("watch", {"ids": ids})
            self.watched.update(ids)

    async def act(self, op: str, fields: Mapping[str, Any]) -> Any:
        """Run one of :data:`WEB_OPS`; a task delegated here is watched at once (rule 5)."""
        answer = await self.call(op, fields)
        if op == "delegate" and isinstance(answer, dict) and answer.get("task_id"):
            await self.call("watch", {"ids": [answer["task_id"]]})
            self.watched.add(answer["task_id"])
        return answer

    async def call(self, op: str, fields: Mapping[str, Any]) -> Any:
        from actors.surfaces.cli_ops import ANSWER_TIMEOUT_S

        ops.parent_op(op).build(fields)  # the table's bounds, before the session is asked
        return await asyncio.to_thread(
            self._client.call, op, dict(fields), timeout=ANSWER_TIMEOUT_S
        )


def build_app(info: SessionInfo, token: str) -> Starlette:
    """The board's ASGI app."""
    board = Board(info)
    secret = token.encode()

    def authorised(request: Request, *, acting: bool) -> bool:
        given = request.headers.get(HEADER)
        if given is None and not acting:
            given = request.cookies.get(COOKIE)
        return given is not None and hmac.compare_digest(given.encode(), secret)

    async def page(request: Request) -> Response:
        given = request.query_params.get("token", "")
        if not hmac.compare_digest(given.encode(), secret) and not authorised(
            request, acting=False
        ):
            return _unauthorized()
        html = (
            (_STATIC / "board.html")
            .read_text(encoding="utf-8")
            .replace("PARENT_ID_HERE", PARENT_ID)
        )
        response = HTMLResponse(
            html,
            headers={
                "content-security-policy": "default-src 'self'; script-src 'self' "
                "'unsafe-inline'; style-src 'self' 'unsafe-inline'; connect-src 'self'",
                "referrer-policy": "no-referrer",
                "x-frame-options": "DENY",
                "cache-control": "no-store",
            },
        )
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    async def status(request: Request) -> Response:
        if not authorised(request, acting=False):
            return _unauthorized()
        raw = request.query_params.get("cursor", "0")
        try:
            if not raw.isdigit() or len(raw) > 9:
                raise InvalidArgument(f"cursor must be a whole number, got {raw[:40]!r}")
            answer = await board.call("status", {"cursor": int(raw)})
        except ShepherdError as exc:
            return _error(exc)
        agents = answer.get("agents", [])
        try:
            await board.watch(agents)
        except ShepherdError as exc:
            return _error(exc)
        for row in agents:
            row["lane"] = lane_of(row)
        answer["lanes"] = LANES
        return JSONResponse(answer)

    async def task(request: Request) -> Response:
        if not authorised(request, acting=False):
            return _unauthorized()
        try:
            task_id = request.path_params["task_id"]
            if len(task_id) > MAX_FILTER_CHARS:
                raise InvalidArgument(f"a task id is at most {MAX_FILTER_CHARS} characters")
            result = await board.call("result", {"task_id": task_id})
        except ShepherdError as exc:
            return _error(exc)
        return JSONResponse({"task_id": task_id, "result": result})

    async def act(request: Request) -> Response:
        if not authorised(request, acting=True):
            return _unauthorized()
        name = request.path_params["name"]
        try:
            if name not in WEB_OPS:
                raise InvalidArgument(
                    f"the board runs only {', '.join(sorted(WEB_OPS))}, not {name[:40]!r}"
                )
            fields = await _body(request)
            answer = await board.act(name, fields)
        except ShepherdError as exc:
            return _error(exc)
        return JSONResponse({"ok": True, "answer": answer})

    async def events(request: Request) -> Response:
        if not authorised(request, acting=False):
            return _unauthorized()
        try:
            wanted = _filters(request)
        except ShepherdError as exc:
            return _error(exc)
        return StreamingResponse(
            _follow(Path(info.notifications), wanted, request),
            media_type="text/event-stream",
            headers={"cache-control": "no-store"},
        )

    routes = [
        Route("/", page),
        Route("/api/status", status),
        Route("/api/task/{task_id}", task),
        Route("/api/op/{name}", act, methods=["POST"]),
        Route("/api/events", events),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found})


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse(
        {"error": {"code": "not_found", "message": f"no such page: {request.url.path[:80]}"}},
        404,
    )


async def _body(request: Request) -> dict[str, Any]:
    """The JSON object of an action's body, within its bounds (rule 3)."""
    declared = request.headers.get("content-length")
    too_big = LimitExceeded(f"a request body is at most {MAX_WEB_REQUEST_BYTES} bytes")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_WEB_REQUEST_BYTES):
        raise too_big
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise InvalidArgument("an action's body must be application/json")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_WEB_REQUEST_BYTES:
            raise too_big
        chunks.append(chunk)
    try:
        fields = msgspec.json.decode(b"".join(chunks))
    except RecursionError:
        raise InvalidArgument(f"the body nests more than {MAX_NESTING} levels deep") from None
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"the body is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise InvalidArgument("the body must be a JSON object of the operation's arguments")
    if nested_deeper(fields, MAX_NESTING):
        raise InvalidArgument(f"the body nests more than {MAX_NESTING} levels deep")
    return fields


def _filters(request: Request) -> dict[str, str]:
    """The event stream's filters, each bounded (rule 5)."""
    wanted = {
        key: request.query_params[key]
        for key in ("agent", "task", "kind")
        if request.query_params.get(key)
    }
    for key, value in wanted.items():
        if len(value) > MAX_FILTER_CHARS:
            raise InvalidArgument(f"{key} is at most {MAX_FILTER_CHARS} characters")
    return wanted


def matches(note: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    """Whether a notification passes the stream's filters (rule 5)."""
    for key, value in wanted.items():
        if key == "kind" and note.get("kind") != value:
            return False
        if key == "task" and value not in (note.get("task_id"), *(note.get("refs") or ())):
            return False
        if key == "agent" and value not in (
            note.get("agent_id"),
            note.get("agent_name"),
            note.get("agent"),
        ):
            return False
    return True


async def _follow(path: Path, wanted: Mapping[str, str], request: Request) -> AsyncIterator[str]:
    """Every notification appended from now on, as server-sent events (rule 5)."""
    try:
        offset = path.stat().st_size
    except OSError:
        offset = 0
    yield ": following\n\n"
    buffer = b""
    while not await request.is_disconnected():
        try:
            size = path.stat().st_size
        except OSError:
            size = offset
        if size < offset:  # the file was replaced: start again
            offset, buffer = 0, b""
        if size > offset:
            with path.open("rb") as f:
                f.seek(offset)
                buffer += f.read(size - offset)
            offset = size
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    note = json.loads(line)
                except ValueError:
                    continue
                if isinstance(note, dict) and matches(note, wanted):
                    text = json.dumps(note)[:MAX_EVENT_BYTES]
                    yield f"event: notification\ndata: {text}\n\n"
            if len(buffer) > MAX_EVENT_BYTES * 16:  # a line without end: dropped
                buffer = b""
        await asyncio.sleep(EVENT_POLL_S)


def serve(
    session: str | None, listen: str, *, allow_remote: bool = False, json_out: bool = False
) -> int:
    """``shepherd web``: serve until SIGTERM or SIGINT."""
    import uvicorn

    host, port = check_listen(listen, allow_remote=allow_remote, what="web")
    info = live_session(session)
    sock, url = listening_socket("web", listen, host, port)
    token = secrets.token_urlsafe(32)
    try:
        app = build_app(info, token)
        if json_out:
            header = {
                "url": url,
                "token": token,
                "session_dir": str(info.session_dir),
                "pid": os.getpid(),
            }
            sys.stdout.write(msgspec.json.encode({"web": header}).decode() + "\n")
        else:
            sys.stdout.write(f"web {url}?token={token}\n")
        sys.stdout.flush()
        level = os.environ.get("SHEPHERD_LOG_LEVEL", "WARNING").lower()
        config = uvicorn.Config(app, log_level=level, lifespan="off", timeout_graceful_shutdown=2)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return 0
