"""The live board: ``shepherd web --listen HOST:PORT`` serves a running session as a web page
(Starlette on uvicorn): the agents in lanes, an inbox of what waits on the parent, each
task's page, the notifications, and the parent's actions.

Rules:

1. **Token.** A token made at start is printed once; every request needs it: the page is
   opened as ``/?token=TOKEN``, which sets it as an HttpOnly, SameSite=Strict cookie; reads
   (``GET``) take the cookie or the ``X-Shepherd-Token`` header. Without it: HTTP 401
   ``unauthorized``.
2. **Acting is CSRF-safe.** An action is ``POST /api/op/NAME`` with a JSON body and the token
   in the ``X-Shepherd-Token`` header (the page reads it from its own URL): a cookie alone
   never acts, and a form of another site cannot set that header.
3. **Only the parent's answers.** The page may run only ``WEB_OPS``
   (:mod:`actors.surfaces.web_live`); each call's arguments are checked against the operation
   table's Args Struct before the session is asked (its bounds are the table's). Bodies and
   queries are checked by :mod:`actors.surfaces.web_input`.
4. **Errors** are ``{"error": {"code", "message"}}`` with the project's codes: 400 for a
   refused argument, 401 without the token, 404 for an unknown id or route, 413 for a body too
   large, 503 when the session cannot be reached.
5. **Live.** ``GET /api/events`` is a server-sent event stream: ``board`` when what the board
   shows changed (its version and counts), and the session's notifications as they are
   appended (filtered by ``agent``, ``task`` and ``kind``; none with ``board_only=1``). It
   starts with ``hello``, the file offset its notifications come after, which
   ``GET /api/notifications?before=`` reads back from. Pages of the board are
   ``GET /api/board`` (:mod:`actors.surfaces.web_board`).
6. **Nothing from the network.** The page and its scripts are files of the package; its
   content security policy allows only this origin.
7. **Loopback only** unless ``--allow-remote``.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from actors.records.session_info import SessionInfo
from actors.surfaces.listening import check_listen, listening_socket, live_session
from actors.surfaces.web_board import LANES, lane_of
from actors.surfaces.web_feed import MAX_BACKLOG, Stream, filters, named, newest
from actors.surfaces.web_input import MAX_WEB_REQUEST_BYTES, json_body, number, only_known
from actors.surfaces.web_live import WEB_OPS, Live
from actors.surfaces.web_task import task_page
from protocol.core.errors import (
    InvalidHandle,
    LimitExceeded,
    SessionUnavailable,
    ShepherdError,
)
from protocol.core.ids import PARENT_ID

__all__ = ["LANES", "MAX_WEB_REQUEST_BYTES", "WEB_OPS", "build_app", "lane_of", "serve"]

#: a stream with nothing to send says so this often (a comment line), to find a gone page
KEEPALIVE_S = 15.0
COOKIE = "shepherd_web"
HEADER = "x-shepherd-token"
_STATIC = Path(__file__).with_name("web_static")
#: the page's files: name -> media type (rule 6)
STATIC = {
    "board.css": "text/css",
    "web.js": "text/javascript",
    "board.js": "text/javascript",
    "task.js": "text/javascript",
    "feed.js": "text/javascript",
}
_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


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


def build_app(info: SessionInfo, token: str) -> Starlette:
    """The board's ASGI app."""
    handlers = _Handlers(info, token)
    routes = [
        Route("/", handlers.page),
        Route("/static/{name}", handlers.static),
        Route("/api/board", handlers.board),
        Route("/api/status", handlers.status),
        Route("/api/task/{task_id}", handlers.task),
        Route("/api/notifications", handlers.notifications),
        Route("/api/op/{name}", handlers.act, methods=["POST"]),
        Route("/api/events", handlers.events),
    ]

    def lifespan(app: Starlette) -> Any:
        return handlers.live.running()

    return Starlette(routes=routes, exception_handlers={404: _not_found}, lifespan=lifespan)


