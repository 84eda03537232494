"""Shared helpers: the clock, percentiles, temporary directories, machine facts, processes.

Every timestamp that crosses a process boundary is ``CLOCK_MONOTONIC`` in nanoseconds: on Linux
one clock for every process of the host, so a publisher's stamp and a receiver's reading compare.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

SCRIPTS_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = SCRIPTS_DIR.parent
RESULT_MARK = "BENCH-RESULT "
READY_LINE = "ready"
GO_LINE = "go"


def now_ns() -> int:
    """The cross-process clock (CLOCK_MONOTONIC, nanoseconds)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def ms(ns: float) -> float:
    return ns / 1e6


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in 0..100 (numpy's default method)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def latency_summary(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / max / mean of latencies given in ns, reported in ms."""
    if not samples_ns:
        return {"n": 0}
    return {
        "n": len(samples_ns),
        "p50_ms": ms(percentile(samples_ns, 50)),
        "p99_ms": ms(percentile(samples_ns, 99)),
        "max_ms": ms(max(samples_ns)),
        "mean_ms": ms(sum(samples_ns) / len(samples_ns)),
    }


def memory_base_dir() -> Path:
    """Where benchmark mailboxes go: the filesystem Shepherd itself would use for its inboxes
    (``$XDG_RUNTIME_DIR``, else ``/dev/shm``, else the temp dir), never a fixed path."""
    from actors.transports.mailbox.mailbox import default_runtime_dir

    return default_runtime_dir().parent


@contextlib.contextmanager
def temp_dir(prefix: str, base: Path | None = None) -> Iterator[Path]:
    """A private temporary directory, removed afterwards whatever happens."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fs_type(path: Path) -> str:
    """The filesystem type of ``path`` (longest mount point prefix in /proc/self/mountinfo)."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as info:
        for line in info:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) < 5 or not right:
                continue
            mount = fields[4].replace("\\040", " ")
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best):
                best, kind = mount, right.split()[0]
    return kind


def proc_status(field: str) -> int:
    """An integer field of /proc/self/status (``VmRSS`` in kB, ``Threads``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_bytes() -> int:
    return proc_status("VmRSS") * 1024


def os_threads() -> int:
    return proc_status("Threads")


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in ("pykka", "msgspec", "watchfiles", "loguru"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_version() -> str:
    """``git describe --always --dirty`` of the checkout being measured."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "-C", str(REPO_DIR), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return out.stdout.strip() or "unknown"
    return "unknown"


def shepherd_waker() -> str:
    """How a default ``Mailbox`` is woken here, for the session parent and for every other
    process (each built once on a scratch directory)."""
    import threading

    from actors.transports.mailbox.wakers import DEFAULT_DEBOUNCE_MS, DEFAULT_STEP_MS

    try:
        from actors.transports.mailbox.bell import default_waker
    except ImportError:
        return "unknown (no actors.transports.mailbox.bell)"
    shown = []
    try:
        for who, creator in (("parent", True), ("others", False)):
            with temp_dir("shepherd-bench-waker-") as scratch:
                (scratch / "new").mkdir()
                factory = default_waker(
                    creator=creator, debounce_ms=DEFAULT_DEBOUNCE_MS, step_ms=DEFAULT_STEP_MS
                )
                waker = factory([str(scratch / "new")], threading.Event())
                modes = getattr(waker, "modes", None)
                mode = modes[str(scratch / "new")] if modes else getattr(waker, "mode", "?")
                waker.close()
            shown.append(f"{who}: {type(waker).__name__} ({mode})")
    except Exception as exc:  # an unexpected API: say so rather than fail the run
        return f"unknown ({exc!r})"
    return "; ".join(shown)


