"""An agent's sandbox (``spawn --sandbox``): its options' bounds, their checks, and what
``status`` shows of it. The sandbox itself is made by :mod:`actors.child.sandbox`.

Rules:

1. **Options only with a sandbox.** ``sandbox_rw``, ``sandbox_net``, ``sandbox_pids``,
   ``sandbox_tmp_mb`` and ``env`` say how the sandbox is made; without ``sandbox`` each is
   ``invalid_argument`` naming it (an agent outside a sandbox sees everything anyway).
2. **Writable paths** (``sandbox_rw``): at most :data:`MAX_SANDBOX_RW`, each an absolute,
   normalised path (no ``.`` or ``..`` part, no doubled or trailing ``/``, no NUL), of at most
   :data:`MAX_SANDBOX_PATH_CHARS` characters, and never ``/`` itself (the whole machine
   writable is no sandbox). Whether each exists is checked where the agent runs.
3. **Named variables** (``env``): at most :data:`MAX_ENV_NAMES` names of the parent's
   environment passed in, each a shell variable's name; ``SHEPHERD_*`` are the bridge's own
   (its identity and capability) and are refused.
4. **Defaults**: at most :data:`DEFAULT_SANDBOX_PIDS` processes (``0``: no bound), a
   temporary directory of :data:`DEFAULT_SANDBOX_TMP_MB` MiB, no network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec

from protocol.core.errors import InvalidArgument

__all__ = [
    "DEFAULT_SANDBOX_PIDS",
    "DEFAULT_SANDBOX_TMP_MB",
    "MAX_ENV_NAMES",
    "MAX_SANDBOX_PATH_CHARS",
    "MAX_SANDBOX_PIDS",
    "MAX_SANDBOX_RW",
    "MAX_SANDBOX_TMP_MB",
    "EnvNames",
    "SandboxPaths",
    "SandboxPids",
    "SandboxTmpMb",
    "SandboxView",
    "check_spawn",
    "is_normal_path",
    "view_of",
]

MAX_SANDBOX_RW: Final = 16
MAX_SANDBOX_PATH_CHARS: Final = 1024
MAX_SANDBOX_PIDS: Final = 65_536
DEFAULT_SANDBOX_PIDS: Final = 512
MAX_SANDBOX_TMP_MB: Final = 65_536
DEFAULT_SANDBOX_TMP_MB: Final = 256
MAX_ENV_NAMES: Final = 64

SandboxPath = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SANDBOX_PATH_CHARS)]
SandboxPaths = Annotated[tuple[SandboxPath, ...], msgspec.Meta(max_length=MAX_SANDBOX_RW)]
SandboxPids = Annotated[int, msgspec.Meta(ge=0, le=MAX_SANDBOX_PIDS)]
SandboxTmpMb = Annotated[int, msgspec.Meta(ge=1, le=MAX_SANDBOX_TMP_MB)]
EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
EnvNames = Annotated[tuple[EnvName, ...], msgspec.Meta(max_length=MAX_ENV_NAMES)]

#: the options that only a sandbox takes (rule 1), by their flags
_SANDBOX_ONLY: Final = {
    "sandbox_rw": "--sandbox-rw",
    "sandbox_net": "--sandbox-net",
    "sandbox_pids": "--sandbox-pids",
    "sandbox_tmp_mb": "--sandbox-tmp-mb",
    "env": "--env",
}


class SandboxView(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's sandbox as ``status`` shows it."""

    #: it may use the network (``--sandbox-net``)
    net: bool = False
    #: at most this many processes at once (0: no bound)
    pids: int = DEFAULT_SANDBOX_PIDS
    #: its temporary directory's size, MiB
    tmp_mb: int = DEFAULT_SANDBOX_TMP_MB
    #: paths it may write beside its working directory
    rw: tuple[str, ...] = ()
    #: the parent's variables passed in by name
    env: tuple[str, ...] = ()


def is_normal_path(path: str) -> bool:
    """Rule 2's shape: absolute, normalised, not the root."""
    if not path.startswith("/") or path == "/" or "\0" in path or path.endswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path[1:].split("/"))


def check_spawn(args: Any) -> None:
    """Rules 1-3 for a spawn's options (:class:`~protocol.calls.api.SpawnOptions`)."""
    if not args.sandbox:
        for field, flag in _SANDBOX_ONLY.items():
            value = getattr(args, field)
            if value not in (None, False):
                raise InvalidArgument(f"spawn: {field} ({flag}) needs sandbox (--sandbox)")
        return
    for path in args.sandbox_rw or ():
        if not is_normal_path(path):
            raise InvalidArgument(
                f"spawn: sandbox_rw: {path[:80]!r} must be an absolute, normalised path "
                "other than / (no '.', '..' or doubled '/')"
            )
    for name in args.env or ():
        if name.startswith("SHEPHERD_"):
            raise InvalidArgument(
                f"spawn: env: {name} is the agent's own Shepherd identity, never passed by name"
            )


def view_of(options: Mapping[str, Any]) -> SandboxView | None:
    """The sandbox of an agent with these options (None: it has none)."""
    if not options.get("sandbox"):
        return None
    pids = options.get("sandbox_pids")
    tmp_mb = options.get("sandbox_tmp_mb")
    return SandboxView(
        net=bool(options.get("sandbox_net")),
        pids=DEFAULT_SANDBOX_PIDS if pids is None else int(pids),
        tmp_mb=DEFAULT_SANDBOX_TMP_MB if tmp_mb is None else int(tmp_mb),
        rw=tuple(options.get("sandbox_rw") or ()),
        env=tuple(options.get("env") or ()),
    )
