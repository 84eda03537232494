"""A scripted OpenAI-compatible chat-completions server for driving real agents in tests.

Rules:
- It listens on 127.0.0.1 only (port 0 picks a free port) and never reaches anything else.
- Every ``POST …/chat/completions`` is recorded (its JSON body, in arrival order) *before* it is
  answered, then consumes the next step of the script. When the script is exhausted the
  answer is the default text (``"ok"`` unless configured).
- A step is a :class:`Text`, a :class:`ToolCall`, a :class:`ToolCalls` (several calls in one
  answer), a :class:`Gate` (wait for a ``threading.Event``, then answer with its inner step)
  or a :class:`Fail` (an HTTP error with an OpenAI-style error body: a provider refusing the
  turn, e.g. ``Fail(429, "Rate limit reached … Please try again in 2s.", retry_after=2)``
  with a ``Retry-After`` header, ``Fail(529, "Overloaded")``, ``Fail(500)``).
- Streaming follows what the real Pi agent accepts (measured with Pi 0.73.1): one
  ``chat.completion.chunk`` with the assistant role, then either text deltas and
  ``finish_reason: "stop"`` or ``delta.tool_calls[{index,id,type,function{name,arguments}}]``
  and ``finish_reason: "tool_calls"``; then a usage-only chunk; then ``data: [DONE]``.
  ``stream: false`` gets one ``chat.completion`` object instead.
- ``close()`` releases every gate still being waited on, so no handler thread outlives the
  server waiting for a test that has already finished.

Theory of operation: a ``ThreadingHTTPServer`` runs ``serve_forever`` in a daemon thread;
each request is handled on its own daemon thread. The script, the recorded requests and the
in-flight gates are guarded by one ``threading.Condition``, which is also what
``wait_for_requests`` waits on (no polling).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "Fail",
    "Gate",
    "ScriptedModel",
    "Step",
    "Text",
    "ToolCall",
    "ToolCalls",
    "models_json",
]

# Text deltas are cut into pieces of this many characters, so a client sees real streaming.
_TEXT_CHUNK = 40


@dataclass(frozen=True, slots=True)
class Text:
    """Answer with assistant text (``finish_reason: "stop"``)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Answer with one tool call (``finish_reason: "tool_calls"``).

    ``id`` defaults to a deterministic ``call_<request>_<index>``.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True, init=False)
class ToolCalls:
    """Answer with several tool calls in one assistant message, optionally after some text."""

    calls: tuple[ToolCall, ...]
    text: str

    def __init__(self, *calls: ToolCall, text: str = "") -> None:
        if not calls:
            raise ValueError("ToolCalls needs at least one ToolCall")
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "text", text)


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer with an HTTP error status and an OpenAI-style error body; ``retry_after`` (in
    seconds) adds a ``Retry-After`` header, as a rate-limiting provider sends one."""

    status: int = 400
    message: str = "scripted failure"
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Gate:
    """Hold the request open until ``event`` is set, then answer with ``then``.

    This keeps the model "busy" for exactly as long as a test wants. ``timeout`` bounds the
    wait; when it passes the request is answered with HTTP 504 so nothing hangs forever.
    """

    event: threading.Event
    then: Text | ToolCall | ToolCalls | Fail = field(default_factory=lambda: Text("ok"))
    timeout: float = 60.0


Step = Text | ToolCall | ToolCalls | Fail | Gate
_Answer = Text | ToolCall | ToolCalls | Fail


def models_json(
    base_url: str,
    provider: str = "fake",
    model: str = "fake-model",
    *,
    context_window: int = 128_000,
    max_tokens: int = 4096,
) -> dict[str, Any]:
    """The content of Pi's ``models.json`` declaring one OpenAI-compatible provider."""
    return {
        "providers": {
            provider: {
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": "fake-key",
                # The scripted server (like many local servers) knows neither the developer
                # role nor reasoning effort; say so, or Pi sends them.
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": model, "contextWindow": context_window, "maxTokens": max_tokens}],
            }
        }
    }