def machine_facts(mailbox_dir: Path) -> dict[str, Any]:
    from actors.transports.mailbox.wakers import DEFAULT_DEBOUNCE_MS, DEFAULT_STEP_MS

    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "mailbox_dir": str(mailbox_dir),
        "mailbox_fs": fs_type(mailbox_dir),
        "mailbox_on_tmpfs": fs_type(mailbox_dir) == "tmpfs",
        "shepherd_waker": shepherd_waker(),
        "shepherd_watch_debounce_ms": DEFAULT_DEBOUNCE_MS,
        "shepherd_watch_step_ms": DEFAULT_STEP_MS,
    }


# ---------------------------------------------------------------------- processes


def compile_bytecode() -> bool:
    """Compile the project's modules to bytecode now, as a user's first run does; True if all
    compiled. Why: with ``PYTHONDONTWRITEBYTECODE`` set (some CI and container images set it)
    nothing writes ``__pycache__``, and every process started by a benchmark (a bridge, a CLI
    call) would compile every module it imports again: start-up figures would measure the
    compiler, not what a user pays on every call after the first."""
    import compileall

    return all(
        compileall.compile_dir(REPO_DIR / package, quiet=1, workers=1)
        for package in ("actors", "protocol")
    )


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a bench child: ``scripts/`` importable, output unbuffered."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(SCRIPTS_DIR) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def emit_result(result: dict[str, Any]) -> None:
    """A worker's answer: one marked JSON line on stdout."""
    sys.stdout.write(RESULT_MARK + json.dumps(result) + "\n")
    sys.stdout.flush()


def parse_result(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            value = json.loads(line[len(RESULT_MARK) :])
            assert isinstance(value, dict)
            return value
    return None


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """Terminate ``proc`` (and its group when it leads one) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class Publisher:
    """A ``bench_lib.publisher`` child: started, waited for (``ready``), released (``go``)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench_lib.publisher", json.dumps(params)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != READY_LINE:
            raise RuntimeError(f"publisher did not start ({line!r}): {self._stderr_tail()}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(GO_LINE + "\n")
        self.proc.stdin.flush()

    def result(self, timeout_s: float) -> dict[str, Any]:
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)
            raise RuntimeError("publisher did not finish") from None
        result = parse_result(out)
        if self.proc.returncode != 0 or result is None:
            raise RuntimeError(f"publisher failed ({self.proc.returncode}): {err[-2000:]}")
        return result

    def _stderr_tail(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            _, err = self.proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            return "(no stderr)"
        return str(err)[-2000:]

    def close(self) -> None:
        stop_process(self.proc)


def new_ids() -> tuple[str, str, str]:
    """A session id, an agent id and a capability for a bench mailbox."""
    from actors.runtime.ids import IdSource
    from protocol.core.ids import IdKind

    ids = IdSource()
    return ids.new(IdKind.SESSION), ids.new(IdKind.AGENT), ids.secret()


class ReadyTap:
    """A supervisor's story tap: when each agent's process first left ``starting`` (its
    bridge said ready)."""

    def __init__(self) -> None:
        self.ready: dict[str, float] = {}
        self._cond = threading.Condition()

    def __call__(self, line: str) -> None:
        name, _, rest = line.partition(": ")
        if rest.startswith("process ") and rest != "process starting":
            with self._cond:
                self.ready.setdefault(name, time.perf_counter())
                self._cond.notify_all()

    def wait_count(self, count: int, timeout_s: float) -> bool:
        """Until ``count`` agents are ready (False after ``timeout_s``)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.ready) >= count, timeout_s)

    def wait(self, name: str, timeout_s: float = 60) -> float | None:
        """When ``name`` became ready (``perf_counter``), or None after ``timeout_s``."""
        with self._cond:
            self._cond.wait_for(lambda: name in self.ready, timeout_s)
            return self.ready.get(name)

    def ready_at(self, name: str, timeout_s: float = 60) -> float:
        """:meth:`wait`, raising ``TimeoutError`` if it never became ready."""
        at = self.wait(name, timeout_s)
        if at is None:
            raise TimeoutError(f"{name} never became ready")
        return at
