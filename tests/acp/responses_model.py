"""A scripted model server speaking the OpenAI Responses API (``POST …/responses``, streamed as
server-sent events), for driving the real codex-acp offline. Each request takes the next
scripted answer: a text (an assistant message) or a function call; every request body is
recorded. ``add_hold()`` makes an answer wait until :meth:`release` (a turn in flight)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ResponsesModel"]


class ResponsesModel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        #: set when a held answer is asked for; the held answer goes out once released
        self.holding = threading.Event()
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def add_text(self, text: str) -> None:
        with self._lock:
            self._answers.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "id": f"msg_{len(self._answers)}",
                    "content": [{"type": "output_text", "text": text}],
                }
            )

    def add_call(self, name: str, arguments: dict[str, Any], namespace: str | None = None) -> None:
        """A function call (an MCP tool's: ``namespace`` names its server, e.g. mcp__shepherd)."""
        with self._lock:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{len(self._answers)}",
                "call_id": f"call_{len(self._answers)}",
                "name": name,
                "arguments": json.dumps(arguments),
            }
            if namespace is not None:
                item["namespace"] = namespace
            self._answers.append(item)

    def add_hold(self) -> None:
        """The next request waits (``holding`` set) until :meth:`release`, then is answered
        with the next scripted answer."""
        with self._lock:
            self._answers.append({"hold": True})

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _next(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            item = self._answers.pop(0) if self._answers else None
            held = item is not None and item.get("hold") is True
            if held:
                item = self._answers.pop(0) if self._answers else None
        if held:
            self.holding.set()
            self._released.wait(60)
        serial = len(self.requests)
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": f"resp_{serial}"}}
        ]
        if item is not None:
            events.append({"type": "response.output_item.done", "item": item})
        usage = {
            "input_tokens": 100,
            "input_tokens_details": None,
            "output_tokens": 20,
            "output_tokens_details": None,
            "total_tokens": 120,
        }
        events.append(
            {"type": "response.completed", "response": {"id": f"resp_{serial}", "usage": usage}}
        )
        return events

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _send(self, status: int, ctype: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, "application/json", b'{"data": [], "models": []}')

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                if not self.path.split("?", 1)[0].rstrip("/").endswith("/responses"):
                    self._send(404, "application/json", b'{"error": "not found"}')
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unreadable": True}
                events = model._next(body if isinstance(body, dict) else {})
                data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
                self._send(200, "text/event-stream", data.encode())

        return Handler
