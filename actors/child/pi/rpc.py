"""A low-level client for the Pi coding agent's RPC mode.

Rules (measured with Pi 0.73.1, npm ``@mariozechner/pi-coding-agent``):
- Pi runs in its own process group and session (``start_new_session``; a subclass may keep
  it in the caller's session, see ``PiProcess.own_session``) with an isolated,
  fresh ``PI_CODING_AGENT_DIR`` holding ``models.json``, and ``PI_OFFLINE=1``: it never
  touches the user's ``~/.pi`` and never goes to the network by itself
  (:mod:`actors.child.pi.launch`).
- One JSON object per line each way (:mod:`actors.child.pi.wire` states the framing).
- Every command sent through :meth:`PiProcess.command` gets an ``id``, and its response
  resolves the caller (:mod:`actors.child.pi.calls` states the matching, ids or none).
- Events (lines that are not responses) go to ``on_event`` on the reader thread, in stdout
  order. A response is resolved only after every event printed before it has been handed to
  ``on_event``: e.g. when :meth:`PiProcess.abort` returns, the ``agent_end`` it caused has
  already been delivered.
- There is no "ready" event: :meth:`PiProcess.wait_ready` is a ``get_state`` round trip.
  What an event means to the runtime is :func:`actors.child.pi.events.map_event`'s business.
- Closing stdin makes Pi exit 0, but Pi runs every bash tool command *detached* (its own
  process group and session) and only kills those on SIGTERM/SIGHUP, not on end of input or
  SIGKILL. So Pi's environment carries a per-instance tag (``SHEPHERD_PI_INSTANCE``) that
  every tool process inherits; :meth:`PiProcess.close` and :meth:`PiProcess.kill` kill Pi's
  group, its descendants and every process still carrying the tag: nothing Pi started
  outlives them (best effort for a tool that scrubs its environment and daemonises).

Theory of operation: one reader thread owns stdout (decode, dispatch, then on EOF reap the
process, fail every waiting caller with :class:`~actors.child.pi.errors.PiExitedError` and
call ``on_exit``); one thread drains stderr into a bounded buffer (or Pi writes it straight
to a file). Writers to stdin share one lock. Callbacks run on the reader thread: keep them
short and never send a command from one (it raises :class:`~actors.child.pi.errors.PiError`:
its answer would have to be read by that thread).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Literal, Self

from actors.child.adapters import Wrap
from actors.child.pi.calls import PendingCalls
from actors.child.pi.errors import PiCommandError, PiError, PiExitedError, PiTimeoutError
from actors.child.pi.launch import TAG_VAR, new_tag, pi_argv, pi_environ, write_models
from actors.child.pi.wire import BadLine, decode_line, encode_line, is_response, read_lines
from actors.runtime.log import logger
from actors.runtime.procs import Proc, descendants, kill_all, tagged

__all__ = ["PiProcess"]

_STDERR_LIMIT = 64 * 1024
_TERM_GRACE = 2.0


class PiProcess:
    """One Pi process in RPC mode. Starts on construction; use as a context manager.

    ``models`` is the content of ``models.json`` (a mapping) or a path to such a file to copy;
    ``None`` uses whatever ``agent_dir`` already holds. Without ``agent_dir`` a fresh temporary
    one is made and removed on :meth:`close`.
    """

    #: Pi leads a session of its own, hence its own process group: signals for the parent's
    #: terminal never reach it. False keeps it in the caller's session, leading only its own
    #: process group (a sweep of the caller's session then reaches it too).
    own_session: ClassVar[bool] = True

    def __init__(
        self,
        pi: str | os.PathLike[str],
        *,
        models: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        provider: str = "fake",
        model: str = "fake-model",
        extensions: Sequence[str | os.PathLike[str]] = (),
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        agent_dir: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        on_event: Callable[[dict[str, Any]], None] | None = None,
        on_exit: Callable[[int], None] | None = None,
        stderr_path: str | os.PathLike[str] | None = None,
        stderr_limit: int = _STDERR_LIMIT,
        session_dir: str | os.PathLike[str] | None = None,
        wrap: Wrap | None = None,
    ) -> None:
        self._on_event = on_event
        self._on_exit = on_exit
        self._stderr_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._exited = threading.Event()  # set by self._calls, see PendingCalls
        self._closed = False
        self._stderr_buf = bytearray()
        self._stderr_limit = stderr_limit
        self._stderr_path = Path(stderr_path) if stderr_path is not None else None

        self.argv: list[str] = pi_argv(
            pi,
            provider=provider,
            model=model,
            extensions=extensions,
            extra_args=extra_args,
            session_dir=session_dir,
        )
        self._tag = new_tag()

        self._own_agent_dir = agent_dir is None
        self.agent_dir = Path(
            tempfile.mkdtemp(prefix="shepherd-pi-") if agent_dir is None else agent_dir
        )
        try:
            write_models(self.agent_dir, models)
            full_env = pi_environ(env, self.agent_dir, self._tag)
            if wrap is not None:  # the agent's sandbox (AgentContext.sandboxed)
                self.argv, full_env = wrap(self.argv, full_env)
            self._proc = self._spawn(full_env, cwd)
        except BaseException:
            if self._own_agent_dir:
                shutil.rmtree(self.agent_dir, ignore_errors=True)
            raise

        self.pgid = self._proc.pid  # a group leader, so its pid is its group id
        self._calls = PendingCalls(self._proc.pid, self._exited)
        self._log = logger.bind(pi_pid=self._proc.pid)
        self._log.debug("pi started: {}", " ".join(self.argv))
        self._reader = threading.Thread(
            target=self._read_stdout, name=f"pi-rpc-out:{self._proc.pid}", daemon=True
        )
        self._stderr_reader: threading.Thread | None = None
        if self._proc.stderr is not None:
            self._stderr_reader = threading.Thread(
                target=self._read_stderr, name=f"pi-rpc-err:{self._proc.pid}", daemon=True
            )
            self._stderr_reader.start()
        self._reader.start()

    def _spawn(
        self, env: dict[str, str], cwd: str | os.PathLike[str] | None
    ) -> subprocess.Popen[bytes]:
        stderr_file: IO[bytes] | None = None
        if self._stderr_path is not None:
            stderr_file = self._stderr_path.open("ab")
        try:
            return subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr_file if stderr_file is not None else subprocess.PIPE,
                cwd=os.fspath(cwd) if cwd is not None else None,
                env=env,
                # Its own group either way, so close() can kill the group as a whole
                # (see own_session for the session).
                start_new_session=self.own_session,
                process_group=None if self.own_session else 0,
            )
        finally:
            if stderr_file is not None:
                stderr_file.close()  # the child holds its own descriptor now

    # -- facts ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once Pi has exited and been reaped (negative: killed by signal)."""
        return self._proc.returncode if self._exited.is_set() else None

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    def stderr_text(self) -> str:
        """The tail of what Pi wrote to stderr (bounded), or the file's tail."""
        if self._stderr_path is not None:
            try:
                with self._stderr_path.open("rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.seek(max(0, fh.tell() - self._stderr_limit))
                    return fh.read().decode(errors="replace")
            except OSError:
                return ""
        with self._stderr_lock:
            return self._stderr_buf.decode(errors="replace")

    def wait(self, timeout: float | None = None) -> int:
        """Wait for Pi to exit on its own; raises ``PiTimeoutError`` if it does not in time."""
        if not self._exited.wait(timeout):
            raise PiTimeoutError(f"pi (pid {self.pid}) still running after {timeout}s")
        return self._proc.returncode

    # -- commands ---------------------------------------------------------------------

    def send(self, obj: Mapping[str, Any]) -> None:
        """Write one JSON line to Pi's stdin without waiting for anything."""
        line = encode_line(obj)
        stdin = self._proc.stdin
        with self._write_lock:
            if stdin is None or stdin.closed or self._exited.is_set():
                raise PiExitedError(f"pi (pid {self.pid}) is not accepting input")
            try:
                stdin.write(line)
                stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                raise PiExitedError(f"pi (pid {self.pid}) closed its input") from exc

    def command(self, obj: Mapping[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """Send a command and return Pi's response (whatever its ``success``).

        An ``id`` is assigned unless ``obj`` has one.
        """
        if threading.current_thread() is self._reader:
            # The answer would have to be read by this very thread: it could never arrive.
            raise PiError("command() called from an on_event/on_exit callback would deadlock")
        cmd = dict(obj)
        if "id" not in cmd:
            cmd["id"] = self._calls.new_id()
        cmd_id = str(cmd["id"])
        waiter = self._calls.expect(cmd_id, str(cmd.get("type", "")))
        try:
            self.send(cmd)
            if not waiter.done.wait(timeout):
                raise PiTimeoutError(f"pi did not answer {waiter.command!r} within {timeout}s")
        finally:
            self._calls.forget(cmd_id)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.response is not None
        return waiter.response

    def call(self, obj: Mapping[str, Any], timeout: float = 10.0) -> Any:
        """Like :meth:`command`, but raise :class:`PiCommandError` on ``success: false`` and
        return the response's ``data`` (``None`` when there is none)."""
        response = self.command(obj, timeout)
        if not response.get("success"):
            raise PiCommandError(
                str(response.get("command", obj.get("type"))), str(response.get("error"))
            )
        return response.get("data")

    def prompt(
        self,
        text: str,
        streaming_behavior: Literal["steer", "followUp"] | None = None,
        timeout: float = 10.0,
    ) -> None:
        """Start a run (idle) or queue the message (busy, with ``streaming_behavior``)."""
        cmd: dict[str, Any] = {"type": "prompt", "message": text}
        if streaming_behavior is not None:
            cmd["streamingBehavior"] = streaming_behavior
        self.call(cmd, timeout)

    def steer(self, text: str, timeout: float = 10.0) -> None:
        """Deliver after the running tool batch, before the next model call.

        While Pi is idle this is accepted but starts nothing: use :meth:`prompt` then."""
        self.call({"type": "steer", "message": text}, timeout)

    def follow_up(self, text: str, timeout: float = 10.0) -> None:
        """Deliver after the current run's final answer (idle: see :meth:`steer`)."""
        self.call({"type": "follow_up", "message": text}, timeout)

    def abort(self, timeout: float = 10.0) -> None:
        """Abort the current run. The run's ``agent_end`` is delivered before this returns."""
        self.call({"type": "abort"}, timeout)

    def get_state(self, timeout: float = 10.0) -> dict[str, Any]:
        data = self.call({"type": "get_state"}, timeout)
        return data if isinstance(data, dict) else {}

    def wait_ready(self, timeout: float = 15.0) -> dict[str, Any]:
        """Block until Pi answers a ``get_state``; returns that state."""
        return self.get_state(timeout)

    # -- shutdown ---------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> int | None:
        """Stop Pi and everything it started; reap; remove a temporary agent dir. Idempotent.

        Closes stdin and waits up to ``timeout`` for Pi to exit; then SIGTERM (Pi kills its
        detached tool processes on SIGTERM), then SIGKILL, to the whole process group. Then
        every process Pi started that is still running is killed. Returns the exit status.
        """
        with self._close_lock:
            if self._closed:
                return self.returncode
            self._closed = True
            leftovers = self._family()
            with self._write_lock:
                if self._proc.stdin is not None:
                    with contextlib.suppress(OSError, ValueError):
                        self._proc.stdin.close()
            if not self._exited.wait(timeout):
                self._log.debug("pi did not exit on end of input; SIGTERM to its group")
                self._kill_group(signal.SIGTERM)
                if not self._exited.wait(_TERM_GRACE):
                    self._kill_group(signal.SIGKILL)
            self._proc.wait()  # the reader reaps too; this covers a reader that died early
            # Pi is reaped, so its group id may be free for reuse: from here on only processes
            # found alive (snapshot, or carrying the tag) are killed, each pinned by a pidfd.
            kill_all(leftovers | self._family())
            if threading.current_thread() is not self._reader:  # close() from on_exit
                self._reader.join(timeout=5.0)
            if self._stderr_reader is not None:
                self._stderr_reader.join(timeout=5.0)
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            if self._own_agent_dir:
                shutil.rmtree(self.agent_dir, ignore_errors=True)
            self._log.debug("pi closed, rc={}", self._proc.returncode)
            return self._proc.returncode

    def kill(self) -> None:
        """SIGKILL Pi, its whole group and every process it started, now (a crash, as seen
        from outside). The reader then observes the exit; :meth:`close` reaps and cleans up."""
        family = self._family()
        if not self._exited.is_set():
            self._kill_group(signal.SIGKILL)
        kill_all(family)

    def _family(self) -> set[Proc]:
        """Pi's live descendants plus every live process carrying this instance's tag.

        Once Pi has been reaped its pid may belong to someone else: then only the tag counts.
        """
        family = tagged(TAG_VAR, self._tag)
        if not self._exited.is_set():
            family |= descendants(self.pid)
        return family

    def _kill_group(self, sig: signal.Signals) -> None:
        """Signal Pi's process group; only while Pi (its leader) is unreaped, so the group id
        is still Pi's."""
        if self._exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reader threads ---------------------------------------------------------------

    def _read_stdout(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            for line in read_lines(stdout):
                self._dispatch(line)
        except (OSError, ValueError):
            pass  # stdout closed under us by close(): the process is going away
        finally:
            returncode = self._proc.wait()
            self._calls.fail_all(returncode)
            self._log.debug("pi exited, rc={}", returncode)
            if self._on_exit is not None:
                try:
                    self._on_exit(returncode)
                except Exception:
                    self._log.exception("on_exit callback failed")

    def _dispatch(self, line: bytes) -> None:
        try:
            msg = decode_line(line)
        except BadLine as exc:
            self._log.warning("pi wrote {}: {!r}", exc, line[:200])
            return
        if is_response(msg):
            if not self._calls.resolve(msg):
                self._log.debug("pi response nobody waits for: {}", msg)
            return
        if self._on_event is not None:
            try:
                self._on_event(msg)
            except Exception:
                self._log.exception("on_event callback failed for {}", msg.get("type"))

    def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        fd = stderr.fileno()
        try:
            for chunk in iter(lambda: os.read(fd, 65536), b""):
                with self._stderr_lock:
                    self._stderr_buf += chunk
                    overflow = len(self._stderr_buf) - self._stderr_limit
                    if overflow > 0:
                        del self._stderr_buf[:overflow]
        except (OSError, ValueError):
            pass
