"""A minimal synchronous MCP client over a server subprocess's stdio (newline-delimited
JSON-RPC), for tests that must kill the server outright: the SDK's client owns its process."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.reliability.live import wait_terminated

TIMEOUT_S = 30.0


class McpProcess:
    """``python -m actors.surfaces.mcp_server ARGS`` with its stdio as the transport."""

    def __init__(
        self,
        cwd: Path,
        *args: str,
        env: dict[str, str] | None = None,
        version: str = "2025-06-18",
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self.stderr_path = cwd / f"mcp-{id(self):x}.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actors.surfaces.mcp_server", *args],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env or dict(os.environ),
        )
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0
        #: the server's notifications, in arrival order (read while waiting for an answer)
        self.notifications: list[dict[str, Any]] = []
        self.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "shepherd-tests", "version": "0"},
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self._lines.put(json.loads(raw))
            except ValueError:
                continue
        self._lines.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        self.send_line(json.dumps(message).encode())

    def send_line(self, line: bytes) -> None:
        """One line as it is (a newline added)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def next_message(self) -> dict[str, Any]:
        """The next message the server writes (those kept as notifications aside)."""
        message = self._lines.get(timeout=TIMEOUT_S)
        if message is None:
            raise AssertionError(f"the MCP server exited: {self.stderr()}")
        return message

    def send_request(self, method: str, params: dict[str, Any]) -> int:
        """Send a request without waiting for its answer; its id."""
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def end_input(self) -> list[dict[str, Any]]:
        """Close the server's stdin; every message it writes until it exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        messages = []
        while (message := self._lines.get(timeout=TIMEOUT_S)) is not None:
            messages.append(message)
        return messages

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        ident = self.send_request(method, params)
        while True:
            message = self._lines.get(timeout=TIMEOUT_S)
            if message is None:
                raise AssertionError(f"the MCP server exited: {self.stderr()}")
            if "id" not in message:
                self.notifications.append(message)
            elif message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool call's structured content (an error's too: check ``"error" in``)."""
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        structured: dict[str, Any] = result["structuredContent"]
        assert json.loads(result["content"][0]["text"]) == structured
        return structured

    def next_notification(self) -> dict[str, Any]:
        """Wait for the server's next notification (those read already first)."""
        while not self.notifications:
            message = self._lines.get(timeout=TIMEOUT_S)
            if message is None:
                raise AssertionError(f"the MCP server exited: {self.stderr()}")
            if "id" not in message:
                self.notifications.append(message)
        return self.notifications.pop(0)

    def stderr(self) -> str:
        return self.stderr_path.read_text()[-4000:]

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the server."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        assert wait_terminated(self.proc.pid, TIMEOUT_S)
        self.close()

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # the client goes: the server ends
        try:
            self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._reader.join(timeout=5)
        self._stderr.close()