class _Handlers:
    """One handler per route; each checks the token first (rules 1, 2)."""

    def __init__(self, info: SessionInfo, token: str) -> None:
        self.info = info
        self.live = Live(info)
        self._token = token
        self._secret = token.encode()

    def authorised(self, request: Request, *, acting: bool) -> bool:
        given = request.headers.get(HEADER)
        if given is None and not acting:
            given = request.cookies.get(COOKIE)
        return given is not None and hmac.compare_digest(given.encode(), self._secret)

    async def page(self, request: Request) -> Response:
        given = request.query_params.get("token", "")
        if not hmac.compare_digest(given.encode(), self._secret) and not self.authorised(
            request, acting=False
        ):
            return _unauthorized()
        html = (_STATIC / "board.html").read_text(encoding="utf-8")
        response = HTMLResponse(html.replace("PARENT_ID_HERE", PARENT_ID), headers=_HEADERS)
        response.set_cookie(COOKIE, self._token, httponly=True, samesite="strict")
        return response

    async def static(self, request: Request) -> Response:
        if not self.authorised(request, acting=False):
            return _unauthorized()
        name = request.path_params["name"]
        if name not in STATIC:
            return await _not_found(request, KeyError(name))
        body = (_STATIC / name).read_bytes()
        return Response(body, media_type=STATIC[name], headers=_HEADERS)

    async def board(self, request: Request) -> Response:
        if not self.authorised(request, acting=False):
            return _unauthorized()
        live = self.live
        try:
            query = request.query_params
            only_known(query, (*LANES, "inbox"))
            offsets = {lane: number(query, lane) for lane in LANES}
            inbox = number(query, "inbox")
            await asyncio.wait_for(live.ready.wait(), timeout=60)
            if live.error is not None and live.snapshot.now is None:
                raise live.error
        except TimeoutError:
            return _error(SessionUnavailable("the board has no snapshot of the session yet"))
        except ShepherdError as exc:
            return _error(exc)
        answer = live.snapshot.page(offsets, inbox)
        if live.error is not None:
            answer["error"] = {"code": live.error.code, "message": live.error.message}
        return JSONResponse(answer)

    async def status(self, request: Request) -> Response:
        if not self.authorised(request, acting=False):
            return _unauthorized()
        try:
            only_known(request.query_params, ("cursor",))
            cursor = number(request.query_params, "cursor")
            answer = await self.live.call("status", {"cursor": cursor})
        except ShepherdError as exc:
            return _error(exc)
        for row in answer.get("agents", []):
            row["lane"] = lane_of(row)
        answer["lanes"] = LANES
        return JSONResponse(answer)

    async def task(self, request: Request) -> Response:
        if not self.authorised(request, acting=False):
            return _unauthorized()
        try:
            answer = await task_page(
                request.path_params["task_id"],
                call=self.live.call,
                rows=self.live.snapshot.rows,
                artifacts=Path(self.info.session_dir) / "artifacts",
                notifications=Path(self.info.notifications),
                session_id=self.info.session_id,
                traced=self.info.traced,
            )
        except ShepherdError as exc:
            return _error(exc)
        return JSONResponse(answer)

    async def notifications(self, request: Request) -> Response:
        if not self.authorised(request, acting=False):
            return _unauthorized()
        try:
            query = request.query_params
            only_known(query, ("agent", "task", "kind", "limit", "before"))
            wanted = filters(query, self.live.snapshot.ids)
            limit = number(query, "limit", 50, most=MAX_BACKLOG)
            before = number(query, "before") if "before" in query else None
        except ShepherdError as exc:
            return _error(exc)
        found, whole = await asyncio.to_thread(
            newest, Path(self.info.notifications), wanted, limit, before
        )
        names = self.live.snapshot.names
        return JSONResponse({"notifications": [named(n, names) for n in found], "whole": whole})

    async def act(self, request: Request) -> Response:
        if not self.authorised(request, acting=True):
            return _unauthorized()
        try:
            fields = await json_body(request)
            answer = await self.live.act(request.path_params["name"], fields)
        except ShepherdError as exc:
            return _error(exc)
        return JSONResponse({"ok": True, "answer": answer})

    async def events(self, request: Request) -> Response:
        if not self.authorised(request, acting=False):
            return _unauthorized()
        try:
            query = request.query_params
            only_known(query, ("agent", "task", "kind", "board_only"))
            wanted = filters(query, self.live.snapshot.ids)
            board_only = number(query, "board_only", most=1) == 1
        except ShepherdError as exc:
            return _error(exc)
        stream = self.live.feed.open(wanted, notifications=not board_only)
        return StreamingResponse(
            _stream(self.live, stream),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse(
        {"error": {"code": "not_found", "message": f"no such page: {request.url.path[:80]}"}},
        404,
    )


async def _stream(live: Live, stream: Stream) -> AsyncIterator[str]:
    """One page's events (rule 5), until it goes away."""
    try:
        yield ": following\n\n"
        hello = {"offset": stream.offset, "version": live.snapshot.version}
        yield f"event: hello\ndata: {msgspec.json.encode(hello).decode()}\n\n"
        while True:
            try:
                item = await asyncio.wait_for(stream.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if item is None:  # too far behind: ended (the page opens it again)
                return
            event, data = item
            yield f"event: {event}\ndata: {data}\n\n"
    finally:
        live.feed.close(stream)


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
        config = uvicorn.Config(app, log_level=level, lifespan="on", timeout_graceful_shutdown=2)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return 0
