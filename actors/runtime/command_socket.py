"""Command sockets, the serving side: the long-lived process of a session (its supervisor, or
an agent's bridge) runs the command-line calls sent to it (the calling side and the wire
format: :mod:`actors.runtime.command_wire`).

Rules:
- The socket is an abstract Unix socket with a random name (nothing on disk to clean up after
  a SIGKILL); it takes only processes of this user (``SO_PEERCRED``) in this process's pid
  namespace (a sandboxed agent that shares the network could otherwise reach it), except a
  sandbox's own socket: a file bound into that one sandbox. What it runs carries the
  caller's own environment and directory; a supervisor's calls need what ``session.json``
  (private to this user) gives a client anyway, and a bridge's carry the caller's own identity
  and capability, which the parent checks as for any call: the socket gives a caller nothing
  it did not have.
- Each request runs on a thread of its own through the owner's runner, the very code its
  command line runs with the output captured (:func:`actors.child.cli.run_captured`,
  :func:`actors.surfaces.forwarded.run_forwarded`), so the answer is what the command would
  have printed; a runner that finds the call is not its own (another session) answers
  ``elsewhere`` and its caller runs it. At most :data:`MAX_RUNNING` run at once (``wait`` and
  ``approve-request`` may wait long); one more is greeted ``busy`` before it sent anything.
- A request is read whole (at most ``MAX_REQUEST_BYTES``, within :data:`READ_TIMEOUT_S`)
  before anything runs; one that is too large, not JSON, not a :class:`Request` or not one of
  the owner's commands is answered as a refused call (exit 2, ``invalid_argument``) and
  nothing runs.
- :meth:`CommandServer.close` stops taking calls; calls running then end with their process
  (their callers see ``session_unavailable``).
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
from dataclasses import dataclass
from typing import Any

from actors.runtime.command_wire import MAX_REQUEST_BYTES, READY
from actors.runtime.log import logger

__all__ = ["MAX_RUNNING", "CommandServer", "Request", "Runner"]

#: calls run at once (each a thread waiting on the parent's receipt or decision)
MAX_RUNNING = 32

#: how long a caller may take to send its request (ours sends it at once)
READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Request:
    """One call: the command line's arguments, the caller's environment and directory, and
    whether the caller found the session as the one live one (so it is named on stderr)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str = "/"
    announce: bool = False


#: runs one call: (exit status, stdout, stderr), or None if the call is not this owner's
Runner = Callable[[Request], "tuple[int, str, str] | None"]


def _refusal(program: str, message: str) -> dict[str, Any]:
    return {"code": 2, "stdout": "", "stderr": f"{program}: invalid_argument: {message}\n"}


def _checked(raw: bytes, allowed: frozenset[str]) -> Request | str:
    """The request, or why it is refused."""
    try:
        request = json.loads(raw)
    except ValueError:
        return "the request is not JSON"
    if not isinstance(request, dict):
        return "the request is not an object"
    argv, env = request.get("argv"), request.get("env")
    cwd, announce = request.get("cwd", "/"), request.get("announce", False)
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "argv must be a list of strings"
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        return "env must map names to strings"
    if not (isinstance(cwd, str) and os.path.isabs(cwd)) or not isinstance(announce, bool):
        return "cwd must be an absolute path and announce true or false"
    if not argv or argv[0] not in allowed:
        return f"this socket runs only {', '.join(sorted(allowed))}"
    return Request(argv, env, cwd, announce)


class CommandServer:
    """One process's command socket (module rules): ``run`` runs the calls, which must be
    among ``allowed``; ``program`` names the command line in refusals."""

    def __init__(
        self,
        run: Runner,
        allowed: frozenset[str],
        *,
        program: str = "shepherd",
        max_running: int = MAX_RUNNING,
        path: str | None = None,
    ) -> None:
        self._run = run
        self._allowed = allowed
        self._program = program
        self._slots = threading.BoundedSemaphore(max_running)
        self._name = f"shepherd-{os.getpid()}-{secrets.token_hex(12)}"
        #: a sandbox's socket: a file in a private directory bound into one agent's sandbox,
        #: whose callers are in that sandbox's process namespace (actors.child.sandbox)
        self._path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path if path is not None else "\0" + self._name)
        if path is not None:
            os.chmod(path, 0o600)
        self._sock.listen(64)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="commands", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """The socket's name as callers are told it (``session.json``,
        ``SHEPHERD_COMMAND_SOCKET``): see :func:`~actors.runtime.command_wire.socket_address`."""
        return self._path if self._path is not None else "@" + self._name

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
            if not self._same_user(conn) or not (self._path or self._same_namespace(conn)):
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

    @staticmethod
    def _same_namespace(conn: socket.socket) -> bool:
        """A caller in this process's pid namespace: a sandboxed agent (which may share the
        network, so reach an abstract socket) is never served here."""
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid: int = struct.unpack("3i", creds)[0]
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
        except OSError:
            return pid != 0  # no /proc to tell: the peer is named, so it is in sight

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.sendall(READY)
            conn.settimeout(READ_TIMEOUT_S)  # a caller that never finishes its request
            raw = self._read(conn)
            conn.settimeout(None)
            checked = (
                _checked(raw, self._allowed)
                if raw is not None
                else f"the request is over {MAX_REQUEST_BYTES} bytes"
            )
            answer: dict[str, Any]
            if isinstance(checked, str):
                answer = _refusal(self._program, checked)
            elif (ran := self._run(checked)) is None:
                answer = {"elsewhere": True}
            else:
                answer = {"code": ran[0], "stdout": ran[1], "stderr": ran[2]}
            self._answer(conn, answer)
        except Exception:  # a failed call must not end its process; its caller sees no answer
            logger.opt(exception=True).error("a forwarded {} call failed", self._program)
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