class ScriptedModel:
    """An OpenAI-compatible chat-completions server that follows a script of steps.

    Use as a context manager, or call :meth:`close` yourself.
    """

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        default: Step | None = None,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if host not in {"127.0.0.1", "localhost", "::1"}:
            raise ValueError(f"the scripted model listens on loopback only, not {host!r}")
        self.model = model
        self._default: Step = default if default is not None else Text("ok")
        self._steps: deque[Step] = deque()
        self._requests: list[dict[str, Any]] = []
        #: when each request arrived (wall clock, as the session's notices are stamped)
        self._times: list[float] = []
        self._open_gates: list[threading.Event] = []
        self._cond = threading.Condition()
        self._closed = False
        self._serial = 0
        self.add_steps(*steps)

        server = ThreadingHTTPServer((host, port), _Handler)
        server.daemon_threads = True
        server.scripted = self  # type: ignore[attr-defined]
        self._server = server
        self.port: int = server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-model:{self.port}",
            daemon=True,
        )
        self._thread.start()

    # -- script -----------------------------------------------------------------------

    def add_steps(self, *steps: Step) -> None:
        """Append steps to the script (they are consumed in order, one per request)."""
        for step in steps:
            if not isinstance(step, Text | ToolCall | ToolCalls | Fail | Gate):
                raise TypeError(f"not a scripted step: {step!r}")
        with self._cond:
            self._steps.extend(steps)

    @property
    def pending_steps(self) -> int:
        """How many scripted steps have not been consumed yet."""
        with self._cond:
            return len(self._steps)

    # -- what the client sent ---------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot of the JSON bodies of every chat-completions request, in order."""
        with self._cond:
            return list(self._requests)

    @property
    def request_times(self) -> list[float]:
        """When each request arrived (``time.time()``), in order."""
        with self._cond:
            return list(self._times)

    def wait_for_requests(self, n: int, timeout: float) -> list[dict[str, Any]]:
        """Wait until at least ``n`` requests have arrived; return the snapshot.

        Raises ``TimeoutError`` if they did not arrive within ``timeout`` seconds.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(
                    f"waited {timeout}s for {n} model request(s), got {len(self._requests)}"
                )
            return list(self._requests)

    # -- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Stop serving, release every open gate, close the listening socket. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            gates = list(self._open_gates)
            self._cond.notify_all()
        for gate in gates:
            gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- used by the handler ----------------------------------------------------------

    def _take(self, body: dict[str, Any]) -> tuple[int, Step]:
        with self._cond:
            self._serial += 1
            self._requests.append(body)
            self._times.append(time.time())
            step = self._steps.popleft() if self._steps else self._default
            self._cond.notify_all()
            return self._serial, step

    def _pass_gate(self, gate: Gate) -> bool:
        """Wait for the gate; False when it timed out or the server closed meanwhile."""
        with self._cond:
            if self._closed:
                return False
            self._open_gates.append(gate.event)
        try:
            opened = gate.event.wait(gate.timeout)
        finally:
            with self._cond:
                self._open_gates.remove(gate.event)
                closed = self._closed
        return opened and not closed


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, closed after the answer. An SSE stream then needs
    # no chunked encoding, and no keep-alive connection pins a handler thread after close().
    protocol_version = "HTTP/1.0"
    server_version = "ScriptedModel/1"

    @property
    def _model(self) -> ScriptedModel:
        scripted: ScriptedModel = self.server.scripted  # type: ignore[attr-defined]
        return scripted

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request stderr line."""

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            model = self._model.model
            self._send_json(
                HTTPStatus.OK,
                {
                    "object": "list",
                    "data": [{"id": model, "object": "model", "owned_by": "shepherd"}],
                },
            )
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route for GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if not self.path.split("?", 1)[0].rstrip("/").endswith("/chat/completions"):
            self._send_error(HTTPStatus.NOT_FOUND, f"no route for POST {self.path}")
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            self._send_error(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {exc}")
            return
        if not isinstance(body, dict):
            self._send_error(HTTPStatus.BAD_REQUEST, "request body is not a JSON object")
            return
        serial, step = self._model._take(body)
        if isinstance(step, Gate):
            if not self._model._pass_gate(step):
                self._send_error(HTTPStatus.GATEWAY_TIMEOUT, "scripted gate was not opened")
                return
            step = step.then
        # The client may have gone away (an aborted request): then there is nobody to answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(serial, step, stream=bool(body.get("stream", False)))

    # -- answers ----------------------------------------------------------------------

    def _answer(self, serial: int, step: _Answer, *, stream: bool) -> None:
        if isinstance(step, Fail):
            wait = step.retry_after
            headers = {"Retry-After": f"{wait:g}"} if wait is not None else {}
            self._send_error(step.status, step.message, headers)
            return
        text, calls = _content(serial, step)
        if stream:
            self._send_stream(serial, text, calls)
        else:
            self._send_completion(serial, text, calls)

    def _send_stream(self, serial: int, text: str, calls: list[dict[str, Any]]) -> None:
        base = {
            "id": f"chatcmpl-scripted-{serial}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self._model.model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        for start in range(0, len(text), _TEXT_CHUNK):
            events.append(chunk({"content": text[start : start + _TEXT_CHUNK]}))
        for index, call in enumerate(calls):
            events.append(chunk({"tool_calls": [{"index": index, **call}]}))
        events.append(chunk({}, "tool_calls" if calls else "stop"))
        events.append({**base, "choices": [], "usage": _usage(text, calls)})

        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _send_completion(self, serial: int, text: str, calls: list[dict[str, Any]]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        self._send_json(
            HTTPStatus.OK,
            {
                "id": f"chatcmpl-scripted-{serial}",
                "object": "chat.completion",
                "created": 0,
                "model": self._model.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if calls else "stop",
                    }
                ],
                "usage": _usage(text, calls),
            },
        )

    def _send_error(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            body = {"error": {"message": message, "type": "scripted_error", "code": status}}
            self._send_json(status, body, headers)

    def _send_json(
        self, status: int, obj: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


def _content(serial: int, step: Text | ToolCall | ToolCalls) -> tuple[str, list[dict[str, Any]]]:
    """The assistant text and the OpenAI ``tool_calls`` entries one step answers with."""
    if isinstance(step, Text):
        return step.text, []
    calls = (step,) if isinstance(step, ToolCall) else step.calls
    text = step.text if isinstance(step, ToolCalls) else ""
    return text, [
        {
            "id": call.id or f"call_{serial}_{index}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
        }
        for index, call in enumerate(calls)
    ]


def _usage(text: str, calls: list[dict[str, Any]]) -> dict[str, int]:
    # Rough but stable numbers: clients only need the shape and plausible magnitudes.
    completion = max(1, len(text) // 4) + 10 * len(calls)
    return {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}
