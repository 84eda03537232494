"""The ``scripted`` adapter: a :class:`~protocol.scripted.script_machine.ScriptMachine` run as an
agent inside the real bridge, and the shell runner behind its ``run`` steps.

Rules:
- The script's effects go through the shared :class:`~actors.child.scripted.ScriptedDriver`, the
  same driver the simulation runs: the bridge adds only real commands and real time.
- A ``run`` step is ``bash -c COMMAND`` in a process group of its own (inside the bridge's
  session, which the parent sweeps when the bridge exits); its result is the exit status as a
  shell reports it and the last :data:`~actors.runtime.procs.OUTPUT_TAIL_BYTES` of stdout+stderr.
- ``close`` stops every running command (SIGTERM, then SIGKILL after the grace period), and
  so does the parent ending the script's task (``control cancel_task``), without waiting.
- The options are checked by :meth:`ScriptedAdapter.check_options`, which the parent also
  runs before it starts the bridge: the script must be a regular file of at most
  :data:`~protocol.scripted.script.MAX_SCRIPT_BYTES` that parses as a script.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from actors.child.adapters import AgentContext, Wrap
from actors.child.scripted import ScriptedDriver
from actors.runtime.procs import (
    KILL_GRACE_S,
    OUTPUT_TAIL_BYTES,
    OutputTail,
    exit_status,
    pump_process,
    signal_group,
)
from protocol.core.errors import ShepherdError
from protocol.scripted.script import MAX_SCRIPT_BYTES, Script, ScriptError, load_script_text
from protocol.scripted.script_machine import ScriptMachine
from protocol.wire.envelopes import AnyEnvelope, RuntimeEnvelope

__all__ = ["ScriptedAdapter", "ShellRunner", "load_script_file"]


def load_script_file(path: object, cwd: str) -> Script:
    """Read and parse the script file ``path`` (relative to ``cwd``): a regular file (never a
    FIFO or a device, which could block or never end) of at most MAX_SCRIPT_BYTES."""
    if not isinstance(path, str) or not path.strip():
        raise ScriptError('a scripted agent needs "script": the path of its script file')
    full = os.path.join(cwd, path)
    try:
        st = os.stat(full)
    except OSError as exc:
        raise ScriptError(f"script file {path!r} does not exist or cannot be read: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ScriptError(f"script file {path!r} is not a regular file")
    if st.st_size > MAX_SCRIPT_BYTES:
        raise ScriptError(
            f"script file {path!r} is {st.st_size} bytes; a script is at most "
            f"{MAX_SCRIPT_BYTES} bytes"
        )
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_SCRIPT_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"cannot read script {path!r}: {exc}") from None
    try:
        return load_script_text(text, toml=path.endswith(".toml"))
    except ScriptError as exc:
        raise ScriptError(f"script file {path!r}: {exc.message}") from None


class ShellRunner:
    """Runs ``bash -c COMMAND`` for scripted ``run`` steps.

    The command starts on the core thread (so a ``close`` processed right after it always
    finds it) in a process group of its own inside the bridge's session, so one group signal
    stops it and everything it started (and the parent's sweep of the bridge's session
    reaches it even if the bridge dies); a worker thread collects the last
    :data:`OUTPUT_TAIL_BYTES` of stdout+stderr and the exit status and hands them to ``done``
    (which posts back to the core). A command is signalled only while it is listed as
    running, and it is unlisted before it is reaped, so its group id cannot have been reused.
    """

    def __init__(
        self,
        cwd: str | None,
        environ: Mapping[str, str],
        grace_s: float = KILL_GRACE_S,
        wrap: Wrap | None = None,
    ) -> None:
        self._cwd = cwd
        self._environ = dict(environ)
        #: the agent's sandbox (AgentContext.sandboxed), if the commands run in one
        self._wrap = wrap
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._running: dict[subprocess.Popen[bytes], threading.Thread] = {}

    def run(self, command: str, done: Callable[[str, int], None]) -> None:
        argv, env = ["bash", "-c", command], self._environ
        try:
            if self._wrap is not None:
                argv, env = self._wrap(argv, env)
            proc = subprocess.Popen(
                argv,
                cwd=self._cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        except (OSError, ShepherdError) as exc:  # a sandbox that cannot be made: not run
            done(f"cannot run command: {exc}", 127)
            return
        thread = threading.Thread(
            target=self._wait, args=(proc, done), name="shepherd-run", daemon=True
        )
        with self._lock:
            self._running[proc] = thread
        thread.start()

    def _wait(self, proc: subprocess.Popen[bytes], done: Callable[[str, int], None]) -> None:
        tail = OutputTail(OUTPUT_TAIL_BYTES)
        try:
            pump_process(proc, lambda _stream, data: tail.write(data))
        finally:
            with self._lock:
                self._running.pop(proc, None)  # never signalled again: safe to reap
            code = exit_status(proc.wait())
            assert proc.stdout is not None
            proc.stdout.close()
        done(tail.text(), code)

    def _signal(self, procs: list[subprocess.Popen[bytes]], sig: int) -> None:
        with self._lock:
            for proc in procs:
                if proc in self._running:
                    signal_group(proc.pid, sig)

    def stop_all(self) -> None:
        """Stop every running command without waiting (the task they worked for ended):
        SIGTERM to each command's group now, SIGKILL to what is left after the grace."""
        with self._lock:
            running = list(self._running)
        if not running:
            return
        self._signal(running, signal.SIGTERM)
        timer = threading.Timer(self._grace_s, self._signal, args=(running, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def close(self, grace_s: float | None = None) -> None:
        """Stop every running command and wait for it (SIGTERM, then SIGKILL after the grace)."""
        grace = self._grace_s if grace_s is None else grace_s
        with self._lock:
            running = list(self._running.items())
        self._signal([proc for proc, _ in running], signal.SIGTERM)
        for proc, thread in running:
            thread.join(timeout=grace)
            if thread.is_alive():
                self._signal([proc], signal.SIGKILL)
                thread.join(timeout=grace + 1)


class ScriptedAdapter:
    """The built-in scripted agent: a :class:`~protocol.scripted.script_machine.ScriptMachine`
    driven by the shared :class:`~actors.child.scripted.ScriptedDriver`. Options: ``{"script":
    PATH}`` (JSON, or TOML when the name ends in ``.toml``; relative to the agent's cwd).
    ``control`` cancel / abort are only recorded (the driver outputs them); steer is the machine's
    own queue jump."""

    name: ClassVar[str] = "scripted"

    @staticmethod
    def check_options(options: Mapping[str, Any], cwd: str) -> Script:
        """The options, checked (the parent runs this before starting the bridge)."""
        return load_script_file(options.get("script"), cwd)

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None:
        script = self.check_options(options, ctx.cwd)
        self._ctx = ctx
        self._runner = ShellRunner(ctx.cwd, ctx.child_environ(), wrap=ctx.sandboxed)
        self.driver = ScriptedDriver(
            ScriptMachine(script),
            ctx.env.identity,
            publish=self._publish,
            clock=ctx.clock,
            ids=ctx.ids,
            run_command=self._runner.run,
            post=ctx.post,
            on_exit=ctx.finish,
            stop_commands=self._runner.stop_all,
        )

    def _publish(self, envelope: AnyEnvelope) -> None:
        if isinstance(envelope, RuntimeEnvelope) and envelope.event == "ready":
            return  # the bridge already said ready, with its pid
        self._ctx.publish(envelope)

    def start(self) -> None:
        self.driver.start()

    def deliver(self, envelope: AnyEnvelope) -> None:
        self.driver.on_envelope(envelope)

    def close(self) -> None:
        if self.driver.exited is None:
            self.driver.exited = 0  # late completions are ignored; the bridge says "exit"
        self._runner.close()
