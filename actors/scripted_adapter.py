"""The ``scripted`` adapter: a :class:`~protocol.script.ScriptMachine` run as an agent inside
the real bridge, and the shell runner behind its ``run`` steps.

Rules:
- The script's effects go through the shared :class:`~actors.scripted.ScriptedDriver`, the
  same driver the simulation runs: the bridge adds only real commands and real time.
- A ``run`` step is ``bash -c COMMAND`` in the bridge's own process group (so the parent's
  group kill reaches it); its result is the exit status as a shell reports it and the last
  :data:`~actors.procs.OUTPUT_TAIL_BYTES` of stdout+stderr.
- ``close`` stops every running command (SIGTERM, then SIGKILL after the grace period).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from actors.adapters import AgentContext
from actors.procs import KILL_GRACE_S, OUTPUT_TAIL_BYTES, OutputTail, exit_status, pump_process
from actors.scripted import ScriptedDriver
from protocol.envelopes import AnyEnvelope, RuntimeEnvelope
from protocol.script import ScriptError, ScriptMachine, load_script_text

__all__ = ["ScriptedAdapter", "ShellRunner"]


class ShellRunner:
    """Runs ``bash -c COMMAND`` for scripted ``run`` steps.

    The command starts on the core thread (so a ``close`` processed right after it always
    finds it) in the bridge's OWN process group, so the parent's group kill reaches it; a
    worker thread collects the last :data:`OUTPUT_TAIL_BYTES` of stdout+stderr and the exit
    status and hands them to ``done`` (which posts back to the core)."""

    def __init__(self, cwd: str | None, environ: Mapping[str, str]) -> None:
        self._cwd = cwd
        self._environ = dict(environ)
        self._lock = threading.Lock()
        self._running: dict[subprocess.Popen[bytes], threading.Thread] = {}

    def run(self, command: str, done: Callable[[str, int], None]) -> None:
        try:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=self._cwd,
                env=self._environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
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
            code = exit_status(proc.wait())
            assert proc.stdout is not None
            proc.stdout.close()
            with self._lock:
                self._running.pop(proc, None)
        done(tail.text(), code)

    def close(self, grace_s: float = KILL_GRACE_S) -> None:
        """Stop every running command (SIGTERM, then SIGKILL after ``grace_s``)."""
        with self._lock:
            running = list(self._running.items())
        for proc, _ in running:
            with contextlib.suppress(OSError):
                proc.terminate()
        for proc, thread in running:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
            thread.join(timeout=grace_s)


class ScriptedAdapter:
    """The built-in scripted agent: a :class:`~protocol.script.ScriptMachine` driven by the
    shared :class:`~actors.scripted.ScriptedDriver`. Options: ``{"script": PATH}`` (JSON, or
    TOML when the name ends in ``.toml``; relative to the agent's cwd). ``control`` cancel /
    abort are only recorded (the driver outputs them); steer is the machine's own queue jump."""

    name: ClassVar[str] = "scripted"

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None:
        path = options.get("script")
        if not isinstance(path, str) or not path:
            raise ScriptError('the scripted adapter needs the option "script" (a file path)')
        try:
            text = Path(ctx.cwd, path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ScriptError(f"cannot read script {path}: {exc}") from None
        script = load_script_text(text, toml=path.endswith(".toml"))
        self._ctx = ctx
        self._runner = ShellRunner(ctx.cwd, ctx.child_environ())
        self.driver = ScriptedDriver(
            ScriptMachine(script),
            ctx.env.identity,
            publish=self._publish,
            clock=ctx.clock,
            ids=ctx.ids,
            run_command=self._runner.run,
            post=ctx.post,
            on_exit=ctx.finish,
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
