"""The bridge's command socket: it runs its agent's ``shepherd-child`` calls, so that a call
costs a connection instead of the command line's start-up (the client side and the wire
format: :mod:`actors.child.entry`).

Rules:
- The socket is an abstract Unix socket with a random name (nothing on disk to clean up after
  a SIGKILL); it takes only processes of this user (``SO_PEERCRED``), and what it runs carries
  the caller's own identity and capability from the environment it sent, which the parent
  checks as for any call: the socket gives a caller nothing it did not have.
- Each request is run on a thread of its own by the bridge's runner,
  :func:`actors.child.cli.run_captured`: the very code the command line runs, output captured,
  so the answer is what the command would have printed. At most :data:`MAX_RUNNING` run at
  once (``approve-request`` may wait long); one more is greeted ``busy`` before it sent
  anything, and its caller runs the command itself.
- A request is read whole (at most ``MAX_REQUEST_BYTES``) before anything runs; one that is too
  large, not JSON, not ``{"argv": [str, ...], "env": {str: str}}`` or not a forwarded command is
  answered as a refused call (exit 2, ``invalid_argument``) and nothing runs.
- :meth:`CommandServer.close` stops taking calls; calls running then end with the bridge (their
  callers see ``session_unavailable``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

from actors.child.command_wire import FORWARDED, MAX_REQUEST_BYTES, READY
from actors.runtime.log import logger

__all__ = ["MAX_RUNNING", "CommandServer", "Runner"]

#: calls run at once (each a thread waiting on the parent's receipt or decision)
MAX_RUNNING = 32

#: how long a caller may take to send its request (ours sends it at once)
READ_TIMEOUT_S = 30.0

Runner = Callable[[list[str], Mapping[str, str]], tuple[int, str, str]]


def _refusal(message: str) -> dict[str, Any]:
    return {
        "code": 2,
        "stdout": "",
        "stderr": f"shepherd-child: {message} (invalid_argument)\n",
    }


def _checked(raw: bytes) -> tuple[list[str], dict[str, str]] | str:
    """The request's arguments and environment, or why it is refused."""
    try:
        request = json.loads(raw)
    except ValueError:
        return "the request is not JSON"
    if not isinstance(request, dict):
        return "the request is not an object"
    argv, env = request.get("argv"), request.get("env")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "argv must be a list of strings"
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        return "env must map names to strings"
    if not argv or argv[0] not in FORWARDED:
        return f"the bridge runs only {', '.join(sorted(FORWARDED))}"
    return argv, env


class CommandServer:
    """One bridge's command socket (module rules)."""

    def __init__(self, run: Runner, *, max_running: int = MAX_RUNNING) -> None:
        self._run = run
        self._slots = threading.BoundedSemaphore(max_running)
        self._name = f"shepherd-{os.getpid()}-{secrets.token_hex(12)}"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind("\0" + self._name)
        self._sock.listen(64)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="commands", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """What an agent's ``SHEPHERD_COMMAND_SOCKET`` holds."""
        return "@" + self._name

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        self._sock.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            if not self._same_user(conn):
                conn.close()
                continue
            if not self._slots.acquire(blocking=False):
                self._answer(conn, {"busy": True})  # before the caller sent anything
                continue
            threading.Thread(target=self._serve, args=(conn,), name="command", daemon=True).start()

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        uid: int = struct.unpack("3i", creds)[1]
        return uid == os.getuid()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.sendall(READY)
            conn.settimeout(READ_TIMEOUT_S)  # a caller that never finishes its request
            raw = self._read(conn)
            conn.settimeout(None)
            if raw is None:
                answer = _refusal(f"the request is over {MAX_REQUEST_BYTES} bytes")
            else:
                checked = _checked(raw)
                if isinstance(checked, str):
                    answer = _refusal(checked)
                else:
                    code, out, err = self._run(*checked)
                    answer = {"code": code, "stdout": out, "stderr": err}
            self._answer(conn, answer)
        except Exception:  # a failed call must not end the bridge; its caller sees no answer
            logger.opt(exception=True).error("a forwarded shepherd-child call failed")
            conn.close()
        finally:
            self._slots.release()

    @staticmethod
    def _read(conn: socket.socket) -> bytes | None:
        """The whole request (the caller shuts its side), or None past the bound."""
        chunks: list[bytes] = []
        size = 0
        while chunk := conn.recv(1 << 16):
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    @staticmethod
    def _answer(conn: socket.socket, answer: Mapping[str, Any]) -> None:
        with conn, contextlib.suppress(OSError):  # a caller that is gone: nothing to tell
            conn.sendall(json.dumps(answer).encode() + b"\n")
