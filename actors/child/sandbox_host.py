"""What an agent's sandbox needs of its host (:mod:`actors.child.sandbox`'s rules 1 and 3):
bubblewrap's command line around a program (the namespaces, the ``/tmp`` bound, the
capabilities dropped), the check that it works here (once per process, cached when it does),
the pids cgroups that bound an agent's processes, and the removal of what a bridge left
outside once it has exited, however it ended (its pids group, its socket's directory)."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from protocol.core.errors import InvalidArgument, SandboxUnavailable
from protocol.records.sandbox import is_normal_path

__all__ = [
    "bwrap",
    "check_available",
    "check_workdir",
    "clear_sandbox_leftovers",
    "clearing",
    "empty_group",
    "inner",
    "leftover_name",
    "namespaces",
    "pids_base",
    "pids_group",
    "private_dir",
    "probe",
]


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed here: install it (Debian: apt-get install "
            "bubblewrap) or spawn without --sandbox"
        )
    return found


def namespaces(net: bool) -> list[str]:
    spaces = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    spaces += ["--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent"]
    return spaces if net else [*spaces, "--unshare-net"]


def inner(tmp_mb: int) -> list[str]:
    """Set the size bounds, then drop every capability and run the agent's program (rule 3)."""
    script = (
        f"mount -o remount,size={tmp_mb}m /tmp && mount -o remount,size={tmp_mb}m /dev && "
        'exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"'
    )
    return ["--cap-add", "CAP_SYS_ADMIN", "--", "/bin/sh", "-c", script, "shepherd-sandbox"]


@functools.lru_cache(maxsize=4)
def probe(net: bool) -> None:
    """Run the sandbox's very shape once (cached only when it works)."""
    argv = [bwrap(), *namespaces(net), "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += ["--dev", "/dev", "--tmpfs", "/tmp", *inner(1), "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap could not run: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-300:]
        raise SandboxUnavailable(f"bubblewrap cannot make the sandbox here: {said}")


def pids_base() -> Path | None:
    """The pids cgroup of this process, where an agent's group is made (None: none usable).
    cgroup v1 (a ``pids`` hierarchy) or v2 (``pids`` among the controllers)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        where, kind, opts = fields[1], fields[2], fields[3].split(",")
        if kind == "cgroup" and "pids" in opts:
            path = next((c.split(":", 2)[2] for c in own if ":pids:" in c), "/")
            return Path(where + path)
        if kind == "cgroup2":
            path = next((c.split(":", 2)[2] for c in own if c.startswith("0::")), "/")
            base = Path(where + path)
            with contextlib.suppress(OSError):
                if "pids" in (base / "cgroup.subtree_control").read_text().split():
                    return base
    return None


def pids_group(name: str, limit: int) -> Path:
    """A new pids cgroup of at most ``limit`` processes (rule 3)."""
    base = pids_base()
    if base is None:
        raise SandboxUnavailable(
            "no pids cgroup can be made here to bound the sandbox's processes; "
            "give --sandbox-pids 0 to run without that bound"
        )
    group = base / name
    try:
        group.mkdir(mode=0o755, exist_ok=True)
        (group / "pids.max").write_text(f"{limit}\n")
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        raise SandboxUnavailable(
            f"the sandbox's process bound cannot be set ({exc.strerror} at {group}); "
            "give --sandbox-pids 0 to run without it"
        ) from None
    return group


def check_workdir(cwd: str) -> None:
    """A sandboxed agent cannot work in ``/``: all of it would be writable."""
    if os.path.realpath(cwd) == "/":
        raise InvalidArgument("spawn: a sandboxed agent cannot work in / (all of it writable)")


def check_available(options: Mapping[str, Any], cwd: str) -> None:
    """Rule 1, the parent's (or a node's) check before a sandboxed spawn is accepted, of an
    agent that would work in ``cwd``."""
    check_workdir(cwd)
    probe(bool(options.get("sandbox_net")))
    for path in options.get("sandbox_rw") or ():  # of the right shape (the rule says the rest)
        if is_normal_path(str(path)) and not os.path.exists(str(path)):
            raise InvalidArgument(f"spawn: sandbox_rw: {str(path)[:200]} does not exist")
    pids = options.get("sandbox_pids")
    if pids != 0:
        trial = pids_group(f"shepherd-probe-{os.getpid()}-{secrets.token_hex(4)}", 1)
        with contextlib.suppress(OSError):
            trial.rmdir()


def leftover_name(agent_id: str, bridge_pid: int) -> str:
    """The name of a bridge's pids group and of its socket's directory (in the temporary
    directory): whoever sees the bridge exit can find and remove them."""
    return f"shepherd-{agent_id}-{bridge_pid}"


def clear_sandbox_leftovers(agent_id: str, bridge_pid: int) -> None:
    """Remove what a sandboxed agent's bridge made outside, once it has exited, however it
    ended (its own close removes them; a ``SIGKILL`` does not): its pids group (killing what
    is left in it) and its socket's directory."""
    name = leftover_name(agent_id, bridge_pid)
    base = pids_base()
    if base is not None and (base / name).is_dir():
        empty_group(base / name)
    sockets = Path(tempfile.gettempdir()) / name
    if sockets.is_dir() and not sockets.is_symlink() and sockets.stat().st_uid == os.getuid():
        shutil.rmtree(sockets, ignore_errors=True)


def clearing(
    sandboxed: bool, agent_id: str, pid: int, on_exit: Callable[[int], None]
) -> Callable[[int], None]:
    """``on_exit`` of an agent's bridge ``pid`` (the parent's launcher's, a node's), after
    what a sandboxed one left outside is removed (:func:`clear_sandbox_leftovers`)."""
    if not sandboxed:
        return on_exit

    def exited(code: int) -> None:
        clear_sandbox_leftovers(agent_id, pid)
        on_exit(code)

    return exited


def private_dir(path: Path) -> str:
    """``path`` made anew, 0700 (a fresh random one beside it if the name is taken)."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        return tempfile.mkdtemp(prefix=f"{path.name}-")
    return str(path)


def empty_group(group: Path) -> None:
    """Kill what is left in an agent's process group, then remove it (at most ~2 s)."""
    for _ in range(200):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)  # the kernel takes killed processes out of the group
    with contextlib.suppress(OSError):
        group.rmdir()
